"""train.yml with scripts as their authors wrote them, not the example trainer.

- train/examples/snapshot_ddp.py, in the style of PyTorch's DDP tutorial series: a snapshot in
  the current folder, resumed when present, progress printed in its own format;
- scripts/raise_on_rank.py, which raises on one rank; scripts/print_env.py, which writes down
  the environment it was given.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from launcher import PROJECT_DIR, Job, Playbook, assert_script_environments, job_vars
from sandbox_nodes import Node

EXAMPLES = PROJECT_DIR / "train" / "examples"
SCRIPTS = Path(__file__).parent / "scripts"
# About 3 s an epoch on the sandbox, one process a node: longer than the watch interval.
TUTORIAL_ARGS = ["--dataset_size", "40000"]
SAVED = re.compile(r"^\[rank0\]: Epoch (\d+) \| Training snapshot saved at snapshot\.pt$", re.M)


def own_script(job: Job, code: Path, script: str, args: list[str], **extra: object) -> dict:
    return job_vars(
        job,
        train_code_dir=str(code),
        train_script=script,
        train_script_args=args,
        train_watch_interval=3,
        **extra,
    )


def test_a_tutorial_script_continues_from_its_own_snapshot_after_stop_yml(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    first = own_script(job, EXAMPLES, "snapshot_ddp.py", ["40", "1", *TUTORIAL_ARGS])
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

    again = own_script(job, EXAMPLES, "snapshot_ddp.py", [str(saved + 2), "1", *TUTORIAL_ARGS])
    resumed = playbook.run("train.yml", again)
    assert resumed.rc == 0, resumed.output
    second_run = job.log(members[0]).split("attempt 1,")[-1]
    resumed_at = int(re.search(r"Resuming training from snapshot at Epoch (\d+)", second_run)[1])
    assert resumed_at >= saved
    assert f"[rank0]: [GPU0] Epoch {resumed_at} |" in second_run
    assert "[rank0]: [GPU0] Epoch 0 |" not in second_run
    assert f"[rank0]: Epoch {saved + 2} | Training snapshot saved" in second_run
    for node in members:
        assert node.host.file(f"{job.output}/snapshot.pt").exists, f"no snapshot on {node}"


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
