"""The change detector of the suite sees what provisioning leaves on a node, so that an empty
provisioned_traces() on the bare cluster means something."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bare_cluster import PATHS, Cluster


@pytest.fixture
def node_with_a_trace(bare_cluster: Cluster) -> Iterator[tuple[str, str]]:
    """A bare node on which the first of PATHS exists, for the test only."""
    node, path = next(iter(bare_cluster.members)), PATHS[0]
    bare_cluster.ssh(node, f"mkdir {path}")
    yield node, path
    bare_cluster.ssh(node, f"rmdir {path}")


def test_provisioned_traces_show_a_provisioned_path(
    bare_cluster: Cluster, node_with_a_trace: tuple[str, str]
) -> None:
    node, path = node_with_a_trace
    assert bare_cluster.provisioned_traces()[node] == [f"path {path}"]
