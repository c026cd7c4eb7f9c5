"""GPU memory released before the next attempt: after a node's part of the job is stopped, the
launcher waits until no process of that attempt is left on any GPU (as NVIDIA's resiliency
launcher does), up to a limit (train_gpu_release_timeout); past it, the attempt's teardown names
the node and the job is not started again there. Nodes without nvidia-smi have nothing to wait
for. Standard library only: it runs on the nodes' system Python (3.9 on EL9).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.fence import (
    process_running,
)

# Every process on a GPU, with the memory it holds (MiB).
COMPUTE_APPS = [
    "nvidia-smi",
    "--query-compute-apps=pid,used_memory",
    "--format=csv,noheader,nounits",
]
POLL_S = 0.5


def parse_compute_apps(text: str) -> dict[int, int]:
    """pid -> MiB from COMPUTE_APPS' output (a process on several GPUs is summed)."""
    found: dict[int, int] = {}
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 2 or not fields[0].isdigit():
            continue
        memory = int(fields[1]) if fields[1].isdigit() else 0
        found[int(fields[0])] = found.get(int(fields[0]), 0) + memory
    return found


def still_held(
    apps: Mapping[int, int], job_pids: Iterable[int], alive: Callable[[int], bool]
) -> dict[int, int]:
    """What the GPUs still hold for the stopped attempt: its own processes, and processes that
    have ended but whose memory the driver has not released yet (another program's running
    processes are not the job's to wait for)."""
    pids = set(job_pids)
    return {pid: mib for pid, mib in apps.items() if pid in pids or not alive(pid)}


def wait_for_release(
    query: Callable[[], str | None],
    job_pids: Iterable[int],
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    alive: Callable[[int], bool] = process_running,
) -> tuple[dict[int, int], float]:
    """(what is still held when the wait ends, the seconds it took). `query` returns
    COMPUTE_APPS' output, or None when nvidia-smi cannot be asked (nothing to wait for)."""
    pids, begun = list(job_pids), clock()
    while True:
        text = query()
        held = still_held(parse_compute_apps(text), pids, alive) if text is not None else {}
        waited = clock() - begun
        if not held or waited >= timeout:
            return held, round(waited, 2)
        sleep(POLL_S)


def held_problem(node: str, held: Mapping[int, int], waited: float) -> str:
    """The teardown's problem for a node whose GPUs were not released in time."""
    pids = ", ".join(f"pid {pid} ({memory} MiB)" for pid, memory in sorted(held.items()))
    return (
        f"{node}: the GPU memory of the stopped attempt is still held {waited:.0f} s after the "
        f"stop (train_gpu_release_timeout) by {pids}: the next attempt cannot use that node"
    )
