"""Bad environments and arguments fail at once with one clear line, before anything starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ddp_jobs import CPU_ONLY, run_direct


def assert_one_line_error(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"train_ddp.py: error: {message}"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"RANK": None},
            "RANK is not set: launch with torchrun, "
            "e.g. torchrun --nproc-per-node=2 train/train_ddp.py --data-dir DIR",
            id="missing-RANK",
        ),
        pytest.param(
            {"WORLD_SIZE": "two"}, "WORLD_SIZE must be an integer, got 'two'", id="WORLD_SIZE-two"
        ),
        pytest.param(
            {"LOCAL_RANK": "1"},
            "LOCAL_RANK must be in [0, LOCAL_WORLD_SIZE=1), got 1",
            id="LOCAL_RANK-beyond-LOCAL_WORLD_SIZE",
        ),
    ],
)
def test_bad_environment_fails_with_one_line(
    env: dict[str, str | None], message: str, mnist_root: Path, tmp_path: Path
) -> None:
    result = run_direct(f"--data-dir={mnist_root}", f"--output-dir={tmp_path / 'out'}", env=env)
    assert_one_line_error(result, message)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--batch-size=0"], "--batch-size must be a positive integer, got 0", id="batch-size-0"
        ),
        pytest.param(["--epochs=0"], "--epochs must be a positive integer, got 0", id="epochs-0"),
        pytest.param(["--lr=-0.1"], "--lr must be a positive number, got -0.1", id="lr-negative"),
        pytest.param(
            ["--data-dir={tmp}/missing"],
            "--data-dir {tmp}/missing is not a directory (or pass --download)",
            id="missing-data-dir",
        ),
        pytest.param(
            ["--data-dir={tmp}"],
            "MNIST files missing from {tmp}/MNIST/raw: train-images-idx3-ubyte, "
            "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte "
            "(pass --download, or stage them with train/digits_mnist.py)",
            id="data-dir-without-mnist",
        ),
        pytest.param(
            # A path below a regular file: unwritable even for root.
            ["--output-dir={tmp}/file/out"],
            "--output-dir {tmp}/file/out is not writable: Not a directory",
            id="unwritable-output-dir",
        ),
    ],
)
def test_bad_argument_fails_with_one_line(
    args: list[str], message: str, mnist_root: Path, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    out = tmp_path / "out"
    args = [arg.format(tmp=tmp_path) for arg in args]
    result = run_direct(f"--data-dir={mnist_root}", f"--output-dir={out}", *args)
    assert_one_line_error(result, message.format(tmp=tmp_path))
    assert not out.exists()


def test_nccl_on_a_machine_without_gpus_fails_with_one_line(
    mnist_root: Path, tmp_path: Path
) -> None:
    # No GPU visible, whatever the machine has.
    out = tmp_path / "out"
    result = run_direct(
        f"--data-dir={mnist_root}", f"--output-dir={out}", "--backend=nccl", env=CPU_ONLY
    )
    assert_one_line_error(result, "--backend nccl needs CUDA GPUs, but none are visible")
    assert not out.exists()
