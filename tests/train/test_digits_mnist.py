"""train/digits_mnist.py writes files that torchvision's own MNIST class reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from digits_mnist import write_mnist
from torchvision.datasets import MNIST

TOOL = Path(__file__).resolve().parents[2] / "train" / "digits_mnist.py"


@pytest.mark.parametrize(("train", "count"), [(True, 1500), (False, 297)])
def test_torchvision_reads_the_default_split(mnist_root: Path, train: bool, count: int) -> None:
    split = MNIST(mnist_root, train=train, download=False)
    assert tuple(split.data.shape) == (count, 28, 28)
    assert split.data.dtype == torch.uint8
    assert int(split.data.max()) == 255
    assert sorted(set(split.targets.tolist())) == list(range(10))


def test_extra_training_images_are_shifted_training_digits(tmp_path: Path) -> None:
    write_mnist(tmp_path, train_size=3000)
    train, test = MNIST(tmp_path, train=True), MNIST(tmp_path, train=False)
    originals, extras = train.data[:1500], train.data[1500:]
    assert len(extras) == 1500

    def moved(images: torch.Tensor, limit: int) -> set[bytes]:
        # The 4-pixel empty margin makes a roll of up to 2 pixels a plain shift.
        shifts = range(-limit, limit + 1)
        return {
            image.numpy().tobytes()
            for dy in shifts
            for dx in shifts
            for image in torch.roll(images, (dy, dx), dims=(1, 2))
        }

    reachable = moved(originals, 2)
    assert all(image.numpy().tobytes() in reachable for image in extras)
    assert any(image.numpy().tobytes() not in moved(originals, 0) for image in extras)
    # The held-out test digits stay out of training, shifted or not.
    assert not moved(test.data, 2) & {image.numpy().tobytes() for image in train.data}


def test_same_seed_writes_identical_files(tmp_path: Path) -> None:
    first = write_mnist(tmp_path / "a", train_size=3000, seed=5).raw_dir
    second = write_mnist(tmp_path / "b", train_size=3000, seed=5).raw_dir
    for path in first.iterdir():
        assert path.read_bytes() == (second / path.name).read_bytes(), path.name


def test_cli_needs_only_numpy_and_scikit_learn(tmp_path: Path) -> None:
    # The controller stages data with this tool and may not have torch.
    probe = f"""
import runpy, sys
sys.argv = ["digits_mnist.py", "--out", {str(tmp_path)!r}, "--train-size", "2000"]
try:
    runpy.run_path({str(TOOL)!r}, run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
assert "torch" not in sys.modules, "imported torch"
"""
    subprocess.run([sys.executable, "-c", probe], check=True)
    assert len(MNIST(tmp_path, train=True)) == 2000
