"""The training user's key type: ed25519, or a FIPS-allowed type in FIPS mode."""

from __future__ import annotations

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.ssh_key_type import (
    choose,
    fips_enabled,
)


@pytest.mark.parametrize(
    ("text", "fips"), [("1\n", True), ("0\n", False), (None, False), ("", False)]
)
def test_fips_mode_is_read_from_the_kernel_file(text, fips):
    assert fips_enabled(text) is fips


@pytest.mark.parametrize(
    ("setting", "fips", "kind", "size", "file"),
    [
        ("auto", False, "ed25519", None, "id_ed25519"),
        ("auto", True, "ecdsa", 256, "id_ecdsa"),
        ("ecdsa", False, "ecdsa", 256, "id_ecdsa"),
        ("rsa", True, "rsa", 3072, "id_rsa"),
        ("ed25519", False, "ed25519", None, "id_ed25519"),
    ],
)
def test_the_key_follows_the_setting_and_fips_mode(setting, fips, kind, size, file):
    key, problem = choose(setting, fips)
    assert problem is None
    assert (key["type"], key["size"], key["file"], key["fips"]) == (kind, size, file, fips)


def test_ed25519_forced_on_a_fips_node_is_refused_with_the_reason():
    key, problem = choose("ed25519", True)
    assert key is None
    assert "FIPS mode" in problem
    assert "refuses ed25519" in problem
    assert "ecdsa" in problem


def test_an_unknown_type_is_named_with_the_choices():
    key, problem = choose("dsa", False)
    assert key is None
    assert "'dsa'" in problem
    assert "auto, ed25519, ecdsa, rsa" in problem
