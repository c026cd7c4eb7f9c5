"""What a person reads of train.yml (ansible.cfg's quiet callback): a short job run as
`make demo` runs it, rank 0's lines followed, prints those lines and at most 40 others: the
steps that did something, the launcher's messages, each once, and the recap."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest
from launcher import Job, Outcome, Playbook, job_vars

# What comes before each followed line of rank 0 (plugins/action/torch_job_watch.py).
JOB_LINE = "[rank0] "
MOST_OTHER_LINES = 40


@dataclass(frozen=True)
class Demo:
    run_dir: Path
    job: Job
    outcome: Outcome


@pytest.fixture(scope="module")
def demo(inventory_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """`make demo`'s job: 2 processes a node, 3 epochs, followed, the watch's default interval."""
    playbook = Playbook(inventory_file, tmp_path_factory.mktemp("demo") / "runs")
    job = Job(f"test-{secrets.token_hex(4)}")
    extra = job_vars(job, "--epochs", "3", nproc=2, train_follow=True, train_watch_interval=25)
    return Demo(playbook.runs_dir / job.job_id, job, playbook.run("train.yml", extra))


def test_a_demo_job_prints_at_most_40_lines_besides_its_own(demo: Demo) -> None:
    outcome = demo.outcome
    assert outcome.rc == 0, outcome.output
    lines = outcome.output.splitlines()
    own = [line for line in lines if line.startswith(JOB_LINE)]
    assert own, outcome.output
    assert len(lines) - len(own) <= MOST_OTHER_LINES, outcome.output


def test_a_demo_jobs_verdict_is_said_once_with_its_results(demo: Demo) -> None:
    outcome = demo.outcome
    assert outcome.rc == 0, outcome.output
    verdict = f"Job {demo.job.job_id} succeeded"
    said = [line for line in outcome.output.splitlines() if verdict in line]
    assert len(said) == 1, outcome.output
    assert f"Results: {demo.run_dir}/." in said[0]
