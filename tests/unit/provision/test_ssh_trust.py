"""The ssh_trust role's decisions (plugins/module_utils/provision/ssh_trust.py): the options a
peer's key is authorized with, and what of an earlier root mesh is removed
(plugins/modules/ssh_trust_revoke.py), checked on real-looking files (data/ssh_trust/, see its
README.md).
"""

from __future__ import annotations

import itertools
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.ssh_trust import (
    authorized_options,
    public_key_comment,
    without_block,
)

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parents[1] / "data" / "ssh_trust"
BIN = Path(sys.executable).parent
# The marker the role writes its blocks with, so that the files here are the role's.
MARKER = yaml.safe_load((ROOT / "roles" / "ssh_trust" / "vars" / "main.yml").read_text())[
    "__ssh_trust_block_marker"
]
BEGIN, END = MARKER.replace("{mark}", "BEGIN"), MARKER.replace("{mark}", "END")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEwb+Y2VXng7tHMiuDdgU/S4xAgG1+leNCSmOKAKSoCI"


# --- The peers' keys: only from the members, restricted


@pytest.mark.parametrize(
    ("addresses", "options"),
    [
        (["10.0.0.1", "10.0.0.2"], 'from="10.0.0.1,10.0.0.2",restrict'),
        # Numeric order, not the text's: 10.0.0.10 after 10.0.0.9.
        (["10.0.0.10", "10.0.0.9", "10.0.1.1"], 'from="10.0.0.9,10.0.0.10,10.0.1.1",restrict'),
        # IPv6 in its short form, after IPv4.
        (["fd00::2", "10.0.0.1", "FD00:0:0:0:0:0:0:1"], 'from="10.0.0.1,fd00::1,fd00::2",restrict'),
        # A single node authorizes no one, but the options stay valid.
        (["192.0.2.7"], 'from="192.0.2.7",restrict'),
        # An address given twice is allowed once.
        (["10.0.0.1", " 10.0.0.1"], 'from="10.0.0.1",restrict'),
    ],
)
def test_a_peers_key_is_allowed_only_from_the_members_and_restricted(addresses, options):
    assert authorized_options(addresses) == options


def test_the_options_do_not_change_with_the_inventorys_order():
    addresses = ["10.0.0.3", "fd00::1", "10.0.0.1", "10.0.0.2"]
    options = {authorized_options(order) for order in itertools.permutations(addresses)}
    assert options == {'from="10.0.0.1,10.0.0.2,10.0.0.3,fd00::1",restrict'}


def test_the_authorized_line_is_the_options_then_the_key():
    # The role's block writes one such line per other member.
    line = f"{authorized_options(['10.0.0.2', '10.0.0.1'])} {KEY}"
    assert line == f'from="10.0.0.1,10.0.0.2",restrict {KEY}'


@pytest.mark.parametrize("address", ["node1", "10.0.0.300", "10.0.0.0/24", "", "fd00::g"])
def test_an_address_that_is_no_ip_address_is_named(address):
    with pytest.raises(ValueError, match=f"'{address}' is not an IP address"):
        authorized_options(["10.0.0.1", address])


def test_no_address_is_refused():
    with pytest.raises(ValueError, match="no address"):
        authorized_options([])


# --- An earlier root mesh: its marked blocks


@pytest.mark.parametrize(
    ("name", "kept", "entries"),
    [
        ("authorized_keys.root-mesh", "authorized_keys.root-mesh.kept", 2),
        ("known_hosts.root-mesh", "known_hosts.root-mesh.kept", 3),
    ],
)
def test_the_block_goes_and_every_other_line_stays_byte_for_byte(name, kept, entries):
    text, removed = without_block((DATA / name).read_text(), MARKER)
    assert (text, removed) == ((DATA / kept).read_text(), entries)


def test_a_file_that_is_only_the_block_becomes_empty():
    assert without_block((DATA / "authorized_keys.only-block").read_text(), MARKER) == (
        "",
        3,
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        f"{KEY} admin@laptop\n",
        f"{KEY} admin@laptop",
        # Another role's block, and a BEGIN the role never closed, are not its blocks.
        f"# BEGIN ANSIBLE MANAGED BLOCK\n{KEY}\n# END ANSIBLE MANAGED BLOCK\n",
        f"{BEGIN}\n{KEY}\n",
        f"{END}\n{KEY}\n{BEGIN}\n",
        # The marker's text inside a longer line is no marker.
        f"{BEGIN} (old)\n{KEY}\n{END} (old)\n",
    ],
)
def test_a_file_without_the_roles_block_stays_as_it_is(text):
    assert without_block(text, MARKER) == (text, 0)


