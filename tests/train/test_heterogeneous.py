"""Nodes with different process counts: 2 + 1 CPU ranks over two torchrun invocations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ddp_jobs import Job, free_port

EPOCHS = 2


@pytest.fixture(scope="module")
def two_plus_one(mnist_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Node 0 runs ranks 0-1 and node 1 rank 2, each with an output dir of its own: the
    returned folder holds node0/, node1/ (if anything wrote there) and both logs."""
    tmp = tmp_path_factory.mktemp("two-plus-one")
    args = (f"--data-dir={mnist_root}", "--model=cnn", "--batch-size=8", "--lr=0.05")
    port = free_port()
    with (
        Job(
            tmp / "node0.log",
            *args,
            f"--epochs={EPOCHS}",
            f"--output-dir={tmp / 'node0'}",
            nproc=2,
            nnodes=2,
            node_rank=0,
            port=port,
        ) as node0,
        Job(
            tmp / "node1.log",
            *args,
            f"--epochs={EPOCHS}",
            f"--output-dir={tmp / 'node1'}",
            nproc=1,
            nnodes=2,
            node_rank=1,
            port=port,
        ) as node1,
    ):
        node0.wait()
        node1.wait()
    return tmp


def test_two_plus_one_ranks_train_as_one_world_of_3(two_plus_one: Path) -> None:
    metrics = json.loads((two_plus_one / "node0" / "metrics.json").read_text())
    assert metrics["world_size"] == 3
    assert metrics["epochs_completed"] == EPOCHS
    history = metrics["history"]
    assert history[-1]["loss"] < history[0]["loss"]
    assert metrics["test_accuracy"] > 0.5
    # 1,500 samples over 3 ranks, 500 each.
    assert all(entry["samples"] == 1500 for entry in history)


def test_only_rank_0_writes_and_prints(two_plus_one: Path) -> None:
    assert sorted(path.name for path in (two_plus_one / "node0").iterdir()) == [
        "checkpoint.pt",
        "loss.png",
        "metrics.json",
    ]
    assert not (two_plus_one / "node1").exists()
    node1_log = (two_plus_one / "node1.log").read_text()
    assert "progress" not in node1_log
    assert "epoch " not in node1_log
