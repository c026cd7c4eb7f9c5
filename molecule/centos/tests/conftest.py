"""Fixtures for the centos scenario: the containers that create.yml started.

Molecule runs these tests after converge, with MOLECULE_INVENTORY_FILE set. The members are the
hosts of the training group in rank order. Each is reached with testinfra's podman backend
(`podman exec` on the container named like the inventory host, which is what the podman
connection does too). Tests take `member` (parametrized over the members) or `member_pair` (an
ordered pair of different members), and `members` for the whole group.
"""

from __future__ import annotations

import functools
import itertools
import os

import pytest
import testinfra
from el_nodes import Node, role_defaults
from testinfra.utils.ansible_runner import AnsibleRunner


@functools.cache
def _runner() -> AnsibleRunner:
    return AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])


def _member_names() -> list[str]:
    """The training group's hosts, in inventory (rank) order."""
    group = role_defaults("cluster")["cluster_group"]
    return list(_runner().inventory.get(group, {}).get("hosts", []))


@functools.cache
def _node(name: str) -> Node:
    return Node(name, testinfra.get_host(f"podman://{name}"), _runner().get_variables(name))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = _member_names()
    if "member" in metafunc.fixturenames:
        metafunc.parametrize("member", names, indirect=True)
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


@pytest.fixture
def member(request: pytest.FixtureRequest) -> Node:
    return _node(request.param)


@pytest.fixture
def member_pair(request: pytest.FixtureRequest) -> tuple[Node, Node]:
    source, target = request.param
    return _node(source), _node(target)