@pytest.mark.parametrize(
    ("text", "kept", "entries"),
    [
        # blockinfile writes the markers alone for a single node.
        (f"{KEY} a@b\n{BEGIN}\n{END}\n", f"{KEY} a@b\n", 0),
        # An END without its newline, at the end of the file.
        (f"{KEY} a@b\n{BEGIN}\n{KEY}\n{END}", f"{KEY} a@b\n", 1),
        # Blank lines and comments inside are no keys.
        (f"{BEGIN}\n\n# note\n{KEY}\n{END}\nlast\n", "last\n", 1),
        # A block written twice goes twice.
        (f"{BEGIN}\n{KEY}\n{END}\nmid\n{BEGIN}\n{KEY}\n{END}\n", "mid\n", 2),
        # A file without a final newline keeps it so.
        (f"{BEGIN}\n{KEY}\n{END}\n{KEY} a@b", f"{KEY} a@b", 1),
    ],
)
def test_the_block_goes_whatever_its_shape(text, kept, entries):
    assert without_block(text, MARKER) == (kept, entries)


# --- An earlier root mesh: root's key pair


@pytest.mark.parametrize(
    ("text", "comment"),
    [
        (f"{KEY} root@node1\n", "root@node1"),
        (f"{KEY}\n", ""),
        (f"{KEY} my laptop key\n", "my laptop key"),
        ("", ""),
    ],
)
def test_a_public_keys_comment_is_read(text, comment):
    assert public_key_comment(text) == comment


# --- The modules, run by `ansible localhost` on this machine's Python


def module_result(run_module, name: str, args: dict, check: bool = False) -> dict:
    """The module's result; it may fail (rc 2), not crash."""
    done = run_module(name, args, check=check)
    assert done.returncode in (0, 2), done.stdout + done.stderr
    return done.result


def test_the_key_module_returns_the_options_for_the_peers(run_module):
    peers = {"node1": "10.0.0.2", "node0": "10.0.0.1", "node2": "fd00::3"}
    result = module_result(run_module, "ssh_trust_key", {"key_type": "ecdsa", "peers": peers})
    assert result["authorized_options"] == 'from="10.0.0.1,10.0.0.2,fd00::3",restrict'
    assert (result["type"], result["changed"]) == ("ecdsa", False)


def root_ssh(tmp: Path) -> Path:
    """root's ~/.ssh after an earlier root mesh, beside an administrator's own files."""
    ssh = tmp / "root-ssh"
    ssh.mkdir(mode=0o700)
    shutil.copy(DATA / "authorized_keys.root-mesh", ssh / "authorized_keys")
    shutil.copy(DATA / "known_hosts.root-mesh", ssh / "known_hosts")
    (ssh / "authorized_keys").chmod(0o640)
    (ssh / "known_hosts").chmod(0o600)
    pairs = {
        # The role's, and two of an administrator's: another host name, another user.
        "id_ed25519": "root@node1",
        "id_ecdsa": "root@node1.example.com",
        "id_rsa": "admin@laptop",
    }
    for name, comment in pairs.items():
        (ssh / name).write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        (ssh / name).chmod(0o600)
        (ssh / f"{name}.pub").write_text(f"{KEY} {comment}\n")
    return ssh


def revoke(run_module, ssh: Path, check: bool = False) -> dict:
    args = {"ssh_dir": str(ssh), "marker": MARKER, "key_comment": "root@node1"}
    return module_result(run_module, "ssh_trust_revoke", args, check=check)


def files(ssh: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mode & 0o777) for p in sorted(ssh.iterdir())}


def test_the_root_mesh_goes_and_the_administrators_files_stay(tmp_path, run_module):
    ssh = root_ssh(tmp_path)
    before = files(ssh)
    result = revoke(run_module, ssh)
    assert result["changed"]
    assert result["removed"] == [
        f"{ssh}/authorized_keys: 2 key(s) in the '{BEGIN}' block",
        f"{ssh}/known_hosts: 3 host key(s) in the '{BEGIN}' block",
        f"{ssh}/id_ed25519, {ssh}/id_ed25519.pub: the key pair root@node1",
    ]
    after = files(ssh)
    assert after == {
        "authorized_keys": ((DATA / "authorized_keys.root-mesh.kept").read_bytes(), 0o640),
        "known_hosts": ((DATA / "known_hosts.root-mesh.kept").read_bytes(), 0o600),
        **{name: before[name] for name in ("id_ecdsa", "id_ecdsa.pub", "id_rsa", "id_rsa.pub")},
    }
    # Once gone, nothing more to remove.
    again = revoke(run_module, ssh)
    assert (again["changed"], again["removed"]) == (False, [])
    assert files(ssh) == after


def test_in_check_mode_the_root_mesh_is_only_reported(tmp_path, run_module):
    ssh = root_ssh(tmp_path)
    before = files(ssh)
    result = revoke(run_module, ssh, check=True)
    assert result["changed"]
    assert len(result["removed"]) == 3
    assert files(ssh) == before


def test_a_node_without_roots_ssh_files_has_nothing_to_remove(tmp_path, run_module):
    result = revoke(run_module, tmp_path / "absent")
    assert (result["changed"], result["removed"]) == (False, [])
