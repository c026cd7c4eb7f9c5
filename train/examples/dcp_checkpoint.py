"""A sharded model checkpointed with torch.distributed.checkpoint (DCP), as its tutorial does it.

    torchrun --nnodes=2 --node-rank=I --nproc-per-node=N --master-addr=H --master-port=P \\
        dcp_checkpoint.py --data-dir DIR [--epochs 3] [--batch-size 64]

The model is sharded over every rank with FSDP2 (`fully_shard`): no rank holds all of it.
After every epoch `dcp.save` writes one folder, checkpoint/epoch_N/ in the current folder
(the newest two are kept): each rank writes its own shards (__<rank>_0.distcp) and rank 0,
last, the .metadata that names them all. At start, every rank loads the newest folder that
has its .metadata (a save cut short has none) with `dcp.load`, which reads from each file the
pieces of the rank's own shards, and training continues after that epoch. At the end, rank 0
turns the newest checkpoint into final.pt, one torch.save file (DCP's dcp_to_torch_save).

So every rank reads files that the others wrote: the nodes must share the current folder
(the launcher's shared folder does that).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
from torchvision.datasets import MNIST

CHECKPOINT_DIR = Path("checkpoint")
FINAL = Path("final.pt")
EPOCH_FOLDER = re.compile(r"epoch_(\d+)")
KEEP = 2  # the newest checkpoints kept: older ones only fill the disk


class AppState(Stateful):
    """What DCP saves and loads: the model's and the optimizer's sharded state, through
    get_state_dict and set_state_dict, which handle FSDP's sharding."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, object]:
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optim": optimizer_state}

    def load_state_dict(self, state_dict: dict[str, object]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optim"],
        )


def setup() -> torch.device:
    """Join the process group torchrun describes: NCCL on a GPU per rank, else gloo on the CPU."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=timedelta(minutes=10))
        return device
    dist.init_process_group("gloo", timeout=timedelta(minutes=10))
    return torch.device("cpu")


def mnist_loader(data_dir: str, batch_size: int) -> DataLoader:
    split = MNIST(data_dir, train=True)
    images = split.data.float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)
    dataset = TensorDataset(images, split.targets)
    return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset))


def sharded_model(device: torch.device) -> nn.Module:
    torch.manual_seed(0)  # the same initial weights everywhere, before they are sharded
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    model = model.to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    return fully_shard(model)


def checkpoints() -> list[tuple[int, Path]]:
    """The complete checkpoints with the epochs each holds, oldest first: DCP's rank 0 writes
    .metadata last."""
    found = [
        (int(match.group(1)), path)
        for path in (CHECKPOINT_DIR.iterdir() if CHECKPOINT_DIR.is_dir() else [])
        if (match := EPOCH_FOLDER.fullmatch(path.name)) and (path / ".metadata").is_file()
    ]
    return sorted(found)


def main() -> None:
    parser = argparse.ArgumentParser(description="FSDP2 on MNIST, checkpointed with DCP")
    parser.add_argument("--data-dir", default="data", help="MNIST root: DIR/MNIST/raw/*-ubyte")
    parser.add_argument("--epochs", type=int, default=3, help="total epochs, resumed ones too")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    device = setup()
    rank = dist.get_rank()
    try:
        loader = mnist_loader(args.data_dir, args.batch_size)
        model = sharded_model(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        state = {"app": AppState(model, optimizer)}

        start = 0
        saved = checkpoints()
        if saved:
            start, path = saved[-1]
            dcp.load(state, checkpoint_id=path)
            print(f"rank {rank}: resumed from {path} at epoch {start}")

        for epoch in range(start, args.epochs):
            loader.sampler.set_epoch(epoch)
            total = torch.zeros((), device=device)
            for images, labels in loader:
                loss = nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.detach()
            dist.all_reduce(total)
            folder = CHECKPOINT_DIR / f"epoch_{epoch + 1}"
            dcp.save(state, checkpoint_id=folder)
            if rank == 0:
                for _, old in checkpoints()[:-KEEP]:
                    shutil.rmtree(old)
                mean = total.item() / (len(loader) * dist.get_world_size())
                print(f"[epoch {epoch + 1}/{args.epochs}] loss={mean:.4f} saved={folder}")
        if rank == 0:
            # The newest checkpoint as one torch.save file, for a single process to load.
            newest_folder = CHECKPOINT_DIR / f"epoch_{max(start, args.epochs)}"
            dcp_to_torch_save(newest_folder, FINAL)
            print(f"saved {FINAL} from {newest_folder}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # FSDP's device mesh keeps the gloo process group alive after destroy_process_group. Left
    # to the interpreter's shutdown after a dcp.save, freeing it aborts the process ("terminate
    # called without an active exception" in gloo's threads, torch 2.14): free it now.
    gc.collect()
