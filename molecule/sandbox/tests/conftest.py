"""Fixtures for the sandbox scenario: the cluster that create.yml started, reached over SSH.

Molecule runs these tests after converge, with MOLECULE_INVENTORY_FILE set. The members are
the hosts of the training group in rank order (the first is the master); the outsider is a
container on the same network that is not a member. Tests take `member`, `other_member` (a
member other than the master) or `member_pair` (an ordered pair of different members) to be
parametrized over the cluster, and `listen` to start a TCP listener on a node: reachability
is proven with real connections (sandbox_nodes.Node.connect), not read from the firewall's
configuration.
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import secrets
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import testinfra
from launcher import Job, Playbook
from sandbox_nodes import LISTENER_SCRIPT, RANDOM_PORTS, Listen, Listener, Node, role_defaults
from testinfra.utils.ansible_runner import AnsibleRunner

# Each module's start and seconds, and each test's limit (clock.py).
pytest_plugins = ["clock"]

OUTSIDER_GROUP = "sandbox_outsiders"
EXTRA_GROUP = "extra_nodes"


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
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    host = testinfra.get_host(f"ansible://{name}?ansible_inventory={inventory}")
    return Node(name, host, _runner().get_variables(name))


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
def inventory_file() -> Path:
    """The inventory Molecule wrote for this scenario."""
    return Path(os.environ["MOLECULE_INVENTORY_FILE"])


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
def outsider() -> Node:
    """A host on the members' network that is not a member."""
    names = _group(OUTSIDER_GROUP)
    assert names, f"the scenario needs a host in {OUTSIDER_GROUP}"
    return _node(names[0])


@pytest.fixture(scope="session")
def extra_node() -> Node:
    """A node on the members' network, not in the training group, that the tests of lost
    nodes and spares add to it (and provision)."""
    names = _group(EXTRA_GROUP)
    assert names, f"the scenario needs a host in {EXTRA_GROUP}"
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
def playbook(inventory_file: Path, tmp_path: Path) -> Playbook:
    """The project's playbooks on the scenario's cluster, collecting into a folder of the test's."""
    return Playbook(inventory_file, tmp_path / "runs")


@pytest.fixture
def job() -> Job:
    """A job id of the test's own."""
    return Job(f"test-{secrets.token_hex(4)}")


@pytest.fixture
def master_port(master: Node) -> int:
    return int(master.setting("cluster_master_port", "cluster"))


@pytest.fixture
def listen() -> Iterator[Listen]:
    """listen(node, port=None) starts a TCP listener on the node (a random port of
    RANDOM_PORTS by default) and returns once it is listening; it is stopped after the test."""
    units: list[tuple[Node, str]] = []

    def start(node: Node, port: int | None = None) -> Listener:
        port = random.choice(RANDOM_PORTS) if port is None else port
        token = secrets.token_hex(8)
        unit = f"molecule-listener-{port}-{token}"
        units.append((node, unit))
        command = [
            "systemd-run",
            f"--unit={unit}",
            "--collect",
            "--quiet",
            "--property=Type=notify",
            "--property=TimeoutStartSec=20",
            "/usr/bin/python3",
            "-c",
            LISTENER_SCRIPT,
            str(port),
            token,
        ]
        started = node.host.run(shlex.join(command))
        assert started.rc == 0, (
            f"no listener on {node}:{port}: {started.stderr}"
            + node.host.run(f"journalctl --no-pager -n 20 -u {unit}").stdout
        )
        return Listener(node, port, token)

    yield start
    for node, unit in units:
        node.host.run(f"systemctl stop {unit}")
