"""Shared fixtures for the train/ tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ddp_jobs import SMALL_JOB, FinishedJob, Job, free_port

# train/ is a folder of scripts, not a package: let the tests import them as modules.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "train"))

from digits_mnist import write_mnist


@pytest.fixture(scope="session")
def mnist_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default digits split (1,500 train / 297 test) in MNIST's raw layout."""
    root = tmp_path_factory.mktemp("mnist")
    write_mnist(root)
    return root


@pytest.fixture(scope="session")
def two_rank_run(mnist_root: Path, tmp_path_factory: pytest.TempPathFactory) -> FinishedJob:
    """SMALL_JOB run to the end on 2 ranks, with progress lines as often as possible. It
    passes --download too: with the files present that is one check per node and a barrier."""
    tmp = tmp_path_factory.mktemp("two-rank")
    args = (
        f"--data-dir={mnist_root}",
        f"--output-dir={tmp / 'out'}",
        "--log-interval=0",
        "--download",
    )
    with Job(tmp / "torchrun.log", *args, *SMALL_JOB, nproc=2, port=free_port()) as job:
        return FinishedJob(job.wait(), tmp / "out")
