"""The shared folder's logic (plugins/module_utils/storage/mounts.py and proof.py): the mount table
as the sandbox's nodes wrote it, mount point refusals, the server in a source, the proof's
verdict.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.mounts import (
    describe_mount,
    fstab_entry,
    missing_mount,
    mount_of,
    mount_point_problem,
    parse_mountinfo,
    resolve_shared_dir,
    source_host,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.proof import (
    proof_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.modules import torch_job_preflight

MOUNTS = Path(__file__).parents[1] / "data" / "mounts"
SSHFS_SOURCE = "root@10.89.0.2:/srv/torch-cluster/shared"


@pytest.mark.parametrize(
    ("source", "host"),
    [
        ("nfs1.example.com:/export/jobs", "nfs1.example.com"),
        ("10.0.0.5:/", "10.0.0.5"),
        ("torch@10.89.0.2:/srv/x", "10.89.0.2"),
        ("[fd00::1]:/export", "fd00::1"),
        ("torch@[fd00::1]:/export", "fd00::1"),
        ("mon1,mon2,mon3:/jobs", "mon1"),
        ("mon1:6789,mon2:6789:/", "mon1"),
        ("10.0.0.1@tcp:/lustre", "10.0.0.1"),
        ("mgs@o2ib1:/scratch", "mgs"),
        ("gluster1:/volume", "gluster1"),
        ("/dev/sdb1", ""),
        ("tmpfs", ""),
    ],
)
def test_the_server_is_found_in_a_mount_source(source: str, host: str) -> None:
    assert source_host(source) == host


def test_the_mount_table_of_an_sshfs_client_names_the_export() -> None:
    mounts = parse_mountinfo((MOUNTS / "mountinfo-sshfs-client").read_text())
    shared = mount_of("/shared/jobs/x/output", mounts)
    assert (shared["mount_point"], shared["fstype"], shared["source"]) == (
        "/shared",
        "fuse.sshfs",
        SSHFS_SOURCE,
    )
    # A folder elsewhere is on the container's root filesystem.
    assert mount_of("/var/lib/torch-cluster", mounts)["mount_point"] == "/"
    # /shared2 is not under /shared.
    assert mount_of("/shared2", mounts)["mount_point"] == "/"


def test_a_bind_mount_shows_the_folder_it_mounts() -> None:
    mounts = parse_mountinfo((MOUNTS / "mountinfo-bind-server").read_text())
    shared = mount_of("/shared", mounts)
    assert shared["root"] == "/srv/torch-cluster/shared"
    assert describe_mount(shared) == "overlay overlay[/srv/torch-cluster/shared] at /shared"


def test_escaped_paths_are_read_back() -> None:
    line = r"40 1 0:5 / /mnt/my\040jobs rw - nfs4 srv:/a\040b rw"
    (mount,) = parse_mountinfo(line)
    assert (mount["mount_point"], mount["source"]) == ("/mnt/my jobs", "srv:/a b")
    assert fstab_entry("/mnt/my jobs", r"srv:/a\040b /mnt/my\040jobs nfs4 _netdev 0 0") == {
        "source": "srv:/a b",
        "fstype": "nfs4",
        "options": "_netdev",
    }


def test_the_fstab_line_of_the_mount_point_is_found() -> None:
    text = (MOUNTS / "fstab-sshfs-client").read_text()
    assert fstab_entry("/shared/", text)["source"] == SSHFS_SOURCE
    assert fstab_entry("/other", text) == {}


MOUNTED = {"mount_point": "/shared", "fstype": "fuse.sshfs", "source": SSHFS_SOURCE, "root": "/"}
ROOT = {"mount_point": "/", "fstype": "overlay", "source": "overlay", "root": "/"}
OURS = {"source": SSHFS_SOURCE, "fstype": "fuse.sshfs", "options": "_netdev"}


@pytest.mark.parametrize(
    ("fstab", "mount", "entries", "problem"),
    [
        ({}, ROOT, None, ""),  # nothing there yet
        ({}, ROOT, [], ""),  # an empty folder
        (OURS, MOUNTED, ["jobs"], ""),  # mounted by an earlier run: its files are the share's
        ({}, ROOT, ["data", "notes.txt"], "holds 2 file(s) (data, notes.txt) that the mount"),
        ({}, MOUNTED, [], "is a mount point already (fuse.sshfs root@10.89.0.2"),
        ({**OURS, "source": "old:/x"}, ROOT, [], "/etc/fstab mounts old:/x (fuse.sshfs) at"),
    ],
)
def test_a_mount_point_that_would_hide_files_or_is_taken_is_refused(
    fstab: dict, mount: dict, entries: list[str] | None, problem: str
) -> None:
    found = mount_point_problem(
        "/shared", expected_source=SSHFS_SOURCE, fstab=fstab, mount=mount, entries=entries
    )
    assert (problem in found) if problem else found == ""


def test_many_hidden_files_are_counted_and_a_few_named() -> None:
    found = mount_point_problem(
        "/shared", expected_source="a:/b", fstab={}, mount=ROOT, entries=[f"f{i}" for i in range(9)]
    )
    assert "holds 9 file(s) (f0, f1, f2, f3, f4, ...)" in found


def test_auto_reads_the_roles_fact(tmp_path: Path) -> None:
    fact = tmp_path / "shared_storage.fact"
    assert resolve_shared_dir("auto", str(fact)) == ""
    fact.write_text('{"path": "/shared", "type": "nfs"}')
    assert resolve_shared_dir("auto", str(fact)) == "/shared"
    assert resolve_shared_dir("", str(fact)) == ""
    assert resolve_shared_dir("/lustre/jobs", str(fact)) == "/lustre/jobs"


# --- The proof's verdict ------------------------------------------------------------------
NODES = ["node0", "node1", "node2"]
LOCAL = {"mount_point": "/", "fstype": "ext4", "source": "/dev/sda1", "root": "/"}


def wrote(mount: dict = MOUNTED, ok: bool = True, error: str = "") -> dict:
    return {"ok": ok, "error": error, "mount": mount}


def saw(*names: str) -> dict:
    return {"seen": list(names), "error": ""}


def test_a_folder_every_node_shares_passes() -> None:
    writes = {name: wrote() for name in NODES}
    reads = {name: saw(*NODES) for name in NODES}
    assert proof_problems(NODES, "/shared", writes, reads) == []


def test_a_node_whose_mount_is_missing_is_named_with_what_it_sees() -> None:
    writes = {"node0": wrote(), "node1": wrote(LOCAL), "node2": wrote()}
    reads = {"node0": saw("node0", "node2"), "node1": saw("node1"), "node2": saw("node0", "node2")}
    (problem,) = proof_problems(NODES, "/shared", writes, reads)
    assert problem["node"] == "node1"
    assert (
        "sees another filesystem at /shared: not the files that node0, node2 wrote"
        in (problem["problem"])
    )
    assert "its /shared is on ext4 /dev/sda1 at /" in problem["problem"]
    assert f"theirs on fuse.sshfs {SSHFS_SOURCE} at /shared" in problem["problem"]


def test_a_node_where_the_proof_could_not_run_is_named_with_ansibles_reason() -> None:
    # As Ansible registers a task that sudo could not start (failed_when: false), and one
    # whose node did not answer (ignore_unreachable).
    sudo = {
        "changed": False, "failed": False, "rc": 1, "module_stdout": "",
        "module_stderr": "sudo: unknown user torch\nsudo: error initializing audit plugin\n",
        "msg": "Module result deserialization failed: No start of json char found",
    }  # fmt: skip
    gone = {"unreachable": True, "msg": "Failed to connect to the host via ssh"}
    writes = {"node0": wrote(), "node1": sudo, "node2": gone}
    reads = {"node0": saw("node0"), "node1": sudo, "node2": gone}
    problems = {p["node"]: p["problem"] for p in proof_problems(NODES, "/shared", writes, reads)}
    assert problems == {
        "node1": "cannot write to /shared: sudo: unknown user torch sudo: error initializing audit "
        "plugin",
        "node2": "did not answer",
    }


def test_a_node_that_cannot_write_to_its_bare_mount_point_is_named_as_missing_the_mount() -> None:
    # The training user may not write to root's empty mount point, where the mount is missing.
    denied = "[Errno 13] Permission denied: '/shared/.torch-cluster-proof'"
    writes = {"node0": wrote(), "node1": wrote(LOCAL, ok=False, error=denied), "node2": wrote()}
    reads = {"node0": saw("node0", "node2"), "node1": saw(), "node2": saw("node0", "node2")}
    (problem,) = proof_problems(NODES, "/shared", writes, reads)
    assert problem["node"] == "node1"
    assert problem["problem"] == (
        "sees another filesystem at /shared (its /shared is on ext4 /dev/sda1 at /; theirs on "
        f"fuse.sshfs {SSHFS_SOURCE} at /shared), and cannot write to /shared: {denied}. Is the "
        "shared folder mounted there?"
    )


def test_of_two_nodes_the_one_without_the_mount_is_named() -> None:
    nodes = ["node0", "node1"]
    writes = {"node0": wrote(), "node1": wrote(LOCAL)}
    reads = {"node0": saw("node0"), "node1": saw("node1")}
    (problem,) = proof_problems(nodes, "/shared", writes, reads)
    assert problem["node"] == "node1"
    assert "sees another filesystem at /shared" in problem["problem"]


def test_when_nothing_tells_the_nodes_apart_none_shares_the_folder() -> None:
    nodes = ["node0", "node1"]
    writes = {"node0": wrote(LOCAL), "node1": wrote(LOCAL)}
    reads = {"node0": saw("node0"), "node1": saw("node1")}
    problems = proof_problems(nodes, "/tmp", writes, reads)
    assert [p["node"] for p in problems] == nodes
    assert all(
        "sees only its own file in /tmp: no two nodes share it" in p["problem"] for p in problems
    )


def test_a_node_that_cannot_write_or_did_not_answer_is_named() -> None:
    writes = {"node0": wrote(), "node1": wrote(ok=False, error="[Errno 13] Permission denied")}
    reads = {"node0": saw("node0"), "node1": saw("node0")}
    problems = proof_problems(NODES, "/shared", writes, reads)
    assert problems == [
        {"node": "node1", "problem": "cannot write to /shared: [Errno 13] Permission denied"},
        {"node": "node2", "problem": "did not answer"},
    ]


def test_a_file_the_others_cannot_read_back_is_named() -> None:
    writes = {name: wrote() for name in NODES}
    # node2 wrote, but nobody (node2 included) read its file back: a write that never landed.
    reads = {name: saw("node0", "node1") for name in NODES}
    assert proof_problems(NODES, "/shared", writes, reads) == [
        {"node": "node2", "problem": "its file in /shared was not seen by the other nodes"}
    ]


# --- A mount that failed at boot, mounted again by the launcher's preflight ---------------------
def test_a_mount_in_fstab_that_is_not_mounted_is_missing() -> None:
    fstab = (MOUNTS / "fstab-sshfs-client").read_text()
    mounted = (MOUNTS / "mountinfo-sshfs-client").read_text()
    gone = "\n".join(line for line in mounted.splitlines() if " /shared " not in line)
    assert not missing_mount("/shared", fstab, mounted)
    assert missing_mount("/shared", fstab, gone)
    assert not missing_mount("/other", fstab, gone)  # not ours to mount
    assert not missing_mount("", fstab, gone)


class _Module:
    """What mount_again asks of AnsibleModule: check mode, and warnings."""

    def __init__(self, check_mode: bool = False) -> None:
        self.check_mode = check_mode
        self.warnings: list[str] = []

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def _fake_mount(tmp_path: Path, mountinfo: Path, works: bool) -> Path:
    """A `mount` first on PATH that adds the sshfs line to the mount table (or fails as a
    refused key does), and logs its arguments."""
    line = next(
        line
        for line in (MOUNTS / "mountinfo-sshfs-client").read_text().splitlines()
        if " /shared " in line
    )
    log = tmp_path / "mount.log"
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "mount"
    body = (
        f"echo '{line}' >> {mountinfo}"
        if works
        else "echo 'read: Connection reset by peer' >&2; exit 1"
    )
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\n{body}\n')
    script.chmod(0o755)
    return log


@pytest.fixture
def unmounted_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A mount table without the sshfs mount that fstab lists; PATH finds tmp_path/bin first."""
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "\n".join(
            line
            for line in (MOUNTS / "mountinfo-sshfs-client").read_text().splitlines()
            if " /shared " not in line
        )
        + "\n"
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    return mountinfo


