"""playbooks/slurm.yml and train.yml -e train_launcher=slurm on the scenario's cluster.

The module's first test turns the provisioned training group into a Slurm cluster (Debian's
slurmctld, slurmd, slurmdbd with MariaDB, munge) and runs it again to prove it idempotent; the
others submit real torchrun jobs through it: the same results as the default launcher, a job
that waits in the queue while another holds the nodes, a node's workers killed, stop.yml,
an exported batch script submitted by hand, and what is refused before anything is submitted.
Slurm stays set up for the modules after this one: the default launcher must work beside it.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from launcher import (
    LONG_JOB,
    SHARED_DIR,
    Job,
    Playbook,
    assert_script_environments,
    attempts,
    job_vars,
    metrics,
    recap_changes,
)
from sandbox_nodes import PROJECT_DIR, Connection, Node
from slurm_queue import accounting, settled, slurm_jobs, slurm_node

EXAMPLES = PROJECT_DIR / "train" / "examples"
SCRIPTS = Path(__file__).parent / "scripts"
SAVED = re.compile(r"^\[rank0\]: Epoch (\d+) \| Training snapshot saved at snapshot\.pt$", re.M)

# Devices that stand for two GPUs on each node (slurm_gres_gpu_files): the sandbox has none.
# Major 240 is for local use: no driver claims it.
FAKE_GPUS = ["/dev/fake-gpu0", "/dev/fake-gpu1"]
# Rank 0 quiet this long is a stall (train_stall_timeout), as in test_train_resilience.py.
STALL_TIMEOUT_S = 20
# The node health check's interval here (slurm_health_interval; 60 s by default).
HEALTH_INTERVAL_S = 10
# One run of the check may cost a node this much CPU (user + system seconds).
HEALTH_CPU_LIMIT_S = 1.0
# The playbook must fail, with every process gone, within this long of a kill.
TEARDOWN_LIMIT_S = 30
# ... and within this long of a worker's link pulled: train_lost_after (6 s), then the
# cancel and the record.
LOST_LIMIT_S = 30
SLURMCTLD_PORT, SLURMD_PORT, SLURMDBD_PORT = 6817, 6818, 6819
# What a host gets from firewalld's default zone for a port it does not open.
REJECTED = Connection("EHOSTUNREACH")


def slurm_vars(job: Job, *args: str, **extra: object) -> dict[str, object]:
    return job_vars(job, *args, train_launcher="slurm", **extra)


@pytest.fixture(scope="module")
def slurm_cluster(inventory_file, tmp_path_factory, members: list[Node]) -> dict[str, object]:
    """The team's people made users (provision.yml's training_user role, with training_user_team:
    alice, with a key made here, and bob), then slurm.yml run twice on the training group: the
    outcomes, and alice's private key."""
    playbook = Playbook(inventory_file, tmp_path_factory.mktemp("slurm-runs"))
    for node in members:
        for minor, path in enumerate(FAKE_GPUS):
            node.host.run_expect([0], f"test -c {path} || mknod -m 0666 {path} c 240 {minor}")
    key = tmp_path_factory.mktemp("alice") / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@laptop", "-f", str(key)],
        check=True,
    )  # fmt: skip
    team = {"training_user_team": [{"name": "alice", "keys": [key.with_suffix(".pub").read_text()]},
                               {"name": "bob"}]}  # fmt: skip
    people = playbook.run("provision.yml", team, timeout=600, args=("--tags", "training_user"))
    assert people.rc == 0, people.output
    again = playbook.run("provision.yml", team, timeout=600, args=("--tags", "training_user"))
    settings = {
        "slurm_health_interval": HEALTH_INTERVAL_S,
        "slurm_gres_gpu_files": FAKE_GPUS,
        **team,
    }
    first = playbook.run("slurm.yml", settings, timeout=900)
    assert first.rc == 0, first.output
    second = playbook.run("slurm.yml", settings, timeout=600)
    return {"first": first, "second": second, "key": key, "people_again": again}


