"""torch and torchvision at the pinned releases in the conda env, torch the CUDA build of the
variant (cu130: CUDA 13.0). The containers have no GPU, so cuda.is_available() is False: that
is not tested, and the pytorch role only fails on it where the driver sees GPUs."""

from __future__ import annotations

import functools
import json

from el_nodes import Node, cuda_version

FACT = "/etc/ansible/facts.d/pytorch.fact"

_REPORT = """
import json, torch, torchvision
print(json.dumps({
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "torchvision": torchvision.__version__,
    "nccl": torch.distributed.is_nccl_available(),
    "gloo": torch.distributed.is_gloo_available(),
}))
"""


@functools.cache
def report(member: Node) -> dict[str, object]:
    """What the env's torch says about itself (importing CUDA torch takes seconds: once a node)."""
    python = f"{member.setting('pytorch_env_dir', 'pytorch')}/bin/python"
    return member.run_json(python, "-c", _REPORT)


def test_torch_is_the_pinned_release(member: Node) -> None:
    # A local version label names the build: 2.14.1+cu130 is torch 2.14.1.
    assert str(report(member)["torch"]).split("+")[0] == member.setting(
        "pytorch_torch_version", "pytorch"
    )


def test_torch_is_the_cuda_build_of_the_variant(member: Node) -> None:
    variant = member.setting("pytorch_cuda_variant", "pytorch")
    assert report(member)["cuda"] == cuda_version(variant)


def test_torchvision_is_the_pinned_release(member: Node) -> None:
    assert str(report(member)["torchvision"]).split("+")[0] == member.setting(
        "pytorch_torchvision_version", "pytorch"
    )


def test_torch_has_the_nccl_and_gloo_backends(member: Node) -> None:
    assert (report(member)["nccl"], report(member)["gloo"]) == (True, True)


def test_local_fact_points_the_launcher_at_the_env(member: Node) -> None:
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
