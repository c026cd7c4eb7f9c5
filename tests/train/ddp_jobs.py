"""Start the trainer for real: torchrun jobs as subprocesses, or one bare process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TRAINER = Path(__file__).resolve().parents[2] / "train" / "train_ddp.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
JOB_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _process_tree(root: int) -> list[int]:
    """root and all its descendants, found through /proc: torchrun starts each worker in a
    session of its own, so killing torchrun's process group would miss them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # exited while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [root], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        tree += kids
        todo += kids
    return tree


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


# The CPU, whatever the machine has: torchrun jobs here run more ranks than a GPU machine
# may have GPUs, and what they test (sharding, heterogeneous nodes, exact resume) is the same
# on gloo. The GPU path (nccl) needs a GPU machine and is not exercised here.
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}


class Job:
    """One torchrun invocation, i.e. one node, logging to `log`, on the CPU. As a context
    manager it kills whatever is still running on exit, so a failing test leaves no workers
    behind."""

    def __init__(
        self,
        log: Path,
        *args: str | Path,
        nproc: int,
        port: int,
        nnodes: int = 1,
        node_rank: int = 0,
    ) -> None:
        self.log = log
        command = [
            TORCHRUN,
            *(f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", f"--node-rank={node_rank}"),
            *("--master-addr=127.0.0.1", f"--master-port={port}"),
            *(TRAINER, *args),
        ]
        with log.open("wb") as sink:
            self.proc = subprocess.Popen(
                command,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **CPU_ONLY},
            )

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.proc.poll() is None:
            self.kill()

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout: float = JOB_TIMEOUT_S) -> str:
        """Wait for a job that must succeed; its output."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"torchrun still running after {timeout}s:\n{self.output()}")
        assert self.proc.returncode == 0, self.output()
        return self.output()

    def kill(self) -> None:
        """SIGKILL torchrun and every worker at once, as a crash or the OOM killer would."""
        tree = _process_tree(self.proc.pid)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in tree):
            assert time.monotonic() < deadline, f"processes survived SIGKILL: {tree}"
            time.sleep(0.05)


@dataclass(frozen=True)
class FinishedJob:
    output: str  # torchrun's stdout and stderr, rank 0's lines among them
    out_dir: Path

    def metrics(self) -> dict[str, Any]:
        return json.loads((self.out_dir / "metrics.json").read_text())


def run_direct(
    *args: str | Path, env: Mapping[str, str | None] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the trainer as one bare process with the environment torchrun would give a world
    of one, changed by `env` (a None value removes the variable)."""
    environ: dict[str, str] = {
        **os.environ,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    for name, value in (env or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return subprocess.run(
        [sys.executable, TRAINER, *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )


# The shared small job: 2 ranks x batch 8 over the 1,500 digits gives ~0.4 s epochs (time to
# kill a run between checkpoints), and 5 epochs of lr 0.02 pass 0.94 test accuracy on every
# seed tried.
SMALL_JOB = ("--model=linear", "--batch-size=8", "--lr=0.02", "--epochs=5", "--seed=3")
SMALL_JOB_EPOCHS = 5
