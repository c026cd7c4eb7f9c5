"""train.yml with train_max_restarts: a failure in training restarts the whole job from its
checkpoint, on every node, with the same ranks and job id; other failures are reported at once.

Faults are real: a node's workers are killed with SIGKILL in the middle of an epoch.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import pytest
from launcher import LONG_JOB, Job, Playbook, attempts, job_vars, metrics
from sandbox_nodes import Node

# A job slow enough on the sandbox (about 1.5 s an epoch) that a kill lands inside an epoch.
SLOW_JOB = ["--epochs", "6", "--model", "cnn", "--batch-size", "16", "--log-interval", "0"]
# Rank 0's progress line in the middle of epoch 3 or later (47 steps an epoch; one line per 10
# steps).
MID_EPOCH = r"^\[rank0\]: progress epoch=[3-5]/6 step=[1-3]0/"


def attempt_lines(log: str) -> list[str]:
    """The log split at the launcher's header of each attempt."""
    return re.split(r"^=== torch-cluster: job .* attempt \d+,.*$", log, flags=re.MULTILINE)[1:]


@pytest.fixture(scope="module")
def uninterrupted(inventory_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The metrics of the slow job, run once without a fault."""
    playbook = Playbook(inventory_file, tmp_path_factory.mktemp("uninterrupted"))
    job = Job(f"control-{secrets.token_hex(4)}")
    outcome = playbook.run("train.yml", job_vars(job, *SLOW_JOB))
    assert outcome.rc == 0, outcome.output
    return metrics(playbook, job)


def test_a_job_killed_mid_epoch_restarts_from_its_checkpoint_and_ends_as_if_uninterrupted(
    playbook: Playbook, job: Job, members: list[Node], uninterrupted: dict
) -> None:
    victim = members[-1]
    running = playbook.start("train.yml", job_vars(job, *SLOW_JOB, train_max_restarts=1))
    try:
        job.wait_for_log(members[0], MID_EPOCH, interval=0.2)
        job.kill_workers(victim)
        outcome = running.wait(timeout=300)
    finally:
        running.kill()
    assert outcome.rc == 0, outcome.output
    assert f"Job {job.job_id}: attempt 1: failed after" in outcome.output
    # One process a node: the victim's worker is rank 1.
    assert f"{victim}, rank 1 (local rank 0): killed by SIGKILL" in outcome.output
    assert "restarting the whole job from its checkpoint (restart 1 of 1)" in outcome.output

    first, second = attempt_lines(job.log(members[0]))
    progress = re.findall(r"^\[rank0\]: progress epoch=(\d+)/6", first, flags=re.MULTILINE)
    lost_epoch = int(progress[-1])
    assert f"epoch {lost_epoch}/6 loss=" not in first, "the kill came between epochs"
    assert f"continuing at epoch {lost_epoch}/6" in second

    recorded = attempts(playbook, job)
    assert [(a["outcome"], a["restarted"]) for a in recorded] == [
        ("failed", True),
        ("succeeded", False),
    ]
    assert recorded[0]["failed_nodes"][0] == victim.name
    final = metrics(playbook, job)
    assert final["epochs_completed"] == 6
    assert final["final_loss"] == pytest.approx(uninterrupted["final_loss"], abs=1e-4)
    assert {node.name: job.processes(node) for node in members} == {n.name: [] for n in members}


def test_a_second_failure_after_the_last_restart_fails_the_job_with_both_reported(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    victim = members[-1]
    running = playbook.start("train.yml", job_vars(job, *LONG_JOB, train_max_restarts=1))
    try:
        job.wait_for_log(members[0], r"^\[rank0\]: epoch 2/")
        job.kill_workers(victim)
        job.wait_for_log(members[0], r"continuing at epoch[\s\S]*?^\[rank0\]: progress epoch=")
        job.kill_workers(victim)
        outcome = running.wait(timeout=300)
    finally:
        running.kill()
    assert outcome.rc != 0, outcome.output
    report = outcome.output[outcome.output.rindex(f"Job {job.job_id} failed") :]
    assert "It was restarted 1 time(s); each attempt:" in report
    assert "attempt 1: failed after" in report
    assert "attempt 2: failed after" in report
    assert "Not restarted again: it has restarted 1 time(s) already" in report
    assert [a["outcome"] for a in attempts(playbook, job)] == ["failed", "failed"]
    assert {node.name: job.processes(node) for node in members} == {n.name: [] for n in members}


def test_a_script_that_fails_at_start_up_is_not_restarted(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    outcome = playbook.run("train.yml", job_vars(job, "--epochs", "0", train_max_restarts=2))
    assert outcome.rc != 0
    assert "Not restarted: it failed at start-up" in outcome.output
    # The script's own usage error, from the first failed node's log.
    assert "First failure: " in outcome.output
    assert "train_ddp.py: error: --epochs must be a positive integer, got 0" in outcome.output
    assert len(attempts(playbook, job)) == 1
    assert "restarting" not in outcome.output
