"""One bare sandbox cluster for the whole preflight suite, removed at the end."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from bare_cluster import Cluster, ansible_env

CLUSTER_NAME = "preflight"
NODES = 2


@pytest.fixture(scope="session")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """NODES fresh nodes (sandbox/up.yml under a cluster name of its own), not provisioned."""
    tmp_dir = tmp_path_factory.mktemp(CLUSTER_NAME)
    cluster = Cluster(CLUSTER_NAME, tmp_dir / "state", ansible_env(tmp_dir))
    names = json.dumps(
        {"sandbox_cluster_name": cluster.name, "sandbox_cluster_state_dir": str(cluster.state_dir)}
    )
    try:
        up = cluster.playbook(
            "sandbox/up.yml", f"--extra-vars={names}", f"-e sandbox_nodes={NODES}"
        )
        assert up.returncode == 0, f"sandbox/up.yml failed:\n{up.stdout}\n{up.stderr}"
        traces = cluster.provisioned_traces()
        assert traces == {node: [] for node in cluster.members}, "the new nodes are not bare"
        yield cluster
    finally:
        down = cluster.playbook("sandbox/down.yml", f"--extra-vars={names}")
        assert down.returncode == 0, f"sandbox/down.yml failed:\n{down.stdout}\n{down.stderr}"
