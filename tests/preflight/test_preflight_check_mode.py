"""provision.yml in check mode on fresh nodes: it must not change them, and it should pass
(which needs every role to cope, in check mode, with packages that are not installed yet)."""

from __future__ import annotations

import pytest
from bare_cluster import Cluster, PlaybookRun


@pytest.fixture(scope="module")
def check_run(bare_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> PlaybookRun:
    tmp = tmp_path_factory.mktemp("check-mode")
    return bare_cluster.provision({}, tmp / "extra-vars.json", "--check")


def test_provision_check_mode_passes_on_fresh_nodes(check_run: PlaybookRun) -> None:
    assert check_run.returncode == 0, check_run.stdout[-4000:] + check_run.stderr


def test_provision_check_mode_changes_nothing(
    check_run: PlaybookRun, bare_cluster: Cluster
) -> None:
    assert bare_cluster.provisioned_traces() == {node: [] for node in bare_cluster.members}
