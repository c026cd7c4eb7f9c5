"""EPEL with CRB (and epel-next on CentOS Stream only) and NVIDIA's CUDA repository: enabled, and
their signing keys imported with the fingerprints the roles pin."""

from __future__ import annotations

import functools

from el_nodes import Node, role_defaults, role_file

# The repositories dnf has enabled, from its own configuration (no metadata download).
_ENABLED_REPOS = """
import json, dnf
base = dnf.Base()
base.read_all_repos()
print(json.dumps(sorted(repo.id for repo in base.repos.iter_enabled())))
"""

# NVIDIA's name for the CPU architecture in its repository ids (the nccl role's).
_NVIDIA_ARCH = {"x86_64": "x86_64", "aarch64": "sbsa"}


@functools.cache
def enabled_repos(member: Node) -> frozenset[str]:
    return frozenset(member.run_json("/usr/bin/python3", "-c", _ENABLED_REPOS))


def key_installed(member: Node, fingerprint: str) -> bool:
    """Whether rpm has the key with this fingerprint (rpm names it gpg-pubkey-<last 8 digits>)."""
    key_id = fingerprint.replace(" ", "")[-8:].lower()
    return member.host.run(f"rpm -q gpg-pubkey-{key_id}").rc == 0


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
