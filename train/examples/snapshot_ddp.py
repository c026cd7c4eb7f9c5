"""A multi-node DDP script in the style of PyTorch's DDP tutorial series: what users bring.

    torchrun --nnodes=2 --node-rank=I --nproc-per-node=N --master-addr=H --master-port=P \\
        snapshot_ddp.py TOTAL_EPOCHS SAVE_EVERY [--batch_size 32] [--dataset_size 2048]

It reads LOCAL_RANK and RANK from torchrun, trains a small regression with a DataLoader over a
DistributedSampler, and follows the tutorial's own rule for its snapshot (model state and epochs
run): global rank 0 alone writes it to snapshot.pt in the current folder, and every rank of every
node loads it at start when it exists. It prints progress in its own format, from every rank.

So every node must see the file that rank 0 wrote. The launcher gives it that: its current
folder is the job's output folder, on the cluster's shared folder when there is one; without
one, the launcher brings every node's output folder up to date before every attempt.

    ansible-playbook playbooks/train.yml -e train_code_dir=$PWD/train/examples \\
        -e train_script=snapshot_ddp.py -e '{"train_script_args": ["20", "1"]}'
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class SyntheticRegression(Dataset):
    """Points of a fixed noisy linear function; the same on every rank (seeded)."""

    def __init__(self, size: int, features: int = 20, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(size, features, generator=generator)
        weights = torch.randn(features, 1, generator=generator)
        noise = 0.1 * torch.randn(size, 1, generator=generator)
        self.targets = self.inputs @ weights + noise

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]


def ddp_setup() -> torch.device:
    """Join the process group torchrun describes: NCCL on a GPU per rank, else gloo."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        init_process_group(backend="nccl")
        return device
    init_process_group(backend="gloo")
    return torch.device("cpu")


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        train_data: DataLoader,
        optimizer: torch.optim.Optimizer,
        save_every: int,
        snapshot_path: str,
        *,
        device: torch.device,
    ) -> None:
        self.global_rank = int(os.environ["RANK"])
        self.device = device
        self.model = model.to(device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            print("Loading snapshot")
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)

    def _load_snapshot(self, snapshot_path: str) -> None:
        snapshot = torch.load(snapshot_path, map_location=self.device, weights_only=True)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> float:
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch: int) -> None:
        batch_size = len(next(iter(self.train_data))[0])
        self.train_data.sampler.set_epoch(epoch)
        total = 0.0
        for source, targets in self.train_data:
            total += self._run_batch(source.to(self.device), targets.to(self.device))
        print(
            f"[GPU{self.global_rank}] Epoch {epoch} | Batchsize: {batch_size} | "
            f"Steps: {len(self.train_data)} | Loss: {total / len(self.train_data):.5f}"
        )

    def _save_snapshot(self, epoch: int) -> None:
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),
            "OPTIMIZER_STATE": self.optimizer.state_dict(),
            "EPOCHS_RUN": epoch,
        }
        torch.save(snapshot, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.global_rank == 0 and (epoch + 1) % self.save_every == 0:
                self._save_snapshot(epoch + 1)


def main(total_epochs: int, save_every: int, batch_size: int, dataset_size: int) -> None:
    device = ddp_setup()
    try:
        torch.manual_seed(0)
        dataset = SyntheticRegression(dataset_size)
        model = torch.nn.Linear(20, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        train_data = DataLoader(
            dataset,
            batch_size=batch_size,
            pin_memory=device.type == "cuda",
            shuffle=False,
            sampler=DistributedSampler(dataset),
        )
        Trainer(model, train_data, optimizer, save_every, "snapshot.pt", device=device).train(
            total_epochs
        )
    finally:
        destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument(
        "--batch_size", default=32, type=int, help="Input batch size on each device"
    )
    parser.add_argument("--dataset_size", default=2048, type=int, help="Samples in the dataset")
    args = parser.parse_args()
    main(args.total_epochs, args.save_every, args.batch_size, args.dataset_size)
