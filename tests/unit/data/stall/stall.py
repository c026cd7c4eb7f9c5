"""A job that stalls: the last rank sleeps before an all_reduce that the others wait in."""

import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    sleep_s = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of {world} pid {os.getpid()} ready", flush=True)
    if rank == world - 1:
        time.sleep(sleep_s)
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"rank {rank}: {total.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
