"""Self-fencing: a node whose job nobody watches any more stops that job by itself.

Each poll of the watch touches the node's heartbeat file (/run/torch-cluster/<unit>.heard): the
master's polls touch every worker's, the controller's watch rounds touch the master's. Beside
the job's unit, torch_job_unit starts a fence unit (fence-<unit>, bound to the job's unit) that
runs this file with the node's system Python. When the heartbeat is older than the fence
timeout (train_fence_timeout) while torchrun runs, the fence writes why into the job's log,
kills every process of the job's unit and stops it: a node cut off from its watcher (a pulled
link, a partition, a lost controller) keeps no ranks running that could write into the folder
that the next attempt uses.

The controller's side of the same rule (fence_until): the next attempt starts only once every
lost node's fence timeout has passed since it was last heard from, plus the fence's own poll
and kill (FENCE_MARGIN_S).

Through Slurm (train_launcher=slurm) there is no unit: each node's part of the batch script
starts torchrun in the background and this file beside it with torchrun's PID and the Slurm
job's id. The fence kills torchrun's process tree instead of the unit, then asks Slurm to
cancel the job, again until Slurm's controller answers: when the watch lost the master, nobody
else cancels it, and srun, which lost its tasks' exit messages, would hold the nodes for ever.

This file runs on its own (`python3 fence.py UNIT HEARTBEAT TIMEOUT LOG NODE [PID [SLURM_JOB]]`):
standard library only, no imports of the collection.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

# The node-local folder of heartbeats and the fence's own copy of this file.
HEARTBEAT_DIR = "/run/torch-cluster"
FENCE_FILE = "fence.py"
# The fence looks at the heartbeat this often.
FENCE_POLL_S = 0.5
# After the fence timeout: the fence's look (every FENCE_POLL_S), its SIGKILL, and the
# processes' end (SIGKILL cannot be caught: no checkpoint is written after it).
FENCE_MARGIN_S = 1.0


def heartbeat_path(unit: str) -> str:
    return f"{HEARTBEAT_DIR}/{unit}.heard"


def fence_unit(unit: str) -> str:
    # Not torch-job-*: the job list (torch_job_list) takes every such unit for a job.
    return f"fence-{unit}"


def touch_then(heartbeat: str, argv: Sequence[str]) -> list[str]:
    """argv, run after touching the heartbeat file (if it exists: a node whose job has no fence
    gets no file)."""
    return ["sh", "-c", 'touch -c -- "$0" 2>/dev/null; exec "$@"', heartbeat, *argv]


def fence_unit_argv(python: str, unit: str, timeout: float, log: str, node: str) -> list[str]:
    """The systemd-run command of the fence unit beside the job's unit: bound to it (stopping
    the job stops the fence), collected once it ends."""
    return [
        "systemd-run", f"--unit={fence_unit(unit)}", "--collect", "--quiet",
        f"--description=fence of {unit} (train_fence_timeout={timeout:g})",
        f"--property=BindsTo={unit}.service", f"--property=After={unit}.service",
        "--", *fence_argv(python, unit, timeout, log, node),
    ]  # fmt: skip


def fence_argv(python: str, unit: str, timeout: float, log: str, node: str) -> list[str]:
    """The fence's own command; through Slurm, the batch script adds torchrun's PID and the
    Slurm job's id."""
    return [
        python, f"{HEARTBEAT_DIR}/{FENCE_FILE}", unit, heartbeat_path(unit), f"{timeout:g}", log,
        node,
    ]  # fmt: skip


class KeptHeard:
    """While a task of the launcher works on a node with the job's processes still running
    (the stall's stacks), its heartbeat is touched every second: the fence waits for it."""

    def __init__(self, unit: str) -> None:
        self.path = heartbeat_path(unit) if unit else ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True)

    def _keep(self) -> None:
        while not self._done.is_set():
            if os.path.exists(self.path):
                with contextlib.suppress(OSError):
                    os.utime(self.path)
            self._done.wait(1.0)

    def __enter__(self) -> KeptHeard:
        if self.path:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()


def fence_due(silent_for: float, timeout: float) -> bool:
    return timeout > 0 and silent_for >= timeout


def fence_line(node: str, silent_for: float, timeout: float) -> str:
    return (
        f"=== torch-cluster: node {node} fenced itself: its watcher (the master's polls, or the "
        f"controller's rounds on the master) had not reached it for {silent_for:.1f} s "
        f"(train_fence_timeout={timeout:g}); every process of the job on this node was killed "
        f"at {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ==="
    )


