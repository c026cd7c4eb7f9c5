"""The pinned torch and torchvision import in the training environment of every member."""

from __future__ import annotations

import functools
import json
import re
import shlex

import pytest
from launcher import Playbook, recap_changes
from sandbox_nodes import Node

FACT = "/etc/ansible/facts.d/pytorch.fact"

PACKAGES = {"torch": "pytorch_torch_version", "torchvision": "pytorch_torchvision_version"}

# Imports each package on its own and prints its version, or the error that stopped it.
_IMPORT = """
import importlib, json, sys
versions = {}
for name in sys.argv[1:]:
    try:
        versions[name] = importlib.import_module(name).__version__
    except Exception as error:
        versions[name] = f"import failed: {error!r}"
print(json.dumps(versions))
"""


@functools.cache
def imported_versions(member: Node) -> dict[str, str]:
    """What importing each of PACKAGES gives in the member's training environment (importing
    CUDA torch takes seconds, so once per member)."""
    python = f"{member.setting('pytorch_env_dir', 'pytorch')}/bin/python"
    return json.loads(member.host.check_output(shlex.join([python, "-c", _IMPORT, *PACKAGES])))


@pytest.mark.parametrize(("package", "pin"), PACKAGES.items(), ids=list(PACKAGES))
def test_pinned_package_imports_in_the_training_env(member: Node, package: str, pin: str) -> None:
    # A local version label names the build: 2.14.1+cu130 is torch 2.14.1.
    assert imported_versions(member)[package].split("+")[0] == member.setting(pin, "pytorch")


def test_local_fact_points_the_launcher_at_the_training_env(member: Node) -> None:
    env_dir = member.setting("pytorch_env_dir", "pytorch")
    fact = json.loads(member.host.file(FACT).content_string)
    expected = {
        "env_dir": env_dir,
        "python": f"{env_dir}/bin/python",
        "torchrun": f"{env_dir}/bin/torchrun",
        "torch_version": member.setting("pytorch_torch_version", "pytorch"),
        "cuda_variant": member.setting("pytorch_cuda_variant", "pytorch"),
    }
    assert {key: fact.get(key) for key in expected} == expected


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("cu128", "torch 2.14.1 has no cu128 build: PyTorch 2.14 ships cu126, cu130, cu132, cpu"),
        ("cuda13", "pytorch_cuda_variant is 'cuda13'; expected cpu or cuXYZ"),
    ],
)
def test_a_cuda_build_the_pinned_torch_lacks_is_refused_before_anything_changes(
    playbook: Playbook, members: list[Node], variant: str, message: str
) -> None:
    outcome = playbook.run(
        "provision.yml", {"pytorch_cuda_variant": variant}, args=("--tags", "pytorch")
    )
    assert outcome.rc != 0
    assert message in outcome.output, outcome.output
    assert not any(recap_changes(outcome.output).values())


def test_torchs_nccl_and_the_system_nccl_are_both_reported(
    playbook: Playbook, members: list[Node]
) -> None:
    """torch's wheels bring their own NCCL; the nccl role's system copy is another one (the
    sandbox has none: its nccl role is off). provision.yml shows both on every node."""
    outcome = playbook.run("provision.yml", {}, args=("--tags", "pytorch"))
    assert outcome.rc == 0, outcome.output
    assert not any(recap_changes(outcome.output).values())
    for node in members:
        version = node.host.check_output(
            f"{node.setting('pytorch_env_dir', 'pytorch')}/bin/python -c "
            "\"import torch; print('.'.join(map(str, torch.cuda.nccl.version())))\""
        )
        line = f"NCCL: torch's {version}; no system NCCL installed"
        assert re.search(
            rf"ok: \[{node.name}\] => {{\s+\"msg\": \"{re.escape(line)}\"", outcome.output
        ), outcome.output
