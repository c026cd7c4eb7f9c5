"""No root mesh: the nodes trust each other as the unprivileged training user only, its keys
work only from the cluster's own addresses, jobs run as that user in confined units, root is
refused unless allowed, and a cluster that an earlier version set up with a root mesh loses it.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from launcher import SHARED_DIR, Job, Playbook, attempts, job_vars
from sandbox_nodes import Node

SCRIPTS = Path(__file__).parent / "scripts"
BATCH_SSH = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
# An administrator's own key in root's authorized_keys: the migration must keep it.
ADMIN_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl admin@laptop"
)


def user_of(node: Node) -> str:
    return node.setting("ssh_trust_user", "ssh_trust")


def run_ssh(node: Node, argv: list[str]) -> tuple[int, str]:
    """An ssh command on the node: its exit status and output (testinfra takes a 255, ssh's
    own failure, for its own connection's)."""
    done = node.host.run(f'{shlex.join(argv)} 2>&1; echo "exit=$?"')
    *output, status = done.stdout.rstrip("\n").split("\n")
    return int(status.removeprefix("exit=")), "\n".join(output)


def ssh_as(source: Node, user: str, target: Node, *options: str) -> tuple[int, str]:
    """BatchMode ssh from source, as user, to target; its exit status and output."""
    argv = [*BATCH_SSH, *options, target.address, "true"]
    prefix = [] if user == "root" else ["runuser", "-u", user, "--"]
    return run_ssh(source, [*prefix, *argv])


def test_the_training_user_is_the_same_unprivileged_user_on_every_node(
    members: list[Node],
) -> None:
    user = user_of(members[0])
    assert user != "root"
    entries = {node.name: node.host.check_output(f"getent passwd {user}") for node in members}
    ids = {tuple(entry.split(":")[2:4]) for entry in entries.values()}
    assert len(ids) == 1, entries
    ((uid, gid),) = ids
    assert int(uid) >= 1000
    assert int(gid) >= 1000
    for node in members:
        home = entries[node.name].split(":")[5]
        assert node.host.file(home).is_directory
        assert node.host.file(home).user == user
        # Its own group, and the groups of the GPU device nodes that the node has: nothing more.
        groups = set(node.host.check_output(f"id -Gn {user}").split())
        present = {g for g in ("video", "render") if node.host.run(f"getent group {g}").rc == 0}
        assert groups == {user, *present}, (node.name, groups)


def test_root_reaches_no_other_node_and_the_training_user_does(
    member_pair: tuple[Node, Node],
) -> None:
    source, target = member_pair
    # Host keys aside (root has no known_hosts of the peers): only the user keys are tried.
    rc, stderr = ssh_as(source, "root", target, "-o", "StrictHostKeyChecking=no")
    assert rc == 255, stderr
    assert "Permission denied" in stderr
    assert ssh_as(source, user_of(source), target, "-o", "StrictHostKeyChecking=yes") == (0, "")


@pytest.fixture
def stolen_key(members: list[Node], outsider: Node) -> Iterator[str]:
    """The training user's private key of the master, copied into the outsider."""
    user = user_of(members[0])
    home = members[0].host.check_output(f"getent passwd {user}").split(":")[5]
    found = members[0].host.check_output(f"ls {home}/.ssh").split()
    name = next(key for key in ("id_ed25519", "id_ecdsa", "id_rsa") if key in found)
    private = members[0].host.check_output(f"cat {home}/.ssh/{name}")
    path = f"/root/stolen-{secrets.token_hex(4)}"
    outsider.host.run_expect([0], f"umask 077 && printf '%s\\n' {shlex.quote(private)} > {path}")
    yield path
    outsider.host.run(f"rm -f {path}")


def test_a_key_copied_off_a_node_is_refused_from_outside_the_cluster(
    members: list[Node], outsider: Node, stolen_key: str
) -> None:
    target = members[1]
    user = user_of(target)
    # The port is open to the outsider: only the key's from= stops it.
    assert outsider.connect(target.address, 22).connected
    since = target.host.check_output("date '+%Y-%m-%d %H:%M:%S'")
    login = [*BATCH_SSH, "-o", "StrictHostKeyChecking=no", "-o", "IdentitiesOnly=yes"]
    login += ["-i", stolen_key, f"{user}@{target.address}", "true"]
    rc, output = run_ssh(outsider, login)
    assert rc == 255, output
    assert "Permission denied" in output
    journal = target.host.check_output(f"journalctl --no-pager --since '{since}' _COMM=sshd")
    assert "with correct key but not from a permitted host" in journal, journal
    assert outsider.address in journal
    # The same key from a member of the cluster is accepted.
    assert ssh_as(members[0], user, target, "-o", "StrictHostKeyChecking=yes") == (0, "")


@pytest.fixture
def other_jobs(members: list[Node]) -> Iterator[list[str]]:
    """Another job's folders, the training user's, as an earlier job leaves them: its folder
    on every node, and its output folder on the shared folder."""
    other = f"other-{secrets.token_hex(4)}"
    local, shared = f"/var/lib/torch-cluster/jobs/{other}", f"{SHARED_DIR}/jobs/{other}/output"
    user = user_of(members[0])
    for node in members:
        node.host.run_expect([0], f"install -d -o {user} -g {user} -m 0755 {local}")
    members[0].host.run_expect([0], f"runuser -u {user} -- mkdir -p {shared}")
    yield [local, shared]
    for node in members:
        node.host.run(f"rm -rf {local}")
    members[0].host.run(f"rm -rf {SHARED_DIR}/jobs/{other}")


def test_a_job_runs_as_the_training_user_confined_and_resumes_from_its_snapshot(
    playbook: Playbook, members: list[Node], job: Job, other_jobs: list[str]
) -> None:
    user = user_of(members[0])
    uid = members[0].host.check_output(f"id -u {user}")
    extra = {
        "train_code_dir": str(SCRIPTS),
        "train_script": "confined_snapshot.py",
        "train_script_args": ["6", *other_jobs],
        "train_max_restarts": 1,
        "train_watch_interval": 2,
        "nproc": 1,
    }
    outcome = playbook.run("train.yml", job_vars(job, **extra))
    assert outcome.rc == 0, outcome.output
    record = attempts(playbook, job)
    assert len(record) == 2, record
    log = "\n".join(job.log(node) for node in members)
    for rank in range(len(members)):
        assert f"rank {rank}: id -u {uid} ({user})" in log
        probes = dict(re.findall(rf"rank {rank}: probe (\S+): (\w+)", log))
        assert probes["/etc"] == probes["/usr"] == "refused", probes
        assert probes[other_jobs[0]] == probes[other_jobs[1]] == "refused", probes
        assert probes[f"/home/{user}/.ssh"] == "refused", probes
        for writable in (job.output, "/tmp", f"/home/{user}", "/dev/shm"):
            assert probes[writable] == "written", (writable, probes)
    assert re.findall(r"probe /etc: refused \((\w+)\)", log)[0] == "EROFS"
    # The second attempt: every rank resumed from rank 0's snapshot of epoch 3.
    for rank in range(len(members)):
        assert f"rank {rank}: Resuming training from snapshot at Epoch 3" in log
    for node in members:
        for folder in other_jobs:
            assert node.host.run(f"ls {folder}").stdout == ""


def _authorized(node: Node, user: str) -> str:
    home = node.host.check_output(f"getent passwd {user}").split(":")[5]
    return node.host.run(f"cat {home}/.ssh/authorized_keys").stdout


@pytest.fixture
def admin_key(members: list[Node]) -> Iterator[str]:
    """An administrator's own line in root's authorized_keys on every node, removed after."""
    add = "install -d -m 0700 /root/.ssh && "
    add += f"printf '%s\\n' '{ADMIN_KEY}' >> /root/.ssh/authorized_keys"
    for node in members:
        node.host.run_expect([0], add)
    yield ADMIN_KEY
    for node in members:
        node.host.run(f"sed -i '\\|{ADMIN_KEY}|d' /root/.ssh/authorized_keys")


def test_root_is_refused_then_allowed_then_taken_away_by_the_next_provision(
    playbook: Playbook, members: list[Node], admin_key: str
) -> None:
    """ssh_trust_user=root: refused, changing nothing; with cluster_allow_root the root mesh
    of earlier versions works; provision.yml with the defaults then removes it, keeping every
    other line of root's authorized_keys. The tags keep it to the roles concerned (the
    preflight runs whatever the tags); the sandbox's shared folder stays mounted as the
    training user (an sshfs mount's user is part of its source)."""
    tags = ("--tags", "training_user,ssh_trust")
    user = user_of(members[0])
    as_root = {"ssh_trust_user": "root", "shared_storage_user": user}
    before = {node.name: _authorized(node, "root") for node in members}
    refused = playbook.run("provision.yml", as_root, args=tags)
    assert refused.rc != 0
    assert "cluster_allow_root: true" in refused.output, refused.output
    assert {node.name: _authorized(node, "root") for node in members} == before
    try:
        allowed = playbook.run("provision.yml", {**as_root, "cluster_allow_root": True}, args=tags)
        assert allowed.rc == 0, allowed.output
        assert ssh_as(members[0], "root", members[1], "-o", "StrictHostKeyChecking=yes") == (0, "")
        keys = {node.name: node.host.run("ls /root/.ssh").stdout.split() for node in members}
    finally:
        migrated = playbook.run("provision.yml", {}, args=tags)
    assert migrated.rc == 0, migrated.output
    assert "/root/.ssh/authorized_keys" in migrated.output
    for node in members:
        # Byte for byte what it was before the root mesh: the admin's line kept.
        assert _authorized(node, "root") == before[node.name], node.name
        assert admin_key in _authorized(node, "root")
        # The key pair the role made for root is gone.
        made = {name for name in keys[node.name] if name.startswith("id_")}
        assert made, keys[node.name]
        left = set(node.host.run("ls /root/.ssh").stdout.split())
        assert not made & left, (node.name, made & left)
    rc, stderr = ssh_as(members[0], "root", members[1], "-o", "StrictHostKeyChecking=yes")
    assert rc == 255, stderr
    assert ssh_as(members[0], user, members[1], "-o", "StrictHostKeyChecking=yes") == (0, "")
