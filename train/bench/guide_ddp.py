#!/usr/bin/env python3
"""The how-to guide's DDP MNIST pipeline, kept as the benchmark's baseline.

    torchrun --nproc-per-node=2 train/bench/guide_ddp.py --data-dir DIR [--epochs 1]

Faithful where speed is decided: per-sample ToTensor, DataLoader(num_workers=2)
over a DistributedSampler, nn.Linear(784, 10) on x.view(-1, 784),
CrossEntropyLoss, SGD(lr=0.01), batch 64, and rank 0 printing its own loss.
Changed only so that it can run here and be measured: rank and world size from
torchrun's environment, gloo on the CPU, the staged files read with
download=False, the training loop timed, and rank 0 scoring the test split.
Its last line: `guide samples_per_s=<float> test_accuracy=<float> seconds=<float>`.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dataset = datasets.MNIST(args.data_dir, train=True, transform=transforms.ToTensor())
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=2)
    model = DistributedDataParallel(nn.Linear(784, 10))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    samples, seconds = 0, 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        start = time.perf_counter()
        for images, labels in loader:
            optimizer.zero_grad()
            loss = criterion(model(images.view(-1, 784)), labels)
            loss.backward()
            optimizer.step()
            samples += len(labels)
        seconds += time.perf_counter() - start
        if rank == 0:
            print(f"Epoch {epoch}, Loss: {loss.item()}", flush=True)

    # Global throughput: every rank's samples over the slowest rank's time.
    total = torch.tensor([samples], dtype=torch.float64)
    slowest = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(total)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        test = datasets.MNIST(args.data_dir, train=False, transform=transforms.ToTensor())
        correct = 0
        with torch.no_grad():
            for images, labels in DataLoader(test, batch_size=1000):
                correct += (model.module(images.view(-1, 784)).argmax(1) == labels).sum().item()
        print(
            f"guide samples_per_s={total.item() / slowest.item():.1f} "
            f"test_accuracy={correct / len(test):.4f} seconds={slowest.item():.2f}",
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
