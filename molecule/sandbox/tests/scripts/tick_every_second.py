"""A training script that prints one line a second on rank 0, with the time it printed it
(seconds since the epoch), as a script with its own logging would, then "rank N done" on
every rank: for following a job's output on the controller and reading its log."""

import os
import sys
import time

import torch.distributed as dist


def main(ticks: int) -> None:
    dist.init_process_group("gloo")
    try:
        rank = int(os.environ["RANK"])
        if rank == 0:
            for tick in range(ticks):
                print(f"tick {tick} printed at {time.time():.3f}", flush=True)
                time.sleep(1)
        dist.barrier()
        print(f"rank {rank} done", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 12)
