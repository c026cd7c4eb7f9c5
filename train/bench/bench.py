#!/usr/bin/env python3
"""Benchmark train_ddp.py against the how-to guide's pipeline (train/bench/guide_ddp.py).

    python train/bench/bench.py [--train-size 60000] [--nproc 2] [--epochs 1]

Both run the same job under torchrun on this machine: NPROC CPU ranks on gloo,
batch 64 per rank, the linear model, SGD lr 0.01, over TRAIN_SIZE MNIST-format
digits staged with train/digits_mnist.py. Each reports its global samples/s over
its training loop and its test accuracy. Exits 1 unless train_ddp.py is at least
4x the guide's samples/s at no lower test accuracy.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[1]
TARGET_SPEEDUP = 4.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(nproc: int, script: Path, *args: str) -> tuple[str, float]:
    """Run `script` on nproc local ranks; its stdout and the job's wall-clock seconds."""
    command = [
        *(sys.executable, "-m", "torch.distributed.run"),
        *("--nnodes=1", f"--nproc-per-node={nproc}"),
        *("--master-addr=127.0.0.1", f"--master-port={free_port()}"),
        *(str(script), *args),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"bench: {script.name} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-size", type=int, default=60_000, help="training images (60000)")
    parser.add_argument("--nproc", type=int, default=2, help="CPU ranks (default 2)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs (default 1)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        data, out = Path(tmp, "data"), Path(tmp, "out")
        subprocess.run(
            [
                sys.executable,
                TRAIN / "digits_mnist.py",
                "--out",
                data,
                "--train-size",
                str(args.train_size),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        epochs = f"--epochs={args.epochs}"
        guide_log, guide_wall = torchrun(
            args.nproc, TRAIN / "bench" / "guide_ddp.py", f"--data-dir={data}", epochs
        )
        _, ours_wall = torchrun(
            args.nproc,
            TRAIN / "train_ddp.py",
            *(f"--data-dir={data}", f"--output-dir={out}", epochs, "--backend=gloo"),
            *("--model=linear", "--batch-size=64", "--lr=0.01"),
        )
        ours = json.loads((out / "metrics.json").read_text())

    guide = {
        key: float(value)
        for key, value in re.findall(r"(\w+)=([\d.]+)", guide_log.splitlines()[-1])
    }
    speedup = ours["samples_per_s"] / guide["samples_per_s"]
    met = speedup >= TARGET_SPEEDUP and ours["test_accuracy"] >= guide["test_accuracy"]
    print(
        f"workload: {args.nproc} CPU ranks (gloo, torchrun), linear model, batch 64 per rank, "
        f"lr 0.01, {args.epochs} epoch(s) of {args.train_size} images\n"
        f"{'':14}{'samples/s':>12}{'test_accuracy':>15}{'job_seconds':>13}\n"
        f"{'guide_ddp.py':14}{guide['samples_per_s']:12.0f}{guide['test_accuracy']:15.4f}"
        f"{guide_wall:13.1f}\n"
        f"{'train_ddp.py':14}{ours['samples_per_s']:12.0f}{ours['test_accuracy']:15.4f}"
        f"{ours_wall:13.1f}\n"
        f"speedup {speedup:.2f}x (target >= {TARGET_SPEEDUP:.0f}x, accuracy no lower): "
        f"{'met' if met else 'NOT met'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
