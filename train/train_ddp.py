#!/usr/bin/env python3
"""Data-parallel MNIST training, launched by torchrun on one or many nodes.

    torchrun --nproc-per-node=N [--nnodes=M --node-rank=I --master-addr=H --master-port=P] \\
        train/train_ddp.py --data-dir DIR [--output-dir OUT] [--epochs E] [--resume] ...

Every rank holds the whole dataset in memory (on its GPU when training on GPUs)
and steps over its shard of a per-epoch shuffle, so the hot loop runs no
per-sample Python. Rank 0 alone prints and writes OUT/checkpoint.pt,
OUT/metrics.json and OUT/loss.png; see train/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

if TYPE_CHECKING:
    from torchvision.datasets import MNIST

PROG = "train_ddp.py"
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
# The usual MNIST statistics, fixed rather than measured so that a checkpoint
# means the same thing whichever data it was trained on.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
# Ranks all-reduce their running loss every this many steps: often enough for
# timely progress lines, rarely enough that the collective costs nothing.
REDUCE_EVERY = 10
EVAL_BATCH = 1024
CHECKPOINT, METRICS, LOSS_PLOT = "checkpoint.pt", "metrics.json", "loss.png"

MODELS: dict[str, Callable[[], nn.Module]] = {
    # The guide's model: multinomial logistic regression on raw pixels.
    "linear": lambda: nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10)),
    "cnn": lambda: nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 28x28 -> 14x14
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 14x14 -> 7x7
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 10),
    ),
}


class SetupError(Exception):
    """A problem the user can fix: reported as one line on stderr, without a traceback."""


@dataclass(frozen=True)
class Config:
    data_dir: Path
    output_dir: Path
    epochs: int
    batch_size: int
    lr: float
    seed: int
    model: str
    backend: str
    download: bool
    resume: bool
    log_interval: float
    timeout: float


Split = tuple[torch.Tensor, torch.Tensor]  # images (N, 1, 28, 28), labels (N,)


@dataclass(frozen=True)
class Dist:
    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: torch.device


@dataclass
class TrainState:
    """Everything a checkpoint restores. Steps go through `ddp`, which averages gradients
    across ranks; checkpoints and evaluation use the bare `model` it wraps."""

    model: nn.Module
    ddp: DistributedDataParallel
    optimizer: torch.optim.Optimizer
    history: list[dict[str, float]] = field(default_factory=list)  # one entry per epoch
    curve: list[list[float]] = field(default_factory=list)  # [fractional epoch, loss]


@dataclass(frozen=True)
class EpochResult:
    loss: float
    samples: int
    seconds: float
    curve: list[list[float]]  # [fractional epoch, loss] per all-reduce window


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line and no usage dump: under torchrun every rank prints it, interleaved.
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_config(argv: list[str] | None = None) -> Config:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--data-dir", type=Path, required=True, help="MNIST root: reads DIR/MNIST/raw/*-ubyte")
    add("--output-dir", type=Path, default=Path("runs/train_ddp"), help="written by rank 0 only")
    add("--epochs", type=int, default=5, help="total epochs, including resumed ones (default 5)")
    add("--batch-size", type=int, default=64, help="per rank (default 64)")
    add("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    add("--seed", type=int, default=0, help="weights and per-epoch shuffles (default 0)")
    add("--model", choices=sorted(MODELS), default="linear", help="default: linear")
    add(
        "--backend",
        choices=("auto", "nccl", "gloo"),
        default="auto",
        help="auto: nccl on CUDA GPUs, else gloo; gloo always trains on the CPU",
    )
    add("--download", action="store_true", help="fetch MNIST (LOCAL_RANK 0 of each node)")
    add("--resume", action="store_true", help="continue from OUTPUT/checkpoint.pt if present")
    add("--log-interval", type=float, default=10.0, help="seconds between progress lines")
    add("--timeout", type=float, default=600.0, help="collective timeout in seconds (600)")
    args = parser.parse_args(argv)

    for flag, value in (("--epochs", args.epochs), ("--batch-size", args.batch_size)):
        if value < 1:
            parser.error(f"{flag} must be a positive integer, got {value}")
    for flag, value in (("--lr", args.lr), ("--timeout", args.timeout)):
        if not (math.isfinite(value) and value > 0):
            parser.error(f"{flag} must be a positive number, got {value}")
    if not (math.isfinite(args.log_interval) and args.log_interval >= 0):
        parser.error(f"--log-interval must be zero or more seconds, got {args.log_interval}")
    if not args.download:
        raw = args.data_dir / "MNIST" / "raw"
        if not args.data_dir.is_dir():
            parser.error(f"--data-dir {args.data_dir} is not a directory (or pass --download)")
        missing = [name for name in MNIST_FILES if not (raw / name).is_file()]
        if missing:
            parser.error(
                f"MNIST files missing from {raw}: {', '.join(missing)} "
                "(pass --download, or stage them with train/digits_mnist.py)"
            )
    return Config(**vars(args))


def _env_int(name: str) -> int:
    if name not in os.environ:
        raise SetupError(
            f"{name} is not set: launch with torchrun, e.g. "
            f"torchrun --nproc-per-node=2 train/{PROG} --data-dir DIR"
        )
    try:
        return int(os.environ[name])
    except ValueError:
        raise SetupError(f"{name} must be an integer, got {os.environ[name]!r}") from None


def setup(cfg: Config) -> Dist:
    """Check torchrun's environment and the output directory, then join the process group."""
    rank, local_rank, world_size, local_world_size = (
        _env_int(name) for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    )
    if not os.environ.get("MASTER_ADDR"):
        raise SetupError("MASTER_ADDR is not set: launch with torchrun")
    master_port = _env_int("MASTER_PORT")
    if not 0 < master_port < 65536:
        raise SetupError(f"MASTER_PORT must be a TCP port, got {master_port}")
    if not 0 <= rank < world_size:
        raise SetupError(f"RANK must be in [0, WORLD_SIZE={world_size}), got {rank}")
    if not 0 < local_world_size <= world_size:
        raise SetupError(
            f"LOCAL_WORLD_SIZE must be in [1, WORLD_SIZE={world_size}], got {local_world_size}"
        )
    if not 0 <= local_rank < local_world_size:
        raise SetupError(
            f"LOCAL_RANK must be in [0, LOCAL_WORLD_SIZE={local_world_size}), got {local_rank}"
        )

    backend = cfg.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise SetupError("--backend nccl needs CUDA GPUs, but none are visible")
        if local_rank >= gpus:
            raise SetupError(
                f"LOCAL_RANK {local_rank} needs GPU cuda:{local_rank} but {gpus} are visible: "
                f"start at most {gpus} processes on this node (--nproc-per-node)"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if rank == 0:
        _check_writable(cfg.output_dir)

    # Ranks sharing a node share its cores; more threads than that only contend.
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // local_world_size))
    dist.init_process_group(
        backend,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=cfg.timeout),
        device_id=device if device.type == "cuda" else None,
    )
    return Dist(rank, local_rank, world_size, backend, device)


