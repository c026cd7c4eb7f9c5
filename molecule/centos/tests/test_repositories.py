"""EPEL with CRB (and epel-next on CentOS Stream only) and NVIDIA's CUDA repository: enabled, and
their signing keys imported with the fingerprints the roles pin. The sandbox's EL9-like nodes
(molecule/sandbox/tests/test_el9.py) read them with the same functions (el_checks)."""

from __future__ import annotations

import functools

import el_checks
from el_nodes import Node, role_defaults, role_file

# NVIDIA's name for the CPU architecture in its repository ids (the nccl role's).
_NVIDIA_ARCH = {"x86_64": "x86_64", "aarch64": "sbsa"}


@functools.cache
def enabled_repos(member: Node) -> frozenset[str]:
    return el_checks.enabled_repos(member.host)


def key_installed(member: Node, fingerprint: str) -> bool:
    return el_checks.key_installed(member.host, fingerprint)


def test_epel_and_crb_are_enabled(member: Node) -> None:
    assert {"epel", "crb"} <= enabled_repos(member)


def test_epel_next_is_enabled_on_centos_stream_only(member: Node) -> None:
    expected = member.is_centos_stream and member.setting("epel_next", "epel")
    assert ("epel-next" in enabled_repos(member)) == expected
    assert member.host.package("epel-next-release").is_installed == expected


def test_epel_release_is_installed(member: Node) -> None:
    assert member.host.package("epel-release").is_installed


def test_epel_key_is_imported(member: Node) -> None:
    fingerprints = role_file("epel", "vars/RedHat.yml")["__epel_key_fingerprints"]
    assert key_installed(member, fingerprints[member.major_version])


def test_cuda_repository_is_enabled_and_its_key_imported(member: Node) -> None:
    arch = _NVIDIA_ARCH[member.host.system_info.arch]
    assert f"cuda-rhel{member.major_version}-{arch}" in enabled_repos(member)
    assert key_installed(member, role_defaults("nccl")["nccl_gpg_key_fingerprint"])
