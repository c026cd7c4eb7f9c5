"""The nvidia_driver role's preflight on the provisioned members: provision.yml with a driver branch
older than the CUDA build of torch needs fails, names both branches, and changes nothing."""

from __future__ import annotations

import re
from pathlib import Path

from el_nodes import Node, cuda_version, provision

TOO_OLD_BRANCH = "535"
# The oldest driver branch that runs a CUDA version's builds (NVIDIA's CUDA release notes: 13.0
# needs a 580 driver).
NEEDED_BRANCH = {"13.0": "580"}

# What a driver install changes first: the packages and dnf's repositories.
_INSTALLED_STATE = "rpm -qa --queryformat '%{NEVRA}\\n' | sort && sha256sum /etc/yum.repos.d/*"


def installed_state(member: Node) -> str:
    return member.host.check_output(_INSTALLED_STATE)


def failure_messages(output: str) -> list[str]:
    """What each failed task reported, up to the next task header or the recap (whose timings
    are left out)."""
    return re.findall(r"FAILED! =>(.*?)(?=TASK \[|NO MORE HOSTS|PLAY RECAP|$)", output)


def names(branch: str, message: str) -> bool:
    return re.search(rf"\b{branch}\b", message) is not None


def test_preflight_refuses_a_branch_older_than_the_cuda_build_needs(
    members: list[Node], tmp_path: Path
) -> None:
    variant = members[0].setting("pytorch_cuda_variant", "pytorch")
    needed = NEEDED_BRANCH[cuda_version(variant)]
    before = {member: installed_state(member) for member in members}

    run = provision(
        tmp_path,
        "--extra-vars=nvidia_driver_enabled=true",
        f"--extra-vars=nvidia_driver_branch={TOO_OLD_BRANCH}",
    )

    assert run.returncode != 0, run.output
    messages = failure_messages(run.output)
    assert any(names(TOO_OLD_BRANCH, m) and names(needed, m) for m in messages), messages
    # Refused in the preflight: no role began its work, and no host reports a change.
    assert run.roles_started <= {"cluster"}, run.roles_started
    assert {member.name for member in members} <= set(run.changed), run.changed
    assert not any(run.changed.values()), run.changed
    assert {member: installed_state(member) for member in members} == before