def _check_writable(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test.{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise SetupError(f"--output-dir {path} is not writable: {err.strerror}") from None


def log(ctx: Dist, message: str) -> None:
    if ctx.rank == 0:
        print(message, flush=True)


def open_mnist(cfg: Config, train: bool = True, download: bool = False) -> MNIST:
    # Imported only once the inputs have been checked: torchvision's import pulls in
    # torch._dynamo and takes seconds, which a mistyped option should not have to wait for.
    from torchvision.datasets import MNIST  # noqa: PLC0415

    return MNIST(str(cfg.data_dir), train=train, download=download)


def download(cfg: Config, ctx: Dist) -> None:
    """One download per node while its other ranks wait, instead of all racing on the same files."""
    if ctx.local_rank == 0:
        try:
            open_mnist(cfg, download=True)
        except (OSError, RuntimeError) as err:
            reason = " ".join(str(err).split())
            raise SetupError(f"could not download MNIST into {cfg.data_dir}: {reason}") from None
    if ctx.device.type == "cuda":
        dist.barrier(device_ids=[ctx.device.index])
    else:
        dist.barrier()


def load_split(cfg: Config, ctx: Dist, train: bool) -> Split:
    """A whole split as normalised floats and int64 labels, resident on the training device."""
    split = open_mnist(cfg, train=train)
    images = split.data.to(ctx.device).float().div_(255).sub_(MNIST_MEAN).div_(MNIST_STD)
    return images.unsqueeze_(1), split.targets.to(ctx.device)


def epoch_shard(n: int, epoch: int, seed: int, rank: int, world_size: int) -> torch.Tensor:
    """This rank's sample order for `epoch`: what DistributedSampler(shuffle=True) yields after
    set_epoch(epoch). Every rank draws the same permutation and takes a strided slice of it,
    padded by wrapping round so that all ranks run the same number of steps, as DDP requires."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
    total = math.ceil(n / world_size) * world_size
    return order.repeat(math.ceil(total / n))[:total][rank::world_size]


def build_state(cfg: Config, ctx: Dist) -> TrainState:
    torch.manual_seed(cfg.seed)
    model = MODELS[cfg.model]()
    saved = load_checkpoint(cfg, ctx) if cfg.resume else None
    if saved is not None:
        # Loaded before the DDP wrap, whose constructor broadcasts rank 0's weights anyway.
        model.load_state_dict(saved["model"])
    model.to(ctx.device)
    ddp = DistributedDataParallel(
        model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None
    )
    state = TrainState(model, ddp, torch.optim.SGD(model.parameters(), lr=cfg.lr))
    if saved is not None:
        state.optimizer.load_state_dict(saved["optimizer"])
        state.history, state.curve = saved["history"], saved["loss_curve"]
    elif ctx.rank == 0 and (cfg.output_dir / CHECKPOINT).exists():
        log(ctx, f"note: replacing {cfg.output_dir / CHECKPOINT}; --resume would continue it")
    return state


def load_checkpoint(cfg: Config, ctx: Dist) -> dict[str, Any] | None:
    """Rank 0's checkpoint, read once and sent to every rank, whatever storage they share."""
    path = cfg.output_dir / CHECKPOINT
    box = [None]
    if ctx.rank == 0 and path.is_file():
        box = [torch.load(path, map_location="cpu", weights_only=True)]
    dist.broadcast_object_list(box, src=0)
    saved = box[0]
    if saved is None:
        log(ctx, f"resume: no checkpoint at {path}, starting from scratch")
        return None
    if saved["config"]["model"] != cfg.model:
        raise SetupError(
            f"--resume: {path} holds a {saved['config']['model']} model, not {cfg.model}"
        )
    done = saved["epoch"]
    if done < cfg.epochs:
        log(ctx, f"resume: {path}: epoch {done} done, continuing at epoch {done + 1}/{cfg.epochs}")
    else:
        log(
            ctx,
            f"resume: {path}: epoch {done} done, nothing left to train for --epochs {cfg.epochs}",
        )
    return saved


def train_epoch(cfg: Config, ctx: Dist, state: TrainState, data: Split, epoch: int) -> EpochResult:
    images, labels = data
    shard = epoch_shard(len(labels), epoch, cfg.seed, ctx.rank, ctx.world_size).to(ctx.device)
    steps = math.ceil(len(shard) / cfg.batch_size)
    # The loss stays on the device and is summed across ranks once per window, so the loop
    # never waits for the GPU. Sample counts need no reduction: all ranks' batches are equal.
    pending, pending_samples = torch.zeros(1, device=ctx.device), 0
    sums: list[torch.Tensor] = []  # all-reduced loss sum of each window
    windows: list[tuple[int, int]] = []  # (last step, global samples) of each window
    start = last_log = time.perf_counter()
    logged = 0
    for step in range(1, steps + 1):
        batch = shard[(step - 1) * cfg.batch_size : step * cfg.batch_size]
        # index_select: a plain gather, over twice as fast as images[batch] on the CPU.
        inputs, targets = images.index_select(0, batch), labels.index_select(0, batch)
        loss = F.cross_entropy(state.ddp(inputs), targets)
        state.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        state.optimizer.step()
        pending.add_(loss.detach(), alpha=len(batch))
        pending_samples += len(batch)
        if step % REDUCE_EVERY and step < steps:
            continue
        dist.all_reduce(pending)
        sums.append(pending)
        windows.append((step, pending_samples * ctx.world_size))
        pending, pending_samples = torch.zeros(1, device=ctx.device), 0
        if ctx.rank == 0 and (step == steps or time.perf_counter() - last_log >= cfg.log_interval):
            loss_sum = torch.cat(sums[logged:]).sum().item()
            samples = sum(n for _, n in windows[logged:])
            now = time.perf_counter()
            print(
                f"progress epoch={epoch + 1}/{cfg.epochs} step={step}/{steps} "
                f"loss={loss_sum / samples:.4f} samples_per_s={samples / (now - last_log):.1f}",
                flush=True,
            )
            logged, last_log = len(windows), now
    loss_sums = torch.cat(sums).tolist()
    seconds = time.perf_counter() - start
    samples = sum(n for _, n in windows)
    curve = [
        [epoch + s / steps, total / n] for total, (s, n) in zip(loss_sums, windows, strict=True)
    ]
    return EpochResult(sum(loss_sums) / samples, samples, seconds, curve)


@torch.no_grad()
def evaluate(ctx: Dist, model: nn.Module, data: Split) -> float:
    """Test accuracy, each rank scoring a strided slice. Takes the bare module, not the DDP
    wrapper: DDP's forward may sync buffers, which would hang on slices of unequal length."""
    images, labels = data[0][ctx.rank :: ctx.world_size], data[1][ctx.rank :: ctx.world_size]
    correct = torch.zeros(1, device=ctx.device)
    model.eval()
    for i in range(0, len(labels), EVAL_BATCH):
        predicted = model(images[i : i + EVAL_BATCH]).argmax(dim=1)
        correct += (predicted == labels[i : i + EVAL_BATCH]).sum()
    model.train()
    dist.all_reduce(correct)
    return correct.item() / len(data[1])


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Replace `path` so that a crash at any moment leaves the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # makes the rename itself durable
    finally:
        os.close(directory)


def run_facts(cfg: Config, ctx: Dist) -> dict[str, Any]:
    return {
        "model": cfg.model,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "seed": cfg.seed,
        "backend": ctx.backend,
        "world_size": ctx.world_size,
        "epochs": cfg.epochs,
    }


def save_checkpoint(cfg: Config, ctx: Dist, state: TrainState) -> None:
    saved = {
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "epoch": len(state.history),
        "history": state.history,
        "loss_curve": state.curve,
        "config": run_facts(cfg, ctx),
    }
    atomic_write(cfg.output_dir / CHECKPOINT, lambda f: torch.save(saved, f))


def write_metrics(cfg: Config, ctx: Dist, history: list[dict[str, float]]) -> None:
    metrics = {
        **run_facts(cfg, ctx),
        "epochs_completed": len(history),
        "final_loss": history[-1]["loss"],
        "test_accuracy": history[-1]["test_accuracy"],
        "samples_per_s": sum(h["samples"] for h in history) / sum(h["seconds"] for h in history),
        "history": history,
    }
    text = json.dumps(metrics, indent=2) + "\n"
    atomic_write(cfg.output_dir / METRICS, lambda f: f.write(text.encode()))


def plot_loss(cfg: Config, state: TrainState) -> None:
    # Only rank 0 plots, once at the end: no reason for every rank to import matplotlib.
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(7, 4), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    steps, losses = zip(*state.curve, strict=True)
    axes.plot(steps, losses, linewidth=1, alpha=0.6, label=f"every {REDUCE_EVERY} steps")
    epochs = [h["epoch"] for h in state.history]
    axes.plot(epochs, [h["loss"] for h in state.history], "o-", label="epoch mean")
    axes.set(xlabel="epoch", ylabel="training loss, all ranks (cross-entropy)")
    axes.set_title(f"{cfg.model}, batch {cfg.batch_size} per rank, lr {cfg.lr}")
    axes.legend()
    atomic_write(cfg.output_dir / LOSS_PLOT, lambda f: figure.savefig(f, format="png", dpi=100))


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    try:
        ctx = setup(cfg)
    except SetupError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    try:
        if cfg.download:
            download(cfg, ctx)
        train_data, test_data = load_split(cfg, ctx, train=True), load_split(cfg, ctx, train=False)
        log(
            ctx,
            f"start world_size={ctx.world_size} backend={ctx.backend} device={ctx.device} "
            f"threads_per_rank={torch.get_num_threads()} model={cfg.model} "
            f"train_samples={len(train_data[1])} test_samples={len(test_data[1])}",
        )
        state = build_state(cfg, ctx)
        for epoch in range(len(state.history), cfg.epochs):
            result = train_epoch(cfg, ctx, state, train_data, epoch)
            accuracy = evaluate(ctx, state.model, test_data)
            samples_per_s = result.samples / result.seconds
            state.history.append(
                {
                    "epoch": epoch + 1,
                    "loss": result.loss,
                    "test_accuracy": accuracy,
                    "samples_per_s": samples_per_s,
                    "samples": result.samples,
                    "seconds": result.seconds,
                }
            )
            state.curve += result.curve
            if ctx.rank == 0:
                save_checkpoint(cfg, ctx, state)
                write_metrics(cfg, ctx, state.history)
            log(
                ctx,
                f"epoch {epoch + 1}/{cfg.epochs} loss={result.loss:.4f} "
                f"test_accuracy={accuracy:.4f} samples_per_s={samples_per_s:.1f} "
                f"seconds={result.seconds:.2f}",
            )
        if ctx.rank == 0:
            plot_loss(cfg, state)
        log(ctx, f"done: {cfg.output_dir / METRICS}")
    except SetupError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    status = main()
    # Everything is written (atomically, and synced) and the process group is destroyed by now.
    # Skip the interpreter's teardown: in two-node gloo jobs on the sandbox, the C++ objects
    # that torch destroys there aborted the process now and then after a finished job
    # ("terminate called without an active exception", SIGABRT, no Python frame left), which
    # torchrun and the launcher rightly report as a failed job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
