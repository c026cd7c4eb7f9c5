"""A job's processes on a node, read from /proc and its cgroup: torchrun's agent and its workers,
with each one's rank and environment. Reading only. Standard library only: it runs on the nodes'
system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.proc import job_processes


# On a node: the job's processes
@dataclass
class JobProcess:
    """A process of the job, as /proc shows it. `env` may hold secrets: never returned."""

    pid: int
    ppid: int
    argv: list[str]
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict, repr=False)

    def _number(self, name: str) -> int | None:
        value = self.env.get(name, "")
        return int(value) if value.isdigit() else None

    @property
    def rank(self) -> int | None:
        return self._number("RANK")

    @property
    def local_rank(self) -> int | None:
        return self._number("LOCAL_RANK")

    @property
    def world_size(self) -> int | None:
        return self._number("WORLD_SIZE")


# Where systemd's cgroup tree is: cgroup v2, then the hybrid and v1 layouts.
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")


def cgroup_pids(control_group: str, roots: Sequence[str] = CGROUP_ROOTS) -> list[int]:
    """Every process in the cgroup (systemctl's ControlGroup, like
    /system.slice/torch-job-x.service) and in the cgroups below it."""
    relative = control_group.strip("/")
    if not relative:
        return []
    for root in roots:
        top = os.path.join(root, relative)
        if not os.path.isfile(os.path.join(top, "cgroup.procs")):
            continue
        pids: set[int] = set()
        for folder, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(folder, "cgroup.procs")) as handle:
                        pids.update(int(pid) for pid in handle.read().split())
                except OSError:  # removed meanwhile
                    continue
        return sorted(pids)
    return []


def environment_pids(job_id: str) -> list[int]:
    """Every process whose environment carries TORCH_JOB_ID=job_id."""
    return sorted(int(line.split()[0]) for line in job_processes(job_id))


def read_process(pid: int) -> JobProcess | None:
    """The process's parent, argv, folder and environment; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            # The command name in parentheses may hold spaces: the fields follow its ')'.
            ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except (OSError, IndexError, ValueError):
        return None
    env = {}
    for entry in entries:
        key, sep, value = entry.decode(errors="replace").partition("=")
        if sep:
            env[key] = value
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    return JobProcess(pid=pid, ppid=ppid, argv=argv, cwd=cwd, env=env)


def workers_and_agent(
    processes: Sequence[JobProcess],
) -> tuple[list[JobProcess], JobProcess | None]:
    """The rank processes, in rank order, and torchrun's agent (their parent, which has no
    RANK). A rank's own children (DataLoader workers, compile workers) inherit its RANK:
    only the topmost process of each rank counts."""
    by_pid = {p.pid: p for p in processes}
    workers: dict[int, JobProcess] = {}
    for process in sorted(processes, key=lambda p: p.pid):
        rank = process.rank
        parent = by_pid.get(process.ppid)
        if rank is None or (parent is not None and parent.rank == rank):
            continue
        workers.setdefault(rank, process)
    parents = {w.ppid for w in workers.values()}
    agent = next((p for p in processes if p.pid in parents and p.rank is None), None)
    return [workers[rank] for rank in sorted(workers)], agent


def job_processes_of(control_group: str, job_id: str) -> list[JobProcess]:
    """The job's processes: its unit's cgroup, else those that carry its TORCH_JOB_ID."""
    pids = cgroup_pids(control_group) if control_group else []
    if not pids and job_id:
        pids = environment_pids(job_id)
    found = (read_process(pid) for pid in pids if pid != os.getpid())
    return [p for p in found if p is not None]