def fence_until(
    heard: Mapping[str, float], lost: Sequence[str], timeout: float, margin: float = FENCE_MARGIN_S
) -> float:
    """When (seconds since the epoch, the controller's clock) every lost node has fenced itself:
    the newest of their last answers plus the timeout and the margin. 0.0 when there is nothing
    to wait for (no lost node, or no fence)."""
    if timeout <= 0:
        return 0.0
    times = [heard[name] for name in lost if name in heard]
    return max(times) + timeout + margin if times else 0.0


def _main_pid(unit: str) -> int:
    done = subprocess.run(
        ["systemctl", "show", unit, "--property=MainPID", "--value"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return int(done.stdout.strip() or 0)
    except ValueError:
        return 0


def process_running(pid: int) -> bool:
    """The process exists and has not ended (a zombie, waiting for its parent, has)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _heard(heartbeat: str, started: float) -> float:
    try:
        return max(started, os.stat(heartbeat).st_mtime)
    except OSError:
        return started


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc (processes that end meanwhile are left out)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return parents


def descendants(pid: int, parents: Mapping[int, int]) -> list[int]:
    """pid and every process below it, parents before their children."""
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    tree, queue = [], [pid]
    while queue:
        current = queue.pop(0)
        tree.append(current)
        queue.extend(sorted(children.get(current, [])))
    return tree


def kill_tree(pid: int) -> None:
    """SIGKILL to pid and its descendants, again until none is left (a worker may be forking
    while the first round kills); a process that is already gone is skipped."""
    for _ in range(10):
        alive = [each for each in descendants(pid, _parents()) if process_running(each)]
        if not alive:
            return
        for each in alive:
            with contextlib.suppress(OSError):
                os.kill(each, 9)
        time.sleep(0.05)


def _write(log: str, line: str) -> None:
    try:
        with open(log, "a", encoding="utf-8") as out:
            out.write(line + "\n")
    except OSError:
        pass


# After a fence through Slurm: scancel again this often, for at most this long, until Slurm's
# controller answers; an answer that the job has ended already also ends the tries.
SCANCEL_RETRY_S = 2.0
SCANCEL_FOR_S = 3600.0
SCANCEL_ENDED = ("already completing or completed", "Invalid job id")


def cancel_slurm_job(
    job: str, until: float, run=subprocess.run, sleep=time.sleep, clock=time.time
) -> str:
    """scancel the job until Slurm's controller takes it (or says it has ended), or until
    `until`; what happened, for the log."""
    while True:
        try:
            done = run(["scancel", job], capture_output=True, text=True, check=False)
        except OSError as err:
            return f"scancel could not run ({err})"
        if done.returncode == 0:
            return f"Slurm cancelled job {job}"
        if any(marker in done.stderr for marker in SCANCEL_ENDED):
            return f"Slurm job {job} had ended already"
        if clock() >= until:
            return f"Slurm's controller did not take the cancel of job {job}: {done.stderr.strip()}"
        sleep(SCANCEL_RETRY_S)


def _fence(unit: str, log: str, line: str) -> None:
    _write(log, line)
    subprocess.run(["systemctl", "kill", "--signal=SIGKILL", unit], check=False)
    subprocess.run(["systemctl", "stop", "--no-block", unit], check=False)


def run(argv: Sequence[str]) -> int:
    """Watch the unit's main process (or, given a PID, that process), and fence once the
    heartbeat is older than the timeout while it runs."""
    unit, heartbeat, timeout, log, node = argv[0], argv[1], float(argv[2]), argv[3], argv[4]
    watched = int(argv[5]) if len(argv) > 5 else 0
    slurm_job = argv[6] if len(argv) > 6 else ""
    started = time.time()
    pid = watched or _main_pid(unit)
    while pid and process_running(pid):
        silent = time.time() - _heard(heartbeat, started)
        if fence_due(silent, timeout):
            line = fence_line(node, silent, timeout)
            if not watched:
                _fence(unit, log, line)
                return 0
            _write(log, line)
            kill_tree(watched)
            if slurm_job:
                said = cancel_slurm_job(slurm_job, time.time() + SCANCEL_FOR_S)
                _write(log, f"=== torch-cluster: node {node}, after its fence: {said} ===")
            return 0
        time.sleep(FENCE_POLL_S)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
