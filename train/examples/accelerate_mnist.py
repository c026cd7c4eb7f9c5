"""MNIST with Hugging Face accelerate, written the way accelerate's own examples write it.

    torchrun --nnodes=2 --node-rank=I --nproc-per-node=N --master-addr=H --master-port=P \\
        accelerate_mnist.py --data-dir DIR [--epochs 3] [--batch-size 64] [--lr 1e-3]

The Accelerator reads torchrun's variables and joins the process group (NCCL on GPUs, gloo on
the CPU of a node without them); `prepare` wraps the model for DDP and shards the DataLoader
over the ranks. After every epoch `accelerator.save_state` writes the model, the optimizer and
each process's RNG state into checkpoints/epoch_N/ in the current folder (the newest two are
kept): the main process the weights, every process its own RNG state. At start, every process
loads the newest complete one when there is one and continues after it, so a rerun in the same
folder, or a restart after a crash, goes on where the last saved epoch left off. At the end,
the main process writes the trained weights alone to model/model.safetensors.

Every process reads and writes the same checkpoints/ folder, as with `accelerate launch` on a
cluster: the nodes must share the current folder (the launcher's shared folder does that).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchvision.datasets import MNIST

CHECKPOINTS = Path("checkpoints")
EPOCH_FOLDER = re.compile(r"epoch_(\d+)")
KEEP = 2  # the newest checkpoints kept: older ones only fill the disk


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="MNIST with accelerate, resumable")
    parser.add_argument("--data-dir", default="data", help="MNIST root: DIR/MNIST/raw/*-ubyte")
    parser.add_argument("--epochs", type=int, default=3, help="total epochs, resumed ones too")
    parser.add_argument("--batch-size", type=int, default=64, help="per process")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def mnist(data_dir: str, train: bool) -> TensorDataset:
    """The split as normalised image tensors and labels (the raw files, read by torchvision)."""
    split = MNIST(data_dir, train=train)
    images = split.data.float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)
    return TensorDataset(images, split.targets)


def checkpoints() -> list[tuple[int, Path]]:
    """The complete checkpoint folders with the epochs each holds, oldest first (a folder is
    renamed to epoch_N only once every process has saved into it)."""
    found = [
        (int(match.group(1)), path)
        for path in (CHECKPOINTS.iterdir() if CHECKPOINTS.is_dir() else [])
        if (match := EPOCH_FOLDER.fullmatch(path.name))
    ]
    return sorted(found)


def save_checkpoint(accelerator: Accelerator, epochs: int) -> None:
    """save_state into a folder of its own, renamed into place once every process has written
    its part: a crash while saving leaves the previous checkpoint the newest. The main process
    then removes all but the newest KEEP."""
    partial = CHECKPOINTS / f"partial_epoch_{epochs}"
    accelerator.save_state(str(partial))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        os.replace(partial, CHECKPOINTS / f"epoch_{epochs}")
        for _, old in checkpoints()[:-KEEP]:
            shutil.rmtree(old)
        print(f"saved {CHECKPOINTS}/epoch_{epochs}")
    accelerator.wait_for_everyone()


def evaluate(accelerator: Accelerator, model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            predicted, expected = accelerator.gather_for_metrics((model(images).argmax(1), labels))
            correct += (predicted == expected).sum().item()
            total += len(expected)
    model.train()
    return correct / total


def main() -> None:
    args = parse_args()
    # Under torchrun, accelerate joins the process group only for an accelerator, unless told
    # to use the CPU (what `accelerate launch --cpu` tells it): gloo on a node without GPUs.
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    try:
        set_seed(args.seed)
        train_loader = DataLoader(mnist(args.data_dir, True), args.batch_size, shuffle=True)
        test_loader = DataLoader(mnist(args.data_dir, False), batch_size=256)
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        model, optimizer, train_loader, test_loader = accelerator.prepare(
            model, optimizer, train_loader, test_loader
        )

        start = 0
        saved = checkpoints()
        if saved:
            start, path = saved[-1]
            accelerator.load_state(str(path))
            print(f"process {accelerator.process_index}: resumed from {path} at epoch {start}")
        accelerator.print(
            f"{accelerator.num_processes} processes ({accelerator.distributed_type}): "
            + (f"epochs {start + 1} to {args.epochs}" if start < args.epochs else "nothing left")
        )

        for epoch in range(start, args.epochs):
            train_loader.set_epoch(epoch)
            total_loss = torch.zeros((), device=accelerator.device)
            for images, labels in train_loader:
                loss = nn.functional.cross_entropy(model(images), labels)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                total_loss += loss.detach()
            mean_loss = accelerator.reduce(total_loss, "mean").item() / len(train_loader)
            accuracy = evaluate(accelerator, model, test_loader)
            accelerator.print(f"Epoch {epoch + 1}: loss {mean_loss:.4f}, accuracy {accuracy:.4f}")
            save_checkpoint(accelerator, epoch + 1)
        accelerator.save_model(model, "model")  # the weights alone, for inference
        accelerator.print("saved model/model.safetensors")
    finally:
        accelerator.end_training()


if __name__ == "__main__":
    main()
