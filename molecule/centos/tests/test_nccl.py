"""NCCL from NVIDIA's repository: libnccl and libnccl-devel at the build the role chose
(nccl_version auto: built for torch's CUDA) or was given, locked there, and the library and header
the loader and compilers find."""

from __future__ import annotations

import re

import el_checks
import pytest
from el_nodes import Node

PACKAGES = el_checks.NCCL_PACKAGES


def pinned(member: Node) -> tuple[str, str]:
    """(version, release) of NVIDIA's package that the role must have installed, e.g. ("2.30.7",
    "1+cuda13.0"). With nccl_version auto (the default) the role chose the build from the
    repository: the installed libnccl, whose CUDA must be the CUDA major version of torch's build;
    with a pin, the pinned build."""
    if member.setting("nccl_version", "nccl") == "auto":
        installed = member.host.package("libnccl")
        variant = member.setting("pytorch_cuda_variant", "pytorch")
        cuda_major = re.fullmatch(r"cu(\d+?)(\d)", variant).group(1)
        assert re.fullmatch(rf"\d+\+cuda{cuda_major}\.\d+", installed.release), installed.release
        return installed.version, installed.release
    version = member.setting("nccl_version", "nccl")
    release = member.setting("nccl_package_release", "nccl")
    return version, f"{release}+cuda{member.setting('nccl_cuda_version', 'nccl')}"


@pytest.mark.parametrize("package", PACKAGES)
def test_package_is_the_pinned_build(member: Node, package: str) -> None:
    assert el_checks.nccl_build(member.host, package) == pinned(member)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_is_locked_at_the_pinned_build(member: Node, package: str) -> None:
    assert el_checks.lock_entry(package, *pinned(member)) in el_checks.nccl_locks(member.host)


def test_header_declares_the_pinned_release(member: Node) -> None:
    assert el_checks.header_version(member.host) == pinned(member)[0]


def test_library_is_the_pinned_release(member: Node) -> None:
    assert el_checks.library_version(member.host) == pinned(member)[0]
