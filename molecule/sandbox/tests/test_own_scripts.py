"""train.yml with scripts as their authors wrote them, not the example trainer.

- train/examples/snapshot_ddp.py, in the style of PyTorch's DDP tutorial series: global rank 0
  saves a snapshot in the current folder, every rank resumes from it when present, progress
  printed in its own format; with the shared folder and without one;
- scripts/raise_on_rank.py, which raises on one rank; scripts/print_env.py, which writes down
  the environment it was given.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest
from launcher import PROJECT_DIR, SHARED_DIR, Job, Playbook, assert_script_environments, job_vars
from sandbox_nodes import Node

EXAMPLES = PROJECT_DIR / "train" / "examples"
SCRIPTS = Path(__file__).parent / "scripts"
# About 3 s an epoch on the sandbox, one process a node: longer than the watch interval.
TUTORIAL_ARGS = ["--dataset_size", "40000"]
SAVED = re.compile(r"^\[rank0\]: Epoch (\d+) \| Training snapshot saved at snapshot\.pt$", re.M)


def resumed_epochs(logs: list[str]) -> dict[int, int]:
    """Each rank's epoch as the tutorial script says it resumed, in the nodes' logs."""
    return {
        int(rank): int(epoch)
        for log in logs
        for rank, epoch in re.findall(
            r"^\[rank(\d+)\]: Resuming training from snapshot at Epoch (\d+)$", log, re.M
        )
    }


def own_script(job: Job, code: Path, script: str, args: list[str], **extra: object) -> dict:
    """A user's script: none of the example trainer's settings (its --resume) but the data."""
    return job_vars(
        job,
        train_code_dir=str(code),
        train_script=script,
        train_script_args=args,
        train_watch_interval=3,
        **{"train_resume_args": [], **extra},
    )


def test_a_tutorial_script_killed_mid_run_restarts_and_resumes_with_only_max_restarts_set(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    """The tutorial-style script as its author wrote it: its own argparse (no --resume) and its
    own lines (neither a progress prefix nor a regex matches them). Nothing but
    train_max_restarts=1 is set: the snapshot it wrote into its output folder shows that it got
    past its start-up, and the restart adds no argument to its command line."""
    extra = {
        "job_id": job.job_id,
        "train_code_dir": str(EXAMPLES),
        "train_script": "snapshot_ddp.py",
        "train_script_args": ["6", "1", *TUTORIAL_ARGS],
        "train_max_restarts": 1,
    }
    running = playbook.start("train.yml", extra)
    try:
        job.wait_for_log(members[0], SAVED.pattern)
        victim = members[1]
        job.kill_workers(victim)
        outcome = running.wait(timeout=300)
    finally:
        running.kill()
    assert outcome.rc == 0, outcome.output
    assert "restarting the whole job from its checkpoint (restart 1 of 1)" in outcome.output
    assert "failed at start-up" not in outcome.output
    second = [job.log(node).split("attempt 2,")[-1] for node in members]
    resumed = resumed_epochs(second)
    # One process a node (the sandbox's CPU nodes): every rank resumed from the same snapshot.
    assert sorted(resumed) == list(range(len(members))), resumed
    assert len(set(resumed.values())) == 1, resumed
    assert resumed[0] >= 1, resumed
    assert "[rank0]: Epoch 6 | Training snapshot saved" in second[0]


@pytest.mark.parametrize("shared", [SHARED_DIR, ""], ids=["shared folder", "no shared folder"])
def test_a_tutorial_script_resumes_on_every_rank_from_rank_0s_snapshot_after_stop_yml(
    playbook: Playbook, members: list[Node], shared: str
) -> None:
    """Global rank 0 alone saves snapshot.pt in its current folder; every rank of every node
    loads it at start. With a shared folder they all see rank 0's file; without one, the
    launcher copies it to the other nodes (after the attempt, and before the next)."""
    job = Job(f"test-{secrets.token_hex(4)}", shared=shared)
    where = {"nproc": 2, "train_shared_dir": "auto" if shared else ""}
    first = own_script(job, EXAMPLES, "snapshot_ddp.py", ["40", "1", *TUTORIAL_ARGS], **where)
    running = playbook.start("train.yml", first)
    try:
        job.wait_for_log(members[0], SAVED.pattern)
        job.wait_for_log(members[0], r"^\[rank0\]: \[GPU0\] Epoch 1 \|")
        stopped = playbook.run("stop.yml", {"job_id": job.job_id})
        outcome = running.wait(timeout=120)
    finally:
        running.kill()
    assert stopped.rc == 0, stopped.output
    assert "was stopped by playbooks/stop.yml" in outcome.output
    # The script's own lines reached the controller while it ran (rank 0's latest line).
    shown = re.findall(rf"^job {job.job_id} \[[0-9:]+\] (.*)$", outcome.output, flags=re.M)
    assert any(re.match(r"(\[GPU0\] )?Epoch \d+ \|", line) for line in shown), shown
    saved = int(SAVED.findall(job.log(members[0]))[-1])
    # Only global rank 0 saved it, on node0; every node has it now.
    assert not re.search(
        r"^\[rank[1-9]\d*\]: Epoch \d+ \| Training snapshot", job.log(members[1]), re.M
    )
    for node in members:
        assert node.host.file(f"{job.output}/snapshot.pt").exists, f"no snapshot on {node}"

    again = own_script(
        job, EXAMPLES, "snapshot_ddp.py", [str(saved + 2), "1", *TUTORIAL_ARGS], **where
    )
    resumed = playbook.run("train.yml", again)
    assert resumed.rc == 0, resumed.output
    second_runs = [job.log(node).split("attempt 1,")[-1] for node in members]
    resumed_at = resumed_epochs(second_runs)
    # Every rank of every node, from the same snapshot: at least the one seen saved.
    assert sorted(resumed_at) == list(range(2 * len(members))), resumed_at
    epoch = resumed_at[0]
    assert set(resumed_at.values()) == {epoch}, resumed_at
    assert epoch >= saved
    for index, run in enumerate(second_runs):  # two ranks a node: node i's first is rank 2i
        assert f"[rank{2 * index}]: [GPU{2 * index}] Epoch {epoch} |" in run
        assert not re.search(r"\[GPU\d\] Epoch 0 \|", run)
    assert f"[rank0]: Epoch {saved + 2} | Training snapshot saved" in second_runs[0]


def test_the_rank_that_raised_is_named_first_with_its_exception(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    # Two processes a node: ranks 0 and 1 on node0, 2 and 3 on node1.
    outcome = playbook.run(
        "train.yml", own_script(job, SCRIPTS, "raise_on_rank.py", ["2"], nproc=2)
    )
    assert outcome.rc != 0
    node1 = members[1].name
    assert f"First failure: {node1}, rank 2 (local rank 0): ValueError: boom on rank 2" in (
        outcome.output
    )
    assert 'raise ValueError(f"boom on rank {rank}")' in outcome.output
    assert "Then, as consequences:" in outcome.output
    failure = json.loads((playbook.runs_dir / job.job_id / "failure.json").read_text())
    first = failure["first_failure"]
    assert (first["node"], first["rank"], first["message"]) == (
        node1,
        2,
        "ValueError: boom on rank 2",
    )
    assert {(f["node"], f["rank"]) for f in failure["consequences"]} <= {
        (members[0].name, 0),
        (members[0].name, 1),
        (node1, 3),
    }
    assert all(f["consequence"] for f in failure["consequences"])


def test_a_script_gets_torchruns_variables_the_jobs_own_and_its_environment(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    extra = {
        "train_env": {"MY_SETTING": "42"},
        "train_result_files": ["env-*.json"],
        "train_results_from_all_nodes": True,
    }
    outcome = playbook.run("train.yml", own_script(job, SCRIPTS, "print_env.py", [], **extra))
    assert outcome.rc == 0, outcome.output
    run = playbook.runs_dir / job.job_id
    assert_script_environments(run, job, members)
