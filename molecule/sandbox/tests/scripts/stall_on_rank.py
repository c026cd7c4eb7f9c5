"""A step loop in which one rank stops short of an all_reduce, once, while the others wait in it.

    stall_on_rank.py RANK STEPS   (under torchrun)

Every step all-reduces a tensor and prints "step N sum=S" (rank 0's lines are the job's
output). At step 3 of the first run, rank RANK leaves a file stalled-once in the current folder
(the job's output folder) and sleeps instead of joining the all_reduce, as a rank stuck in I/O
would. A later run finds the file and goes through.
"""

import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, stalling, steps = int(os.environ["RANK"]), int(sys.argv[1]), int(sys.argv[2])
    first_run = not os.path.exists("stalled-once")
    dist.barrier()  # every rank has looked for the file before one writes it
    try:
        for step in range(1, steps + 1):
            if step == 3 and first_run and rank == stalling:
                with open("stalled-once", "w") as marker:
                    marker.write(f"rank {rank}\n")
                time.sleep(3600)
            value = torch.ones(1)
            dist.all_reduce(value)
            print(f"step {step} sum={value.item():.0f}", flush=True)
            time.sleep(0.5)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
