"""A user's script, written the tutorial's way, that also reports what its unit lets it do.

    confined_snapshot.py EPOCHS OTHER_JOB_FOLDER...   (under torchrun, gloo)

Every rank prints who it runs as (`id -u`, `id -un`) and tries to write where a script
should not (/etc, /usr, other jobs' folders, the user's ~/.ssh) and where it should (the
current folder, which is the job's output folder, /tmp, the user's home, /dev/shm), one
"probe PATH: written" or "probe PATH: refused (ERRNO)" line each. Then it trains a tiny model
with DDP: global rank 0 alone saves snapshot.pt in the current folder after each epoch,
every rank loads it at the start ("Resuming training from snapshot at Epoch N"). On its first
run (no crashed.marker yet) rank 1 crashes after epoch 2's snapshot, so that the launcher
restarts the job from it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

SNAPSHOT = Path("snapshot.pt")
MARKER = Path("crashed.marker")


def probe(path: Path) -> str:
    try:
        path.write_text("probe\n")
        path.unlink()
        return "written"
    except OSError as err:
        return f"refused ({errno.errorcode.get(err.errno, err.errno)})"


def main() -> None:
    epochs, other_jobs = int(sys.argv[1]), [Path(folder) for folder in sys.argv[2:]]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    uid = subprocess.run(["id", "-u"], capture_output=True, text=True, check=True).stdout.strip()
    name = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout
    print(f"rank {rank}: id -u {uid} ({name.strip()})", flush=True)
    home = Path.home()
    tag = f"probe-{os.environ['TORCH_JOB_ID']}-{rank}"
    for path in (
        Path("/etc") / tag,
        Path("/usr") / tag,
        *(folder / tag for folder in other_jobs),
        home / ".ssh" / tag,
        Path.cwd() / tag,
        Path("/tmp") / tag,
        home / tag,
        Path("/dev/shm") / tag,
    ):
        print(f"rank {rank}: probe {path.parent}: {probe(path)}", flush=True)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    first = 0
    if SNAPSHOT.exists():
        snapshot = torch.load(SNAPSHOT, weights_only=True)
        model.module.load_state_dict(snapshot["MODEL_STATE"])
        first = snapshot["EPOCHS_RUN"]
        print(f"rank {rank}: Resuming training from snapshot at Epoch {first}", flush=True)
    for epoch in range(first, epochs):
        for _ in range(5):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            optimizer.step()
        if rank == 0:
            torch.save(
                {"MODEL_STATE": model.module.state_dict(), "EPOCHS_RUN": epoch + 1}, SNAPSHOT
            )
            print(f"epoch {epoch} done, snapshot saved", flush=True)
        dist.barrier()
        if epoch == 2 and rank == 1 and not MARKER.exists():
            MARKER.write_text("crashed once\n")
            raise RuntimeError("rank 1 crashes once after epoch 2")
        time.sleep(0.5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
