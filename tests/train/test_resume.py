"""A run SIGKILLed mid-training resumes from its last complete epoch and ends where an
uninterrupted run with the same seed ends."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from ddp_jobs import SMALL_JOB, SMALL_JOB_EPOCHS, FinishedJob, Job, free_port, run_direct


@dataclass(frozen=True)
class Resumed(FinishedJob):
    killed_after: int  # epochs in the checkpoint the killed run left


def _wait_for(path: Path, job: Job, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert job.proc.poll() is None, f"job ended before writing {path}:\n{job.output()}"
        assert time.monotonic() < deadline, f"no {path} after {timeout}s:\n{job.output()}"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def resumed(mnist_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Resumed:
    tmp = tmp_path_factory.mktemp("resume")
    args = (f"--data-dir={mnist_root}", f"--output-dir={tmp / 'out'}", *SMALL_JOB)
    with Job(tmp / "killed.log", *args, nproc=2, port=free_port()) as job:
        _wait_for(tmp / "out" / "checkpoint.pt", job)
        job.kill()
    killed_after = torch.load(tmp / "out" / "checkpoint.pt", weights_only=True)["epoch"]
    with Job(tmp / "resumed.log", *args, "--resume", nproc=2, port=free_port()) as job:
        return Resumed(job.wait(), tmp / "out", killed_after)


def test_killed_run_resumes_at_the_epoch_after_its_checkpoint(resumed: Resumed) -> None:
    assert 1 <= resumed.killed_after < SMALL_JOB_EPOCHS
    next_epoch = resumed.killed_after + 1
    assert f"continuing at epoch {next_epoch}/{SMALL_JOB_EPOCHS}" in resumed.output
    trained = sorted({int(e) for e in re.findall(r"^progress epoch=(\d+)/", resumed.output, re.M)})
    assert trained == list(range(next_epoch, SMALL_JOB_EPOCHS + 1))


def test_resumed_metrics_keep_the_epochs_before_the_kill(resumed: Resumed) -> None:
    history = resumed.metrics()["history"]
    assert [entry["epoch"] for entry in history] == list(range(1, SMALL_JOB_EPOCHS + 1))


def test_resumed_run_ends_with_the_uninterrupted_runs_weights(
    resumed: Resumed, two_rank_run: FinishedJob
) -> None:
    weights = torch.load(resumed.out_dir / "checkpoint.pt", weights_only=True)["model"]
    expected = torch.load(two_rank_run.out_dir / "checkpoint.pt", weights_only=True)["model"]
    assert weights.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_resume_without_checkpoint_starts_from_scratch(mnist_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_direct(f"--data-dir={mnist_root}", f"--output-dir={out}", "--epochs=1", "--resume")
    assert done.returncode == 0, done.stderr
    assert f"resume: no checkpoint at {out / 'checkpoint.pt'}, starting from scratch" in done.stdout
    assert torch.load(out / "checkpoint.pt", weights_only=True)["epoch"] == 1
