"""A training script that writes what it was given to env-rank<RANK>.json in its current
folder: the environment a launched script gets, for the tests to read."""

import json
import os
import shutil
import sys

import torch.distributed as dist

NAMES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCH_JOB_ID", "TORCH_JOB_OUTPUT_DIR", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
    "MY_SETTING", "PATH",
)  # fmt: skip

dist.init_process_group("gloo")
seen = {name: os.environ.get(name) for name in NAMES}
seen |= {"cwd": os.getcwd(), "python": sys.executable, "python_on_path": shutil.which("python")}
with open(f"env-rank{os.environ['RANK']}.json", "w") as handle:
    json.dump(seen, handle, indent=2)
print(f"wrote env-rank{os.environ['RANK']}.json", flush=True)
dist.barrier()
dist.destroy_process_group()
