"""provision.yml refuses a release the project does not support, before it changes anything."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest
from launcher import Playbook, recap_changes
from sandbox_nodes import PROJECT_DIR, Node

OS_RELEASES = PROJECT_DIR / "tests" / "unit" / "data" / "os-release"


@pytest.fixture
def pretending(members: list[Node]) -> Iterator[callable]:
    """Make a node's /etc/os-release say another release, and put the real one back."""
    changed: list[Node] = []

    def pretend(node: Node, release: str) -> None:
        text = (OS_RELEASES / release).read_text()
        node.host.run_expect([0], "cp -P /etc/os-release /etc/os-release.sandbox-keep")
        changed.append(node)
        node.host.run_expect(
            [0], f"rm /etc/os-release && printf %s {shlex.quote(text)} > /etc/os-release"
        )

    yield pretend
    for node in changed:
        node.host.run_expect([0], "mv -f /etc/os-release.sandbox-keep /etc/os-release")


@pytest.mark.parametrize(
    ("release", "message"),
    [
        ("rocky-8.10", "Rocky Linux 8.10 (Green Obsidian) (EL8) is not supported"),
        ("rhel-8.10", "Red Hat Enterprise Linux 8.10 (Ootpa) (EL8) is not supported"),
        ("centos-stream-10", "CentOS Stream 10 (Coughlan): EL10 is not supported yet"),
    ],
)
def test_an_unsupported_release_is_refused_before_anything_changes(
    playbook: Playbook, members: list[Node], pretending, release: str, message: str
) -> None:
    node = members[-1]
    pretending(node, release)
    outcome = playbook.run("provision.yml", {})
    assert outcome.rc != 0
    assert f"{node.name}: {message}" in outcome.output, outcome.output
    if release.startswith(("rocky-8", "rhel-8")):
        assert "Python 3.6" in outcome.output
    # The refusal comes before the facts: no role ran anywhere, nothing changed.
    assert "Gather the node's facts" not in outcome.output
    changes = recap_changes(outcome.output)
    assert set(changes) >= {member.name for member in members}
    assert not any(changes.values()), changes
