"""NCCL from NVIDIA's repository: libnccl and libnccl-devel at the build the role chose
(nccl_version auto: built for torch's CUDA) or was given, locked there, and the library and header
the loader and compilers find."""

from __future__ import annotations

import re

import pytest
from el_nodes import Node

PACKAGES = ("libnccl", "libnccl-devel")
HEADER = "/usr/include/nccl.h"
LIBRARY = "/usr/lib64/libnccl.so.2"
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"


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
    installed = member.host.package(package)
    assert installed.is_installed
    assert (installed.version, installed.release) == pinned(member)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_is_locked_at_the_pinned_build(member: Node, package: str) -> None:
    version, release = pinned(member)
    locks = member.host.file(VERSIONLOCK_LIST).content_string.split()
    assert f"{package}-0:{version}-{release}.*" in locks


def test_header_declares_the_pinned_release(member: Node) -> None:
    header = member.host.file(HEADER)
    assert header.is_file
    defines = dict(
        re.findall(r"^#define\s+NCCL_(MAJOR|MINOR|PATCH)\s+([0-9]+)", header.content_string, re.M)
    )
    declared = ".".join(defines.get(part, "?") for part in ("MAJOR", "MINOR", "PATCH"))
    assert declared == pinned(member)[0]


def test_library_is_the_pinned_release(member: Node) -> None:
    library = member.host.file(LIBRARY)
    assert library.exists
    assert library.linked_to.endswith(f"/libnccl.so.{pinned(member)[0]}")
