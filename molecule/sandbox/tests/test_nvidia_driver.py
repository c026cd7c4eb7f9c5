"""provision.yml with the nvidia_driver role switched on, on the sandbox's Debian 12 nodes.

The sandbox's nodes are containers on this machine's kernel, with no GPU: no driver can be
installed or loaded there. What runs here is what stops provisioning before any change: the
role's preflight (nvidia_driver_facts, judged in Python) refusing a branch older than the CUDA
build of torch needs, Debian's 535 branch for cu130, and apt sources without the components
Debian's nvidia-driver comes from. The node image has Debian's main component only
(mmdebstrap's default, sandbox/roles/sandbox_cluster), so a check-mode run with a CUDA build
that Debian's branch runs stops at those sources, with the message that says what to add.
"""

from __future__ import annotations

import re

from launcher import Outcome, Playbook, recap_changes
from sandbox_nodes import Node

ENABLED = {"nvidia_driver_enabled": True}
CHECK_THE_ROLE_ONLY = ("--check", "--tags", "nvidia_driver,always")
PREFLIGHT_CHECK = "TASK [nvidia_driver : Check the inputs against the node]"


def assert_refused_in_the_preflight(outcome: Outcome, members: list[Node]) -> None:
    """Failed at the role's preflight check, which the cluster role runs before any role
    begins: no task ran after it, and no host changed."""
    assert outcome.rc != 0, outcome.output
    assert PREFLIGHT_CHECK in outcome.output, outcome.output
    assert "TASK [" not in outcome.output.rpartition(PREFLIGHT_CHECK)[2], outcome.output
    changes = recap_changes(outcome.output)
    assert set(changes) >= {member.name for member in members}, outcome.output
    assert not any(changes.values()), changes


def test_a_branch_older_than_the_cuda_build_needs_is_refused_before_anything_changes(
    playbook: Playbook, members: list[Node]
) -> None:
    variant = members[0].setting("pytorch_cuda_variant", "pytorch")
    assert variant == "cu130", "the sandbox installs torch's CUDA 13.0 build"
    outcome = playbook.run("provision.yml", {**ENABLED, "nvidia_driver_branch": "535"})
    assert_refused_in_the_preflight(outcome, members)
    for member in members:
        message = (
            f"{member.name}: nvidia_driver_branch is 535, but cu130 (CUDA 13.0) needs the 580 "
            "driver branch or newer"
        )
        assert message in outcome.output, outcome.output


def test_debian_12_is_refused_for_cu130_naming_its_branch_and_the_way_out(
    playbook: Playbook, members: list[Node]
) -> None:
    outcome = playbook.run("provision.yml", ENABLED)
    assert_refused_in_the_preflight(outcome, members)
    for member in members:
        message = (
            f"{member.name}: Debian 12 (bookworm) ships the NVIDIA driver branch 535 "
            "(nvidia-driver, non-free), older than the 580 branch that cu130 (CUDA 13.0) needs"
        )
        assert message in outcome.output, outcome.output
    assert "set nvidia_driver_enabled: false" in outcome.output
    assert "pytorch_cuda_variant: cu126" in outcome.output
    assert "nvidia_driver_branch is" not in outcome.output


def test_check_mode_with_a_cuda_build_debian_runs_names_the_missing_apt_components(
    playbook: Playbook, members: list[Node]
) -> None:
    for member in members:
        sources = member.host.check_output("cat /etc/apt/sources.list")
        assert re.fullmatch(r"deb \S+ bookworm main", sources.strip()), sources
    outcome = playbook.run(
        "provision.yml",
        {**ENABLED, "nvidia_driver_cuda_variant": "cu126"},
        args=CHECK_THE_ROLE_ONLY,
    )
    assert_refused_in_the_preflight(outcome, members)
    for member in members:
        message = (
            f"{member.name}: Debian's nvidia-driver comes from the contrib, non-free, "
            "non-free-firmware components, but the apt sources of bookworm list only main. Add "
            "contrib non-free non-free-firmware to the 'bookworm' entry of /etc/apt/sources.list"
        )
        assert message in outcome.output, outcome.output
    assert "ships the NVIDIA driver branch" not in outcome.output
