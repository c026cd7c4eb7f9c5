"""Fixtures for the centos scenario: the containers that create.yml started.

Molecule runs these tests after converge, with MOLECULE_INVENTORY_FILE set. The members are the
hosts of the training group in rank order (the first is the master); the outsider is a container on
their network that is not a member and that converge never provisioned. Each is reached with
testinfra's podman backend (`podman exec` on the container named like the inventory host, which is
what the podman connection does too). Tests take `member` (parametrized over the members),
`other_member` (a member other than the master) or `member_pair` (an ordered pair of different
members), `members` for the whole group, and `high_port` for a port of the range gloo and NCCL
connect on.
"""

from __future__ import annotations

import functools
import itertools
import os

import pytest
import testinfra
from el_nodes import Node, random_high_port, role_defaults
from testinfra.utils.ansible_runner import AnsibleRunner

OUTSIDER_GROUP = "centos_outsiders"


@functools.cache
def _runner() -> AnsibleRunner:
    return AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])


def _group(name: str) -> list[str]:
    """The hosts of an inventory group, in inventory (rank) order."""
    return list(_runner().inventory.get(name, {}).get("hosts", []))


def _member_names() -> list[str]:
    return _group(role_defaults("cluster")["cluster_group"])


@functools.cache
def _node(name: str) -> Node:
    return Node(name, testinfra.get_host(f"podman://{name}"), _runner().get_variables(name))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = _member_names()
    if "member" in metafunc.fixturenames:
        metafunc.parametrize("member", names, indirect=True)
    if "other_member" in metafunc.fixturenames:
        metafunc.parametrize("other_member", names[1:], indirect=True)
    if "member_pair" in metafunc.fixturenames:
        pairs = list(itertools.permutations(names, 2))
        metafunc.parametrize(
            "member_pair", pairs, indirect=True, ids=[f"{a}->{b}" for a, b in pairs]
        )


@pytest.fixture(scope="session")
def members() -> list[Node]:
    """The training group's hosts in rank order; at least two."""
    nodes = [_node(name) for name in _member_names()]
    assert len(nodes) >= 2, f"the scenario needs at least 2 members, got {nodes}"
    return nodes


@pytest.fixture(scope="session")
def master(members: list[Node]) -> Node:
    """The first host of the training group (node_rank 0)."""
    return members[0]


@pytest.fixture(scope="session")
def master_port(master: Node) -> int:
    return int(master.setting("cluster_master_port", "cluster"))


@pytest.fixture(scope="session")
def outsider() -> Node:
    """A container on the members' network that is not a member."""
    names = _group(OUTSIDER_GROUP)
    assert names, f"the scenario needs a host in {OUTSIDER_GROUP}"
    return _node(names[0])


@pytest.fixture
def member(request: pytest.FixtureRequest) -> Node:
    return _node(request.param)


@pytest.fixture
def other_member(request: pytest.FixtureRequest) -> Node:
    return _node(request.param)


@pytest.fixture
def member_pair(request: pytest.FixtureRequest) -> tuple[Node, Node]:
    source, target = request.param
    return _node(source), _node(target)


@pytest.fixture
def high_port() -> int:
    return random_high_port()
