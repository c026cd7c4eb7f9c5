"""A 2-rank torchrun job trains, reports globally and writes rank 0's outputs."""

from __future__ import annotations

import re

import pytest
import torch
from ddp_jobs import SMALL_JOB_EPOCHS, FinishedJob

FLOAT = r"[0-9]+(?:\.[0-9]+)?"
PROGRESS = re.compile(
    rf"progress epoch=(\d+)/{SMALL_JOB_EPOCHS} step=(\d+)/(\d+) loss={FLOAT} samples_per_s={FLOAT}"
)
EPOCH = re.compile(
    rf"epoch (\d+)/{SMALL_JOB_EPOCHS} loss={FLOAT} test_accuracy={FLOAT} "
    rf"samples_per_s={FLOAT} seconds={FLOAT}"
)


def test_loss_falls(two_rank_run: FinishedJob) -> None:
    losses = [entry["loss"] for entry in two_rank_run.metrics()["history"]]
    assert losses[-1] < 0.5 * losses[0], losses


def test_test_accuracy_passes_0_85(two_rank_run: FinishedJob) -> None:
    assert two_rank_run.metrics()["test_accuracy"] > 0.85


def test_metrics_json_describes_the_run(two_rank_run: FinishedJob) -> None:
    metrics = two_rank_run.metrics()
    assert metrics["world_size"] == 2
    assert (metrics["epochs"], metrics["epochs_completed"]) == (SMALL_JOB_EPOCHS, SMALL_JOB_EPOCHS)
    assert (metrics["model"], metrics["batch_size"], metrics["lr"]) == ("linear", 8, 0.02)
    assert (metrics["seed"], metrics["backend"]) == (3, "gloo")
    assert metrics["samples_per_s"] > 0
    history = metrics["history"]
    assert [entry["epoch"] for entry in history] == list(range(1, SMALL_JOB_EPOCHS + 1))
    assert metrics["final_loss"] == history[-1]["loss"]
    assert metrics["test_accuracy"] == history[-1]["test_accuracy"]
    for entry in history:
        assert entry["samples"] == 1500  # 2 shards of 750: the padding is zero here
        assert entry["samples_per_s"] == pytest.approx(entry["samples"] / entry["seconds"])


def test_loss_plot_is_a_png(two_rank_run: FinishedJob) -> None:
    assert (two_rank_run.out_dir / "loss.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_progress_and_epoch_lines_follow_the_launcher_format(two_rank_run: FinishedJob) -> None:
    lines = two_rank_run.output.splitlines()
    progress = [PROGRESS.fullmatch(line) for line in lines if line.startswith("progress")]
    epochs = [EPOCH.fullmatch(line) for line in lines if line.startswith("epoch ")]
    assert progress, lines
    assert all(progress), lines
    assert all(epochs), lines
    assert [int(m[1]) for m in epochs] == list(range(1, SMALL_JOB_EPOCHS + 1))
    # Every epoch ends with a progress line at its last step; 750 samples / 8 = 94 steps.
    finals = {int(m[1]) for m in progress if m[2] == m[3] == "94"}
    assert finals == set(range(1, SMALL_JOB_EPOCHS + 1))


def test_checkpoint_holds_weights_optimizer_and_epoch(two_rank_run: FinishedJob) -> None:
    saved = torch.load(two_rank_run.out_dir / "checkpoint.pt", weights_only=True)
    assert saved["epoch"] == SMALL_JOB_EPOCHS
    assert set(saved["model"]) == {"1.weight", "1.bias"}  # the bare module, no "module." prefix
    assert saved["optimizer"]["param_groups"][0]["lr"] == 0.02
    assert len(saved["history"]) == SMALL_JOB_EPOCHS
