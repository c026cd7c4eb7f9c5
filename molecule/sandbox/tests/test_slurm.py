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
import time
from pathlib import Path

import pytest
from launcher import (
    LONG_JOB,
    Job,
    Playbook,
    assert_script_environments,
    attempts,
    job_vars,
    metrics,
    recap_changes,
)
from sandbox_nodes import PROJECT_DIR, Connection, Node

EXAMPLES = PROJECT_DIR / "train" / "examples"
SCRIPTS = Path(__file__).parent / "scripts"
SAVED = re.compile(r"^\[rank0\]: Epoch (\d+) \| Training snapshot saved at snapshot\.pt$", re.M)

# The playbook must fail, with every process gone, within this long of a kill.
TEARDOWN_LIMIT_S = 30
SLURMCTLD_PORT, SLURMD_PORT, SLURMDBD_PORT = 6817, 6818, 6819
# What a host gets from firewalld's default zone for a port it does not open.
REJECTED = Connection("EHOSTUNREACH")


def slurm_vars(job: Job, *args: str, **extra: object) -> dict[str, object]:
    return job_vars(job, *args, train_launcher="slurm", **extra)


def slurm_jobs(master: Node, job: Job) -> list[str]:
    """Slurm's queued or running jobs of the launcher job."""
    listed = master.host.run(f"squeue --noheader --name=torch-{job.job_id} --format=%i")
    assert listed.rc == 0, listed.stderr
    return listed.stdout.split()


def accounting(master: Node, job: Job) -> list[dict[str, str]]:
    """sacct's records of the launcher job's Slurm jobs (one per attempt)."""
    fields = ["JobID", "State", "Start", "End", "NodeList", "User"]
    out = master.host.check_output(
        f"sacct --allusers --allocations --parsable2 --noheader --name=torch-{job.job_id} "
        f"--format={','.join(fields)}"
    )
    return [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines() if line]


@pytest.fixture(scope="module")
def slurm_cluster(inventory_file, tmp_path_factory, members: list[Node]) -> dict[str, object]:
    """slurm.yml run twice on the training group: the two outcomes."""
    playbook = Playbook(inventory_file, tmp_path_factory.mktemp("slurm-runs"))
    first = playbook.run("slurm.yml", {}, timeout=900)
    assert first.rc == 0, first.output
    second = playbook.run("slurm.yml", {}, timeout=600)
    return {"first": first, "second": second}


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