def test_slurm_converges_is_idempotent_and_every_node_is_idle(
    slurm_cluster: dict[str, object], master: Node, members: list[Node]
) -> None:
    second = slurm_cluster["second"]
    assert second.rc == 0, second.output
    assert set(recap_changes(second.output).values()) == {0}, second.output
    states = dict(
        line.split()
        for line in master.host.check_output(
            "sinfo --noheader --Node --format='%N %T'"
        ).splitlines()
    )
    assert states == {node.name: "idle" for node in members}


def test_every_node_has_the_same_munge_key_and_slurm_conf(
    slurm_cluster: dict[str, object], members: list[Node]
) -> None:
    for path in ("/etc/munge/munge.key", "/etc/slurm/slurm.conf"):
        digests = {node.host.check_output(f"sha256sum {path}").split()[0] for node in members}
        assert len(digests) == 1, f"{path} differs between the nodes"


def test_each_person_is_a_user_with_the_same_ids_everywhere_and_logs_in_with_their_key(
    slurm_cluster: dict[str, object], master: Node, members: list[Node]
) -> None:
    again = slurm_cluster["people_again"]
    assert again.rc == 0, again.output
    assert set(recap_changes(again.output).values()) == {0}, again.output
    trainer = master.setting("ssh_trust_user", "ssh_trust")
    ids = {
        node.name: {
            name: node.host.check_output(f"id -u {name}; id -g {name}").split()
            for name in (trainer, "alice", "bob")
        }
        for node in members
    }
    assert all(found == ids[master.name] for found in ids.values()), ids
    numbers = [uid for uid, _ in ids[master.name].values()]
    assert len(set(numbers)) == 3, ids  # nobody shares a number
    assert all(uid == gid for uid, gid in ids[master.name].values()), ids
    for node in members:
        login = subprocess.run(
            ["ssh", "-i", str(slurm_cluster["key"]), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             f"alice@{node.hostvars['ansible_host']}", "id -un; pwd"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert (login.returncode, login.stdout.split()) == (0, ["alice", "/home/alice"]), (
            login.stderr
        )


def test_slurm_runs_each_persons_jobs_as_theirs_and_refuses_anyone_else(
    slurm_cluster: dict[str, object], master: Node
) -> None:
    """Every person has an association in the team's account, with fair share; a job is its
    submitter's (sacct -u), another person cannot cancel it, and a user of the node who is not
    on the list cannot submit at all (AccountingStorageEnforce=associations)."""
    trainer = master.setting("ssh_trust_user", "ssh_trust")
    associations = master.host.check_output(
        "sacctmgr --noheader --parsable2 show associations cluster=torch format=account,user"
    )
    print(f"sacctmgr's associations:\n{associations}")
    assert {("team", name) for name in (trainer, "alice", "bob")} <= {
        tuple(line.split("|")) for line in associations.splitlines()
    }
    config = master.host.check_output("scontrol show config")
    assert re.search(r"^PriorityType\s+= priority/multifactor$", config, re.M), config
    assert re.search(r"^AccountingStorageEnforce\s+= associations$", config, re.M), config
    shares = master.host.check_output(
        "sshare --noheader --parsable2 --all --accounts=team --format=Account,User"
    )
    assert {f"team|{name}" for name in ("alice", "bob")} <= set(shares.split()), shares

    submit = (
        "sbatch --parsable --chdir=/tmp --output=/dev/null --job-name=alices --wrap='sleep 300'"
    )
    job_id = master.host.check_output(f"runuser -u alice -- {submit}").strip()
    try:
        cancelled = master.host.run(f"runuser -u bob -- scancel {job_id}")
        assert cancelled.rc != 0, cancelled
        assert "Access/permission denied" in cancelled.stderr, cancelled.stderr
        state = master.host.check_output(f"squeue --noheader --jobs={job_id} --format=%T")
        assert state.strip() in ("PENDING", "RUNNING"), state
    finally:
        master.host.run_expect([0], f"runuser -u alice -- scancel {job_id}")
    deadline = time.monotonic() + 30
    while not master.host.check_output(
        f"sacct --noheader --parsable2 -u alice --starttime=now-1hour --format=JobID,User "
        f"--allocations --jobs={job_id}"
    ).strip():
        assert time.monotonic() < deadline, "alice's job is not in sacct -u alice"
        time.sleep(1)

    master.host.run_expect([0], "id mallory || useradd --no-create-home mallory")
    try:
        refused = master.host.run(
            "runuser -u mallory -- sbatch --chdir=/tmp --output=/dev/null --wrap=true"
        )
    finally:
        master.host.run_expect([0], "userdel mallory")
    assert refused.rc != 0
    assert "Invalid account" in refused.stderr, refused.stderr


def wait_for_state(master: Node, node: Node, wanted: str, timeout: float) -> float:
    """Seconds until Slurm shows the node in the wanted state (drained, idle)."""
    start = time.monotonic()
    while slurm_node(master, node)[0].rstrip("*") != wanted:
        assert time.monotonic() - start < timeout, (
            f"{node} not {wanted} after {timeout:.0f} s: {slurm_node(master, node)}"
        )
        time.sleep(0.5)
    return time.monotonic() - start


def test_the_health_check_drains_a_node_without_its_shared_folder_and_takes_it_back(
    slurm_cluster: dict[str, object],
    playbook: Playbook,
    tmp_path: Path,
    master: Node,
    members: list[Node],
) -> None:
    node = members[-1]
    # One run on a healthy node: nothing found, and well under a second of CPU.
    timed = node.host.run(
        "bash -c 'TIMEFORMAT=\"%U %S\"; time /usr/local/sbin/torch-cluster-health --once'"
    )
    assert timed.rc == 0, timed.stdout + timed.stderr
    assert timed.stdout.strip() == f"{node}: healthy"
    cpu = sum(float(value) for value in timed.stderr.split()[-2:])
    assert cpu < HEALTH_CPU_LIMIT_S, f"one health check took {cpu:.2f} s of CPU"
    assert (
        "HealthCheckProgram=/usr/local/sbin/torch-cluster-health"
        in node.host.file("/etc/slurm/slurm.conf").content_string
    )
    user = master.setting("ssh_trust_user", "ssh_trust")
    node.host.run_expect([0], f"umount {SHARED_DIR}")
    try:
        drained_s = wait_for_state(master, node, "drained", HEALTH_INTERVAL_S + 5)
        reason = slurm_node(master, node)[1]
        assert reason == f"torch-cluster health: shared folder {SHARED_DIR} not mounted"
        # It takes no new job: one asked for there waits.
        waiting = master.host.check_output(
            f"runuser -u {user} -- sbatch --parsable --nodelist={node} --nodes=1 "
            "--chdir=/tmp --output=/dev/null --wrap=true"
        ).strip()
        time.sleep(2)
        queued = master.host.check_output(f"squeue --noheader --jobs={waiting} --format=%T")
        assert queued.strip() == "PENDING"
        # check.yml names it, and why.
        runs = tmp_path / "runs"
        outcome = playbook.run(
            "check.yml", {"check_collectives": False, "check_runs_dir": str(runs)}
        )
        assert outcome.rc != 0
        assert f"[slurm] {node}: drained in Slurm: {reason}" in outcome.output, outcome.output
        report = json.loads(next(runs.glob("check-*/report.json")).read_text())
        assert {f["subject"] for f in report["failures"] if f["check"] == "slurm"} == {node.name}
    finally:
        node.host.run_expect([0], f"findmnt -n {SHARED_DIR} || mount {SHARED_DIR}")
    returned_s = wait_for_state(master, node, "idle", HEALTH_INTERVAL_S + 5)
    # The job that waited ran once the node was back.
    deadline = time.monotonic() + 60
    while master.host.check_output(f"squeue --noheader --jobs={waiting} --format=%T").strip():
        assert time.monotonic() < deadline, "the waiting job did not run"
        time.sleep(1)
    (record,) = [
        line
        for line in master.host.check_output(
            f"sacct --noheader --parsable2 --allocations --jobs={waiting} --format=State,NodeList"
        ).splitlines()
        if line
    ]
    assert record == f"COMPLETED|{node}"
    print(
        f"health: drained {drained_s:.1f} s after the unmount, back {returned_s:.1f} s after "
        f"the mount; one run {cpu:.2f} s of CPU"
    )


def squeue(master: Node, job: Job) -> tuple[str, str]:
    """The launcher job's Slurm job: its state and reason ('' and '' when it is not queued)."""
    out = master.host.check_output(f"squeue --noheader --name=torch-{job.job_id} --format='%T|%r'")
    return tuple(out.strip().split("|", 1)) if out.strip() else ("", "")


def wait_for_queue(master: Node, job: Job, state: str, timeout: float) -> float:
    start = time.monotonic()
    while squeue(master, job)[0] != state:
        assert time.monotonic() - start < timeout, f"{job.job_id}: {squeue(master, job)}"
        time.sleep(0.5)
    return time.monotonic() - start


def test_two_one_gpu_jobs_share_the_nodes_and_a_third_waits_for_a_gpu(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, master: Node
) -> None:
    # Every node has two devices that stand for GPUs (FAKE_GPUS): Slurm counts them out to
    # jobs, binds each job to its own (CUDA_VISIBLE_DEVICES) and shares the nodes by them, as
    # on GPU nodes. What it cannot show: CUDA using them, which needs GPUs.
    first, second, third = (Job(f"{job.job_id}-{n}") for n in "abc")
    # Both start at once (they stage the same code onto the same nodes), and run until stopped.
    endless = ("--epochs", "100000")
    runs = [playbook.start("train.yml", slurm_vars(j, *endless, gpus=1)) for j in (first, second)]
    waiting = None
    try:
        for each in (first, second):
            each.wait_for_log(master, "progress epoch=", timeout=300)
        # Both at once, on the same nodes, each with a master port of its own.
        assert squeue(master, first)[0] == squeue(master, second)[0] == "RUNNING"
        ports = {
            each.job_id: re.search(r"master port (\d+) \(the node may run", each.log(master))[1]
            for each in (first, second)
        }
        assert len(set(ports.values())) == 2, ports
        visible = set()
        for each in (first, second):
            said = re.search(
                r"1 process\(es\), one per GPU Slurm gave \(GPU (\d) of the node, "
                r"CUDA_VISIBLE_DEVICES=0\)",
                each.log(master),
            )
            assert said, each.log(master)
            visible.add(said[1])
            (tres,) = master.host.check_output(
                f"sacct --noheader --parsable2 --allocations --name=torch-{each.job_id} "
                "--format=AllocTRES"
            ).split()
            assert "gres/gpu=2" in tres.split(","), tres  # one GPU on each of the 2 nodes
        # Each job its own GPU of node0, which its device cgroup shows it as CUDA device 0.
        assert visible == {"0", "1"}, visible
        # A third finds no GPU free: it waits for one.
        waiting = playbook.start("train.yml", slurm_vars(third, "--epochs", "1", gpus=1))
        wait_for_queue(master, third, "PENDING", 180)
        time.sleep(5)
        assert squeue(master, third) == ("PENDING", "Resources")
        # jobs.yml shows the queue: every job, its state and why it waits, its GPUs, and
        # rank 0's progress beside the running ones.
        listed = playbook.run("jobs.yml", {})
        assert listed.rc == 0, listed.output
        assert "Slurm's queue, every person's jobs:" in listed.output, listed.output
        user = master.setting("ssh_trust_user", "ssh_trust")
        for each, state in ((first, "RUNNING"), (second, "RUNNING"), (third, "PENDING")):
            row = re.search(rf"^\s*\"?\d+\s+{user}\s+{re.escape(each.job_id)}\s+(.*)$",
                            listed.output, re.M)  # fmt: skip
            assert row, f"{each.job_id} not in the queue: {listed.output}"
            assert row[1].startswith(state), row[1]
            if state == "RUNNING":
                assert row[1].split()[1:3] == ["2", "node[0-1]"], row[1]
                assert re.search(r"\bepoch[ =]\d+", row[1]), row[1]  # rank 0's progress
            else:
                assert row[1].startswith("PENDING (Resources)  2"), row[1]
        assert f"Finished Slurm jobs of {user}:" in listed.output
        stopped = playbook.run("stop.yml", {"job_id": first.job_id})
        assert stopped.rc == 0, stopped.output
        freed = time.monotonic()
        started_s = wait_for_queue(master, third, "RUNNING", 60)
        outcome = waiting.wait(timeout=600)
        assert outcome.rc == 0, outcome.output
        assert f"job {third.job_id} [0:00:00] queued in Slurm: PENDING (Resources)" in (
            outcome.output
        )
        print(
            f"gpus: the third job ran {started_s:.1f} s after a GPU was freed "
            f"({time.monotonic() - freed:.0f} s to its end)"
        )
    finally:
        for each in (first, second, third):
            master.host.run(f"scancel --name=torch-{each.job_id}")
        for running in [*runs, *([waiting] if waiting else [])]:
            running.kill()


def test_outsider_cannot_reach_slurms_daemons(
    slurm_cluster: dict[str, object], master: Node, members: list[Node], outsider: Node
) -> None:
    # The daemons listen, and members reach them ...
    assert members[-1].connect(master.address, SLURMCTLD_PORT).connected
    assert master.connect(members[-1].address, SLURMD_PORT).connected
    assert members[-1].connect(master.address, SLURMDBD_PORT).connected
    # ... and the outsider, on the same network, reaches none of them.
    assert outsider.connect(master.address, SLURMCTLD_PORT) == REJECTED
    assert outsider.connect(master.address, SLURMDBD_PORT) == REJECTED
    for node in members:
        assert outsider.connect(node.address, SLURMD_PORT) == REJECTED


def test_train_through_slurm_gives_world_size_4_and_the_default_launchers_files(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, members: list[Node]
) -> None:
    master = members[0]
    outcome = playbook.run("train.yml", slurm_vars(job, "--epochs", "2", nproc=2))
    assert outcome.rc == 0, outcome.output
    assert metrics(playbook, job)["world_size"] == 2 * len(members)
    run = playbook.runs_dir / job.job_id
    expected = {"metrics.json", "loss.png", "attempts.json", "job.sbatch"}
    expected |= {f"{node}.log" for node in members}
    assert {path.name for path in run.iterdir()} == expected
    # One Slurm job on every node, recorded for sacct, and each node's part in its own log.
    (record,) = accounting(master, job)
    assert record["State"] == "COMPLETED"
    # Submitted and run as the training user, not root.
    assert record["User"] == master.setting("ssh_trust_user", "ssh_trust") != "root"
    assert set(
        re.findall(
            r"node\d+",
            master.host.check_output(f"scontrol show hostnames {shlex.quote(record['NodeList'])}"),
        )
    ) == {node.name for node in members}
    for rank, node in enumerate(members):
        assert re.search(
            rf"^=== torch-cluster: job {job.job_id}, attempt 1, Slurm job {record['JobID']}, "
            rf"node {node} \(node_rank {rank}\) ===$",
            (run / f"{node}.log").read_text(),
            re.M,
        )
    assert "srun --export=ALL --kill-on-bad-exit=1" in (run / "job.sbatch").read_text()
    assert attempts(playbook, job)[0]["outcome"] == "succeeded"


def test_a_second_job_waits_in_the_queue_until_the_first_ends(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, master: Node
) -> None:
    first_job, second_job = Job(f"{job.job_id}-a"), Job(f"{job.job_id}-b")
    first = playbook.start("train.yml", slurm_vars(first_job, "--epochs", "120", nproc=1))
    try:
        first_job.wait_for_log(master, "progress epoch=", timeout=120)
        second = playbook.start("train.yml", slurm_vars(second_job, "--epochs", "2", nproc=1))
        try:
            second_outcome = second.wait(timeout=600)
        finally:
            second.kill()
        first_outcome = first.wait(timeout=600)
    finally:
        first.kill()
    assert first_outcome.rc == 0, first_outcome.output
    assert second_outcome.rc == 0, second_outcome.output
    assert f"job {second_job.job_id} [0:00:00] queued in Slurm: PENDING" in second_outcome.output
    (earlier,) = accounting(master, first_job)
    (later,) = accounting(master, second_job)
    assert later["Start"] >= earlier["End"], (earlier, later)


def test_killing_a_nodes_workers_ends_the_slurm_job_everywhere(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, members: list[Node]
) -> None:
    running = playbook.start("train.yml", slurm_vars(job, *LONG_JOB, nproc=2))
    try:
        job.wait_for_log(members[0], "progress epoch=")
        victim = members[-1]
        job.kill_workers(victim)
        killed = time.monotonic()
        outcome = running.wait(timeout=120)
    finally:
        running.kill()
    teardown = time.monotonic() - killed
    assert outcome.rc != 0, outcome.output
    assert teardown < TEARDOWN_LIMIT_S, f"the playbook took {teardown:.1f} s to fail"
    assert re.search(
        rf"First failure: {victim}, rank [23] \(local rank [01]\): killed by SIGKILL",
        outcome.output,
    ), outcome.output
    # The victim's part failed first; Slurm (--kill-on-bad-exit) ended the others'.
    (attempt,) = attempts(playbook, job)
    assert attempt["nodes"][victim.name]["state"] == "failed"
    for node in members[:-1]:
        assert attempt["nodes"][node.name]["state"] == "stopped"
        assert f"ended by Slurm after {victim} failed" in attempt["nodes"][node.name]["detail"]
    assert slurm_jobs(members[0], job) == []
    (record,) = accounting(members[0], job)
    assert record["State"] == "FAILED"
    for node in members:
        assert job.processes(node) == [], f"{node} still runs processes of the job"


def test_a_worker_that_stops_answering_ends_the_slurm_job_in_seconds(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, members: list[Node]
) -> None:
    """A worker's link pulled: Slurm would notice only after its SlurmdTimeout (minutes), and
    torchrun on the master would wait for it in a collective. The watch polls every node and
    declares the silent one lost after train_lost_after; the job is cancelled and the playbook
    fails, naming it. Slurm keeps the job completing there while the node is away, and ends it
    once the node is back: then nothing of the job is left, and the node takes jobs again."""
    master, victim = members[0], members[-1]
    running = playbook.start("train.yml", slurm_vars(job, *LONG_JOB, nproc=1))
    try:
        job.wait_for_log(master, "progress epoch=")
        with victim.unplugged():
            pulled = time.monotonic()
            outcome = running.wait(timeout=120)
            failed_s = time.monotonic() - pulled
            held = master.host.check_output(
                f"squeue --noheader --name=torch-{job.job_id} --states=PD,CF,R,S --format=%i"
            ).split()
    finally:
        running.kill()
        # Also after a failure: the modules after this one need the node back in Slurm.
        settled(master, job, [victim], timeout=120)
    assert outcome.rc != 0, outcome.output
    assert failed_s < LOST_LIMIT_S, f"the playbook took {failed_s:.1f} s to fail:\n{outcome.output}"
    assert re.search(rf"{victim}.*not heard from for [\d.]+ s", outcome.output), outcome.output
    (attempt,) = attempts(playbook, job)
    assert attempt["nodes"][victim.name]["state"] == "unreachable", attempt["nodes"]
    assert held == [], f"Slurm still runs the job: {held}"
    assert job.processes(master) == []
    assert job.processes(victim) == []
    assert slurm_jobs(master, job) == []
    assert slurm_node(master, victim)[0].rstrip("*") == "idle", slurm_node(master, victim)
    print(f"lost through Slurm: the playbook failed {failed_s:.1f} s after the link was pulled")


def test_a_lost_slurm_controller_ends_the_job_whatever_train_min_nodes_allows(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, members: list[Node]
) -> None:
    """The master runs slurmctld: cut off, no next batch job could start, so the job is not
    restarted although train_min_nodes=1 would let it go on with node1, and the playbook says
    why. Both nodes' parts fence themselves (no watch reaches them); once the master is back,
    Slurm ends the job and takes jobs again."""
    master = members[0]
    extra = slurm_vars(job, *LONG_JOB, nproc=1, train_min_nodes=1, train_max_restarts=1)
    running = playbook.start("train.yml", extra)
    try:
        job.wait_for_log(master, "progress epoch=")
        with master.unplugged():
            outcome = running.wait(timeout=180)
    finally:
        running.kill()
        settled(master, job, members, timeout=180)
    assert outcome.rc != 0, outcome.output
    why = (
        "Not restarted: node0 stopped answering: it runs Slurm's controller (slurmctld), and no "
        "attempt starts without it."
    )
    assert why in outcome.output, outcome.output
    (attempt,) = attempts(playbook, job)
    assert not attempt["restarted"]
    assert slurm_jobs(master, job) == []
    for node in members:
        assert job.processes(node) == []
        assert slurm_node(master, node)[0].rstrip("*") == "idle", slurm_node(master, node)


def test_stop_yml_cancels_the_slurm_job(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, members: list[Node]
) -> None:
    running = playbook.start("train.yml", slurm_vars(job, *LONG_JOB, nproc=1))
    try:
        job.wait_for_log(members[0], "progress epoch=")
        stopped = playbook.run("stop.yml", {"job_id": job.job_id})
        outcome = running.wait(timeout=120)
    finally:
        running.kill()
    assert stopped.rc == 0, stopped.output
    assert outcome.rc != 0
    assert "was stopped by playbooks/stop.yml" in outcome.output, outcome.output
    assert slurm_jobs(members[0], job) == []
    (record,) = accounting(members[0], job)
    assert record["State"].startswith("CANCELLED")
    for node in members:
        assert job.processes(node) == []


def test_an_exported_batch_script_runs_when_submitted_by_hand(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, members: list[Node]
) -> None:
    master = members[0]
    outcome = playbook.run(
        "train.yml", job_vars(job, "--epochs", "1", nproc=2, train_export="sbatch")
    )
    assert outcome.rc == 0, outcome.output
    script = playbook.runs_dir / job.job_id / "job.sbatch"
    assert "srun --export=ALL --kill-on-bad-exit=1" in script.read_text()
    # Nothing ran: no Slurm job, no process, no results.
    assert slurm_jobs(master, job) == []
    assert accounting(master, job) == []
    assert not master.host.file(f"{job.output}/metrics.json").exists
    # The script, as a user whose Slurm someone else runs would submit it: the master's copy,
    # the same as the runs folder's.
    on_master = f"{job.folder}/job.sbatch"
    assert master.host.file(on_master).content_string == script.read_text()
    user = master.setting("ssh_trust_user", "ssh_trust")
    submitted = master.host.run(f"runuser -u {user} -- sbatch --wait {on_master}")
    assert submitted.rc == 0, submitted.stdout + submitted.stderr + job.log(master)
    result = json.loads(master.host.check_output(f"cat {job.output}/metrics.json"))
    assert result["world_size"] == 2 * len(members)


def test_an_unknown_launcher_is_refused_before_anything_starts(
    playbook: Playbook, job: Job, master: Node
) -> None:
    outcome = playbook.run("train.yml", job_vars(job, train_launcher="pbs"))
    assert outcome.rc != 0
    assert "train_launcher must be one of systemd, slurm (got 'pbs')" in outcome.output
    assert not master.host.file(job.folder).exists


def test_slurm_asked_for_while_its_controller_is_down_is_refused(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, master: Node
) -> None:
    master.host.run("systemctl stop slurmctld")
    try:
        outcome = playbook.run("train.yml", slurm_vars(job, "--epochs", "1"))
    finally:
        master.host.run("systemctl start slurmctld")
        deadline = time.monotonic() + 60
        while master.host.run("scontrol ping").stdout.count("UP") == 0:
            assert time.monotonic() < deadline, "slurmctld did not come back"
            time.sleep(1)
    assert outcome.rc != 0
    assert "train_launcher=slurm: Slurm's controller does not answer" in outcome.output
    assert "run playbooks/slurm.yml" in outcome.output
    assert not master.host.file(job.folder).exists


def test_a_tutorial_script_restarts_through_slurm_from_its_own_snapshot(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, members: list[Node]
) -> None:
    # PyTorch's DDP tutorial style: a snapshot in the current folder, resumed when present; its
    # own progress format; no --resume option (train_resume_args empty).
    extra = {
        "train_code_dir": str(EXAMPLES),
        "train_script": "snapshot_ddp.py",
        "train_script_args": ["12", "1", "--dataset_size", "40000"],
        "train_resume_args": [],
        "train_progress_regex": r"Epoch \d+ \|",
        "train_max_restarts": 1,
        "train_watch_interval": 3,
    }
    running = playbook.start("train.yml", slurm_vars(job, nproc=1, **extra))
    try:
        job.wait_for_log(members[0], SAVED.pattern)
        job.kill_workers(members[-1])
        outcome = running.wait(timeout=600)
    finally:
        running.kill()
    assert outcome.rc == 0, outcome.output
    first, second = attempts(playbook, job)
    assert (first["outcome"], second["outcome"]) == ("failed", "succeeded")
    # Each attempt was a Slurm job of its own.
    assert [record["State"] for record in accounting(members[0], job)] == ["FAILED", "COMPLETED"]
    second_run = job.log(members[0]).split("attempt 2,")[-1]
    resumed_at = int(re.search(r"Resuming training from snapshot at Epoch (\d+)", second_run)[1])
    assert resumed_at >= 1
    assert "[rank0]: [GPU0] Epoch 11 |" in second_run


def test_a_stalled_slurm_job_is_caught_explained_cancelled_and_restarted(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, members: list[Node]
) -> None:
    """As the default launcher's test: rank 3 (node1's second process) sleeps before an
    all_reduce that ranks 0-2 wait in; the ranks run under slurmstepd here."""
    extra = {
        "train_code_dir": str(SCRIPTS),
        "train_script": "stall_on_rank.py",
        "train_script_args": ["3", "8"],
        "train_progress_regex": "^step ",
        "train_stall_timeout": STALL_TIMEOUT_S,
        "train_max_restarts": 1,
    }
    outcome = playbook.run("train.yml", slurm_vars(job, nproc=2, **extra), timeout=400)
    assert outcome.rc == 0, outcome.output
    first, second = attempts(playbook, job)
    assert (first["outcome"], second["outcome"]) == ("stalled", "succeeded")
    stall = first["stall"]
    assert STALL_TIMEOUT_S <= stall["quiet_for"] < STALL_TIMEOUT_S + 30, stall
    assert stall["outliers"] == [3], stall
    assert "time.sleep(3600) at stall_on_rank.py" in stall["summary"], stall
    assert "attempt 1: stalled after" in outcome.output
    folder = playbook.runs_dir / job.job_id / "stall-1"
    stacks = {path.relative_to(folder).as_posix() for path in folder.rglob("*.txt")}
    assert {"node0/rank0.txt", "node0/rank1.txt", "node1/rank2.txt", "node1/rank3.txt"} <= stacks
    # The stalled batch job was cancelled; the next one completed.
    states = [record["State"] for record in accounting(members[0], job)]
    assert states[0].startswith("CANCELLED"), states
    assert states[1:] == ["COMPLETED"], states
    for node in members:
        assert job.processes(node) == []


def test_a_script_gets_the_same_environment_through_slurm(
    slurm_cluster: dict[str, object], playbook: Playbook, job: Job, members: list[Node]
) -> None:
    extra = {
        "train_code_dir": str(SCRIPTS),
        "train_script": "print_env.py",
        "train_script_args": [],
        "train_env": {"MY_SETTING": "42"},
        "train_result_files": ["env-*.json"],
        "train_results_from_all_nodes": True,
    }
    outcome = playbook.run("train.yml", slurm_vars(job, **extra))
    assert outcome.rc == 0, outcome.output
    run = playbook.runs_dir / job.job_id
    assert_script_environments(run, job, members)
