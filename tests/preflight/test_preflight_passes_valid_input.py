"""The control for the bad inputs: with the bare cluster's own, valid inventory,
provision.yml passes its preflight. Only the preflight runs (--tags always: the cluster role
and the localhost play are tagged always, and so is every role's argument-spec validation),
so the nodes stay bare for the other tests."""

from __future__ import annotations

import pytest
from bare_cluster import Cluster, PlaybookRun, playbook_roles


@pytest.fixture(scope="module")
def preflight_run(bare_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> PlaybookRun:
    tmp = tmp_path_factory.mktemp("valid-input")
    return bare_cluster.provision({}, tmp / "extra-vars.json", "--tags=always")


def test_valid_input_passes_the_preflight(preflight_run: PlaybookRun) -> None:
    assert preflight_run.returncode == 0, preflight_run.stdout[-4000:] + preflight_run.stderr


def test_valid_input_passes_every_role_argument_spec(preflight_run: PlaybookRun) -> None:
    """Each role's validation ran and passed; this also proves that roles_started sees roles
    start, which the bad-input tests rely on to show that none did."""
    assert preflight_run.returncode == 0
    assert preflight_run.roles_started == playbook_roles("playbooks/provision.yml")
