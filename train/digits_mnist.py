#!/usr/bin/env python3
"""Stand-in for MNIST: scikit-learn's bundled handwritten digits, written as MNIST's raw files.

    python train/digits_mnist.py --out DIR [--train-size N] [--seed S]

writes DIR/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte, which
torchvision.datasets.MNIST(DIR, download=False) reads like the real thing. The
1,797 8x8 digits are upscaled into MNIST's layout (a 20x20 box centred in a
28x28 frame, 0..255) and split once, by seed, into 1,500 training and 297 test
images. Asking for more training images than that adds copies of the training
digits shifted by up to 2 pixels, so the test images never leak into training.
Needs only numpy and scikit-learn: the controller stages data for nodes with it.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

FRAME = 28
BOX = 20  # MNIST's digits fill a 20x20 box; the margin leaves room for the shifts
MAX_SHIFT = 2
TEST_SIZE = 297
IDX_UBYTE = 0x08


@dataclass(frozen=True)
class Written:
    raw_dir: Path
    train_size: int
    test_size: int


def _interpolation_matrix(src: int, dst: int) -> np.ndarray:
    """Row i holds the bilinear weights of the src pixels under dst pixel i (centres aligned)."""
    pos = np.clip((np.arange(dst) + 0.5) * src / dst - 0.5, 0, src - 1)
    lower = np.floor(pos).astype(int)
    upper = np.minimum(lower + 1, src - 1)
    frac = pos - lower
    weights = np.zeros((dst, src))
    np.add.at(weights, (np.arange(dst), lower), 1 - frac)
    np.add.at(weights, (np.arange(dst), upper), frac)
    return weights


def to_mnist_frames(digits: np.ndarray) -> np.ndarray:
    """(N, 8, 8) images in 0..16 -> (N, 28, 28) uint8 in 0..255, each digit centred as in MNIST."""
    scale = _interpolation_matrix(digits.shape[1], BOX)
    boxes = np.einsum("ij,njk,lk->nil", scale, digits, scale) * (255 / 16)
    margin = (FRAME - BOX) // 2
    frames = np.zeros((len(digits), FRAME, FRAME), dtype=np.uint8)
    frames[:, margin : margin + BOX, margin : margin + BOX] = np.clip(np.rint(boxes), 0, 255)
    return frames


def shifted_copies(
    frames: np.ndarray, labels: np.ndarray, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`count` random picks of `frames`, each moved by up to MAX_SHIFT pixels along each axis."""
    picks = rng.integers(len(frames), size=count)
    shifts = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, size=(count, 2))
    padded = np.pad(frames, ((0, 0), (MAX_SHIFT, MAX_SHIFT), (MAX_SHIFT, MAX_SHIFT)))
    out = np.empty((count, FRAME, FRAME), dtype=np.uint8)
    # One vectorised crop per distinct shift instead of a Python loop per image.
    for dy, dx in np.unique(shifts, axis=0):
        chosen = np.flatnonzero((shifts[:, 0] == dy) & (shifts[:, 1] == dx))
        top, left = MAX_SHIFT - dy, MAX_SHIFT - dx
        out[chosen] = padded[picks[chosen], top : top + FRAME, left : left + FRAME]
    return out, labels[picks]


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write `array` (uint8) in the IDX format, via a temporary file so readers never see half."""
    header = struct.pack(">HBB", 0, IDX_UBYTE, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())
    os.replace(tmp, path)


def write_mnist(root: Path, train_size: int | None = None, seed: int = 0) -> Written:
    """Write the four raw files under root/MNIST/raw. train_size None: the 1,500 originals."""
    digits = load_digits()
    frames = to_mnist_frames(digits.images)
    labels = digits.target.astype(np.uint8)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(frames))
    test, train = order[:TEST_SIZE], order[TEST_SIZE:]
    train_frames, train_labels = frames[train], labels[train]
    if train_size is not None and train_size <= len(train):
        train_frames, train_labels = train_frames[:train_size], train_labels[:train_size]
    elif train_size is not None:
        extra_frames, extra_labels = shifted_copies(
            train_frames, train_labels, train_size - len(train), rng
        )
        train_frames = np.concatenate([train_frames, extra_frames])
        train_labels = np.concatenate([train_labels, extra_labels])

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    write_idx(raw / "train-images-idx3-ubyte", train_frames)
    write_idx(raw / "train-labels-idx1-ubyte", train_labels)
    write_idx(raw / "t10k-images-idx3-ubyte", frames[test])
    write_idx(raw / "t10k-labels-idx1-ubyte", labels[test])
    return Written(raw, len(train_labels), len(test))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="root directory (MNIST's root=)")
    parser.add_argument(
        "--train-size",
        type=_positive_int,
        help="training images (default: the 1,500 originals; more adds shifted copies)",
    )
    parser.add_argument("--seed", type=int, default=0, help="split and shift seed (default 0)")
    args = parser.parse_args(argv)
    try:
        written = write_mnist(args.out, args.train_size, args.seed)
    except OSError as err:
        print(f"{parser.prog}: error: cannot write under {args.out}: {err}", file=sys.stderr)
        return 1
    print(
        f"wrote {written.train_size} training, {written.test_size} test images: {written.raw_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
