"""Per-epoch shards are DistributedSampler's, so every rank runs the same number of steps."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DistributedSampler
from train_ddp import epoch_shard

LAYOUTS = [(1500, 2), (1500, 3), (11, 4), (7, 1)]


@pytest.mark.parametrize(("n", "world_size"), LAYOUTS)
def test_epoch_shard_matches_distributed_sampler(n: int, world_size: int) -> None:
    for epoch in (0, 1, 7):
        for rank in range(world_size):
            sampler = DistributedSampler(range(n), world_size, rank, shuffle=True, seed=3)
            sampler.set_epoch(epoch)
            assert epoch_shard(n, epoch, 3, rank, world_size).tolist() == list(sampler)


@pytest.mark.parametrize(("n", "world_size"), LAYOUTS)
def test_epoch_shards_are_equal_and_cover_every_sample(n: int, world_size: int) -> None:
    shards = [epoch_shard(n, 0, 3, rank, world_size) for rank in range(world_size)]
    assert len({len(shard) for shard in shards}) == 1
    assert set(torch.cat(shards).tolist()) == set(range(n))


def test_each_epoch_reshuffles() -> None:
    assert epoch_shard(1500, 0, 3, 0, 2).tolist() != epoch_shard(1500, 1, 3, 0, 2).tolist()
