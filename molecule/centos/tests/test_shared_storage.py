"""The jobs' shared folder served over NFS by the first node, as inventory/example sets it up:
every member mounts it, what one writes another reads, and the outsider cannot reach the
server (the export names the members only, and firewalld rejects everyone else)."""

from __future__ import annotations

import secrets

from el_nodes import Connection, Node

SHARED = "/shared"
EXPORT = "/srv/torch-cluster/shared"


def test_every_other_member_mounts_the_masters_export_over_nfs(
    other_member: Node, master: Node
) -> None:
    fstype, source = other_member.host.check_output(f"findmnt -n -o FSTYPE,SOURCE {SHARED}").split()
    assert fstype == "nfs4"
    assert source == f"{master.address}:{EXPORT}"
    line = next(
        line
        for line in other_member.host.file("/etc/fstab").content_string.splitlines()
        if f" {SHARED} " in line
    )
    assert "_netdev" in line.split()[3]


def test_the_export_names_the_members_only(master: Node, members: list[Node]) -> None:
    exported = master.host.check_output("exportfs -v")
    for node in members:
        assert node.address in exported
    assert master.host.service("nfs-server").is_running


def test_a_file_written_on_one_member_is_read_and_replaced_on_another(
    other_member: Node, master: Node
) -> None:
    name = f"{SHARED}/written-{secrets.token_hex(4)}"
    other_member.host.run_expect([0], f"echo from-{other_member.name} > {name}")
    assert master.host.check_output(f"cat {name}") == f"from-{other_member.name}"
    master.host.run_expect([0], f"echo from-master > {name}.new && mv {name}.new {name}")
    assert other_member.host.check_output(f"cat {name}") == "from-master"
    master.host.run_expect([0], f"rm {name}")


def test_the_outsider_cannot_reach_the_nfs_server(master: Node, outsider: Node) -> None:
    assert outsider.connect(master.address, 2049) == Connection("EHOSTUNREACH")
