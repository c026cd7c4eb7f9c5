"""The job files of jobs/, each run as a user runs it: `ansible-playbook playbooks/train.yml
-e @jobs/<name>.yml`, with -e nproc=2 and a job id after it, on the sandbox's shared folder.

Each does what its comment says (it succeeds, its result files come back, its progress lines
become progress.csv and progress.png), and run again with the same job id and more epochs
(an -e after the file), every rank resumes from the first run's checkpoint and trains on. A
framework script whose workers are killed mid-run is restarted by the launcher with nothing
but its job file's train_max_restarts, and every rank resumes.
"""

from __future__ import annotations

import csv
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from launcher import DATA, PROJECT_DIR, Job, Playbook, attempts
from sandbox_nodes import Node

JOBS = PROJECT_DIR / "jobs"
NPROC = 2
PNG = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class JobFile:
    """A job file, and what its second run must show. resumed: the line (a regex) of a rank
    that resumed; every_rank: each rank prints it (else rank 0 alone, for the whole job);
    again: the second run's -e; continued: a line of rank 0 that the second run trains on."""

    name: str
    resumed: str
    again: dict[str, object]
    continued: str
    every_rank: bool = True

    @property
    def path(self) -> Path:
        return JOBS / f"{self.name}.yml"

    @property
    def settings(self) -> dict[str, Any]:
        return yaml.safe_load(self.path.read_text())


JOB_FILES = [
    JobFile(
        "example",
        resumed=r"resume: \S+/checkpoint\.pt: epoch 2 done, continuing at epoch 3/3",
        again={"train_resume": True, "train_extra_args": ["--epochs", "3"]},
        continued=r"epoch 3/3 loss=",
        every_rank=False,  # rank 0 loads the checkpoint and broadcasts it
    ),
    JobFile(
        "tutorial",
        resumed=r"Resuming training from snapshot at Epoch 10",
        again={"train_script_args": ["12", "1"]},
        continued=r"\[GPU0\] Epoch 10 \|",
    ),
    JobFile(
        "accelerate",
        resumed=r"process \d+: resumed from checkpoints/epoch_3 at epoch 3",
        again={"train_extra_args": ["--epochs", "4"]},
        continued=r"Epoch 4: loss ",
    ),
    JobFile(
        "dcp",
        resumed=r"rank \d+: resumed from checkpoint/epoch_3 at epoch 3",
        again={"train_extra_args": ["--epochs", "4"]},
        continued=r"\[epoch 4/4\] loss=",
    ),
    JobFile(
        "hf_trainer",
        resumed=r"process \d+: resumed from hf_trainer/checkpoint-\d+ at step \d+",
        again={"train_extra_args": ["--epochs", "3"]},
        continued=r"\{'loss': .*'epoch': '2\.\d+'\}",
    ),
]


def since(log: str, attempt: int = 1) -> str:
    """A node's log from the last start of the attempt on (attempt 1: the job's last run)."""
    return log.rsplit(f", attempt {attempt}, ", maxsplit=1)[-1]


def resumed_lines(job: Job, members: list[Node], resumed: str, attempt: int = 1) -> dict[int, str]:
    """Each rank's resumed line, from every node's log since the attempt, without the rank
    that the script itself names in it ("process 3: resumed ...")."""
    pattern = re.compile(rf"^\[rank(\d+)\]: ({resumed})$", re.M)
    return {
        int(found.group(1)): re.sub(r"^\S+ \d+: ", "", found.group(2))
        for node in members
        for found in pattern.finditer(since(job.log(node), attempt))
    }


def assert_results_came_back(run: Path, patterns: list[str]) -> None:
    for pattern in patterns:
        assert [path for path in run.glob(pattern) if path.is_file()], f"no {pattern} in {run}"


def assert_progress_plotted(run: Path, regex: str) -> None:
    with (run / "progress.csv").open() as table:
        rows = list(csv.DictReader(table))
    groups = list(re.compile(regex).groupindex)
    assert rows, "progress.csv has no row"
    assert list(rows[0]) == ["attempt", "line", *groups]
    assert all(row[name] for row in rows for name in groups), rows
    assert (run / "progress.png").read_bytes()[:8] == PNG


@pytest.mark.parametrize("job_file", JOB_FILES, ids=[job.name for job in JOB_FILES])
def test_a_job_file_runs_as_its_comment_says_and_every_rank_resumes_on_a_rerun(
    playbook: Playbook, members: list[Node], job_file: JobFile
) -> None:
    job = Job(f"test-{job_file.name.replace('_', '-')}-{secrets.token_hex(3)}")
    where = {"job_id": job.job_id, "nproc": NPROC, "train_data_src": str(DATA)}
    first = playbook.run("train.yml", where, job_file=job_file.path)
    assert first.rc == 0, first.output
    run = playbook.runs_dir / job.job_id
    assert_results_came_back(run, job_file.settings["train_result_files"])
    assert_progress_plotted(run, job_file.settings["train_progress_regex"])

    again = playbook.run("train.yml", where | job_file.again, job_file=job_file.path)
    assert again.rc == 0, again.output
    resumed = resumed_lines(job, members, job_file.resumed)
    ranks = range(NPROC * len(members)) if job_file.every_rank else range(1)
    assert sorted(resumed) == list(ranks), resumed
    assert len(set(resumed.values())) == 1, f"not all from the same checkpoint: {resumed}"
    rank0_lines = since(job.log(members[0]))
    assert re.search(rf"^\[rank0\]: {job_file.continued}", rank0_lines, re.M), rank0_lines[-3000:]


def test_a_framework_job_killed_mid_run_restarts_and_every_rank_resumes(
    playbook: Playbook, members: list[Node]
) -> None:
    """accelerate's job file, long enough to be killed: SIGKILL to the last node's workers
    after the second checkpoint; the launcher restarts the job (the file's train_max_restarts,
    no resume flag) and every process loads the newest checkpoint."""
    job = Job(f"test-accelerate-kill-{secrets.token_hex(3)}")
    where = {
        "job_id": job.job_id,
        "nproc": NPROC,
        "train_data_src": str(DATA),
        "train_extra_args": ["--epochs", "40"],
    }
    running = playbook.start("train.yml", where, job_file=JOBS / "accelerate.yml")
    try:
        job.wait_for_log(members[0], r"^\[rank0\]: saved checkpoints/epoch_2$", interval=0.5)
        job.kill_workers(members[-1])
        outcome = running.wait(timeout=300)
    finally:
        running.kill()
    assert outcome.rc == 0, outcome.output
    assert [a["outcome"] for a in attempts(playbook, job)] == ["failed", "succeeded"]
    resumed = resumed_lines(
        job, members, r"process \d+: resumed from checkpoints/epoch_\d+ at epoch \d+", attempt=2
    )
    assert sorted(resumed) == list(range(NPROC * len(members))), resumed
    assert len(set(resumed.values())) == 1, f"not all from the same checkpoint: {resumed}"
    assert re.search(r"^\[rank0\]: Epoch 40: loss ", since(job.log(members[0]), 2), re.M)
