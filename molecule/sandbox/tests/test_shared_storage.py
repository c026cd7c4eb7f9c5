"""The jobs' shared folder: the shared_storage role's mount on every node (the sandbox's node0
serves it over sshfs, standing in for a site's NFS), the launcher's use of it, the proof that
it is shared, and the launcher's own copies of the output folder when there is none."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from launcher import SHARED_DIR, Job, Outcome, Playbook, attempts, job_vars, recap_changes
from sandbox_nodes import Node

SCRIPTS = Path(__file__).parent / "scripts"
EXAMPLES = Path(__file__).resolve().parents[3] / "train" / "examples"
EXPORT = "/srv/torch-cluster/shared"
FACT = "/etc/ansible/facts.d/shared_storage.fact"


def fstab(node: Node) -> str:
    return node.host.file("/etc/fstab").content_string


def test_every_node_mounts_the_folder_that_node0_serves_persistently(
    members: list[Node],
) -> None:
    server, *clients = members
    # Mounted with the training user's key, as that user.
    source = f"{server.setting('ssh_trust_user', 'ssh_trust')}@{server.address}:{EXPORT}"
    for node in clients:
        assert node.host.check_output(f"findmnt -n -o FSTYPE,SOURCE {SHARED_DIR}").split() == [
            "fuse.sshfs",
            source,
        ]
        line = next(line for line in fstab(node).splitlines() if f" {SHARED_DIR} " in line)
        assert line.startswith(f"{source} {SHARED_DIR} fuse.sshfs _netdev,")
    # The server shows the exported folder itself there (a bind mount).
    assert server.host.check_output(f"findmnt -n -o SOURCE {SHARED_DIR}").endswith(f"[{EXPORT}]")
    for node in members:
        fact = json.loads(node.host.file(FACT).content_string)
        assert fact == {"path": SHARED_DIR, "type": "fuse.sshfs", "source": source}
    # Written on one node, read and replaced on another, read back on the first.
    name = f"{SHARED_DIR}/written-{secrets.token_hex(4)}"
    clients[0].host.run_expect([0], f"echo from-client > {name}")
    assert server.host.check_output(f"cat {name}") == "from-client"
    server.host.run_expect([0], f"echo from-server > {name}.new && mv {name}.new {name}")
    assert clients[0].host.check_output(f"cat {name}") == "from-server"
    server.host.run_expect([0], f"rm {name}")


@pytest.mark.parametrize("shared", [SHARED_DIR, ""], ids=["shared folder", "no shared folder"])
def test_a_frameworks_main_process_first_self_test_needs_the_shared_folder(
    playbook: Playbook, members: list[Node], shared: str
) -> None:
    """accelerate (installed on the nodes through pytorch_extra_packages) runs its own
    distributed test of main_process_first on the CPU: every rank appends to the file that the
    main process wrote. It passes on the shared folder; without one, node1's ranks write to
    node1's disk, which is what the README says such scripts need a shared folder for."""
    job = Job(f"test-{secrets.token_hex(4)}", shared=shared)
    extra = {
        "job_id": job.job_id,
        "nproc": 2,
        "train_code_dir": str(SCRIPTS),
        "train_script": "accelerate_main_process_first.py",
        "train_script_args": [],
        "train_result_files": [],
        "train_env": {"ACCELERATE_USE_CPU": "true"},
        "train_shared_dir": "auto" if shared else "",
    }
    outcome = playbook.run("train.yml", extra)
    if shared:
        assert outcome.rc == 0, outcome.output
        assert "[rank0]: accelerate's process execution check passed" in job.log(members[0])
    else:
        assert outcome.rc != 0
        assert "AssertionError: Only wrote to file 2 times, not 4" in outcome.output


def test_a_master_that_lost_its_output_folder_resumes_from_another_nodes_copy(
    playbook: Playbook, members: list[Node]
) -> None:
    """Without a shared folder: the master's output folder is copied to node1 after every
    attempt; the master's copy is deleted between two runs, and the next run gathers node1's
    copy back before the start, so every rank resumes from it."""
    job = Job(f"test-{secrets.token_hex(4)}", shared="")
    master, other = members[0], members[1]

    def tutorial(epochs: int) -> Outcome:
        return playbook.run(
            "train.yml",
            job_vars(
                job,
                train_code_dir=str(EXAMPLES),
                train_script="snapshot_ddp.py",
                train_script_args=[str(epochs), "1"],
                train_result_files=[],
                train_shared_dir="",
            ),
        )

    first = tutorial(3)
    assert first.rc == 0, first.output
    after = attempts(playbook, job)[-1]["sync"]["after"]
    assert after["holders"] == [other.name]
    assert [(t["from"], t["to"], t["files"]) for t in after["transfers"]] == [
        (master.name, other.name, 1)
    ]
    master.host.run_expect([0], f"rm -r {job.output}")

    second = tutorial(5)
    assert second.rc == 0, second.output
    before = attempts(playbook, job)[0]["sync"]["before"]
    assert [(t["from"], t["to"]) for t in before["transfers"]] == [(other.name, master.name)]
    assert before["bytes"] > 0
    assert before["seconds"] > 0
    assert "Output folders, before attempt 1: 1 file(s)" in second.output
    second_run = job.log(master).split("attempt 1,")[-1]
    assert "[rank0]: Resuming training from snapshot at Epoch 3" in second_run
    assert "[rank0]: Epoch 5 | Training snapshot saved" in second_run


