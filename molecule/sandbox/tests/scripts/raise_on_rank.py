"""A training script that fails on one rank: the launcher must name that rank first.

    raise_on_rank.py RANK   (under torchrun)

Every rank joins the process group; rank RANK raises ValueError; the others wait in a
barrier for it and lose their connection when it exits.
"""

import os
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank, failing = int(os.environ["RANK"]), int(sys.argv[1])
print(f"rank {rank} of {dist.get_world_size()} ready", flush=True)
time.sleep(2)
if rank == failing:
    raise ValueError(f"boom on rank {rank}")
dist.barrier()
time.sleep(60)