FSTAB = str(MOUNTS / "fstab-sshfs-client")


def test_the_preflight_mounts_a_missing_shared_mount_again(
    tmp_path: Path, unmounted_node: Path
) -> None:
    preflight, module = torch_job_preflight, _Module()
    log = _fake_mount(tmp_path, unmounted_node, works=True)
    found = preflight.mount_again(module, "node1", "/shared", FSTAB, str(unmounted_node))
    assert found == (True, [])
    assert log.read_text() == "/shared\n"
    assert module.warnings == [
        "node1: the shared folder /shared was not mounted (its mount at boot failed); it is "
        "mounted again from /etc/fstab"
    ]
    # Mounted now: nothing to do the next time.
    assert preflight.mount_again(module, "node1", "/shared", FSTAB, str(unmounted_node)) == (
        False,
        [],
    )
    assert log.read_text() == "/shared\n"


def test_a_shared_mount_that_cannot_come_back_fails_the_preflight_with_the_reason(
    tmp_path: Path, unmounted_node: Path
) -> None:
    _fake_mount(tmp_path, unmounted_node, works=False)
    mounted, problems = torch_job_preflight.mount_again(
        _Module(), "node1", "/shared", FSTAB, str(unmounted_node)
    )
    assert not mounted
    assert len(problems) == 1
    assert problems[0].startswith(
        "node1: the shared folder /shared is not mounted, and mounting it again from /etc/fstab "
        "failed (read: Connection reset by peer)"
    )


def test_check_mode_mounts_nothing_and_says_it_would(tmp_path: Path, unmounted_node: Path) -> None:
    log = _fake_mount(tmp_path, unmounted_node, works=True)
    module = _Module(check_mode=True)
    found = torch_job_preflight.mount_again(module, "node1", "/shared", FSTAB, str(unmounted_node))
    assert found == (False, [])
    assert not log.exists()
    assert module.warnings == [
        "node1: the shared folder /shared is not mounted; a run would mount it again"
    ]