@pytest.fixture
def unmounted(members: list[Node]) -> Iterator[Node]:
    """The last node without its mount of the shared folder: a local, empty folder there."""
    node = members[-1]
    node.host.run_expect([0], f"umount {SHARED_DIR}")
    try:
        yield node
    finally:
        # Mounted again here unless the test's launch did it.
        node.host.run_expect([0], f"findmnt -n {SHARED_DIR} || mount {SHARED_DIR}")
        assert node.host.check_output(f"findmnt -n -o FSTYPE {SHARED_DIR}") == "fuse.sshfs"


def test_check_names_a_node_whose_mount_is_missing(
    playbook: Playbook, members: list[Node], unmounted: Node, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    outcome = playbook.run(
        "check.yml",
        {"check_runs_dir": str(runs), "check_baseline_file": str(tmp_path / "baseline.json")},
    )
    assert outcome.rc != 0
    problem = f"[shared folder] {unmounted.name}: sees another filesystem at {SHARED_DIR}"
    assert problem in outcome.output, outcome.output
    report = json.loads(next(runs.glob("check-*/report.json")).read_text())
    assert [f["subject"] for f in report["failures"]] == [unmounted.name]
    # The proof leaves nothing in the folder the mount goes back on.
    assert unmounted.host.check_output(f"ls -A {SHARED_DIR}") == ""


def test_a_launch_mounts_again_a_shared_folder_whose_mount_failed_at_boot(
    playbook: Playbook, job: Job, members: list[Node], unmounted: Node
) -> None:
    outcome = playbook.run("train.yml", job_vars(job, "--epochs", "1"))
    assert outcome.rc == 0, outcome.output
    said = " ".join(outcome.output.split())
    assert (
        f"{unmounted.name}: the shared folder {SHARED_DIR} was not mounted (its mount at boot "
        "failed); it is mounted again from /etc/fstab"
    ) in said
    assert unmounted.host.check_output(f"findmnt -n -o FSTYPE {SHARED_DIR}") == "fuse.sshfs"
    # The job ran on the shared folder: every node sees its output there.
    for node in members:
        assert node.host.file(f"{job.output}/metrics.json").exists


def test_a_job_does_not_start_on_a_folder_that_is_not_shared(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    outcome = playbook.run("train.yml", job_vars(job, "--epochs", "1", train_shared_dir="/tmp"))
    assert outcome.rc != 0
    assert "The job's shared folder /tmp is not one folder for every node" in outcome.output
    for node in members:
        assert f"{node.name}: sees only its own file in /tmp: no two nodes share it" in (
            outcome.output
        )
        assert not job.unit_exists(node)
        assert not node.host.file(job.folder).exists
        assert not node.host.file("/tmp/jobs").exists


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"train_shared_dir": "jobs"}, "train_shared_dir must be auto, empty, or an absolute path"),
        ({"train_shared_dir": "/no/such/folder"}, "the shared folder /no/such/folder"),
        ({"train_output_copies": 0}, "train_output_copies must be a whole number, 1 or more"),
    ],
)
def test_bad_shared_folder_inputs_of_a_job_are_refused(
    playbook: Playbook, job: Job, members: list[Node], extra: dict, message: str
) -> None:
    outcome = playbook.run("train.yml", job_vars(job, "--epochs", "1", **extra))
    assert outcome.rc != 0
    assert message in outcome.output, outcome.output
    for node in members:
        assert not job.unit_exists(node)
        assert not node.host.file(job.folder).exists


@pytest.fixture
def mismatched_user(members: list[Node]) -> Iterator[str]:
    """A user with another UID on each node."""
    name = f"u{secrets.token_hex(3)}"
    for index, node in enumerate(members):
        node.host.run_expect([0], f"useradd -M -u {2100 + index} {name}")
    yield name
    for node in members:
        node.host.run(f"userdel {name}")


def refusal(playbook: Playbook, members: list[Node], extra: dict, message: str) -> None:
    """provision.yml with these settings fails with the message and changes nothing."""
    before = {node.name: fstab(node) for node in members}
    outcome = playbook.run("provision.yml", extra, args=("--tags", "shared_storage"))
    assert outcome.rc != 0
    assert message in outcome.output, outcome.output
    assert not any(recap_changes(outcome.output).values()), outcome.output
    assert {node.name: fstab(node) for node in members} == before
    return outcome


def test_a_server_outside_the_group_is_refused(playbook: Playbook, members: list[Node]) -> None:
    refusal(
        playbook,
        members,
        {"shared_storage_server": "outsider0"},
        "shared_storage_server outsider0 is not a node of the training group",
    )


def test_a_source_that_does_not_answer_is_refused(playbook: Playbook, members: list[Node]) -> None:
    # node0 runs no NFS server: its port 2049 refuses the connection.
    source = f"{members[0].address}:/jobs"
    refusal(
        playbook,
        members,
        {
            "shared_storage_server": "",
            "shared_storage_source": source,
            "shared_storage_type": "nfs",
        },
        f"the source {source} does not answer: {members[0].address} port 2049",
    )


def test_a_mount_point_that_holds_files_is_refused(playbook: Playbook, members: list[Node]) -> None:
    # /opt holds the training environment (the sandbox's venv), which a mount would hide.
    refusal(
        playbook,
        members,
        {"shared_storage_path": "/opt"},
        "/opt holds 1 file(s) (torch-venv) that the mount would hide",
    )


def test_a_training_user_whose_uid_differs_between_nodes_is_refused(
    playbook: Playbook, members: list[Node], mismatched_user: str
) -> None:
    message = f"The training user {mismatched_user} must have the same UID and GID on every node"
    # Another mount point: the mounted one's source (user@node0:...) names the training user.
    extra = {"shared_storage_user": mismatched_user, "shared_storage_path": "/srv/uid-test"}
    outcome = refusal(playbook, members, extra, message)
    for index, node in enumerate(members):  # each node's UID:GID, named
        assert f"{node.name} {2100 + index}:" in outcome.output
