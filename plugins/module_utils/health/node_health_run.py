"""The node-local health check's I/O: read the node, then drain it in Slurm or take it back.

Installed on every Slurm node by the slurm role (plugins/modules/slurm_health_program.py) with the
files it imports, and run by slurmd as root: as HealthCheckProgram every slurm_health_interval
seconds, and as the prolog before each job (`--prolog`: a problem also fails the prolog, so the
job does not start there). `--once` only prints what it finds. node_health.py decides. Standard
library only: it runs on the nodes' system Python (3.9 on EL9).

Hardware XIDs stay found once seen, in the state folder under /run (emptied at a reboot, which
resets the GPUs): a GPU that logged one needs a person, not the next quiet minute. `--clear`
forgets them once the GPU has been looked at.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.gpu_faults import (
    APPLICATION_XIDS,
    SMI_QUERY,
    Xid,
    parse_xids,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.node_health import (
    Readings,
    decide,
    node_problems,
    parse_sinfo,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.mounts import (
    parse_mountinfo,
)

CONFIG = "/etc/torch-cluster/health.json"
# How long one outside command may take (nvidia-smi on a sick GPU can hang for minutes).
COMMAND_TIMEOUT_S = 10
# How long the shared folder's mount point may take to answer (a hung NFS server blocks stat).
MOUNT_TIMEOUT_S = 5
# The first run looks this far back in the kernel log for XIDs.
FIRST_LOOK_BACK_S = 600
_LIMIT_ROWS = {"Max locked memory": "memlock", "Max open files": "nofile"}


def _run(argv: Sequence[str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S} s"
    except OSError as error:
        return 127, "", str(error)
    return done.returncode, done.stdout, done.stderr


def slurmd_limits_path(pid_file: str) -> str:
    """Where slurmd's limits are read, which its jobs inherit: its own process's, by its PID
    file; else this process's (slurmd's child when slurmd runs the check)."""
    try:
        with open(pid_file) as handle:
            pid = handle.read().strip()
    except OSError:
        pid = ""
    return (
        f"/proc/{pid}/limits"
        if pid.isdigit() and os.path.exists(f"/proc/{pid}")
        else ("/proc/self/limits")
    )


def own_limits(path: str = "/proc/self/limits") -> dict[str, str]:
    """The soft memlock and nofile limits of a process (slurmd's: its jobs' limits)."""
    found = {}
    try:
        with open(path) as handle:
            for line in handle:
                for row, name in _LIMIT_ROWS.items():
                    if line.startswith(row):
                        value = line[len(row) :].split()[0]
                        found[name] = "infinity" if value == "unlimited" else value
    except OSError:
        pass
    return found


def mounted(path: str, mountinfo: str = "/proc/self/mountinfo") -> tuple[bool | None, str]:
    """Whether something is mounted at path (the mount table: a bind mount on the folder's
    own file system counts, as on the server of a served folder), and whether it answers: its
    stat is asked in a thread, so that a hung server cannot block the check."""
    try:
        with open(mountinfo) as handle:
            points = {mount["mount_point"] for mount in parse_mountinfo(handle.read())}
    except OSError as error:
        return None, f"the mount table could not be read: {error}"
    if os.path.normpath(path) not in points:
        return False, ""
    answer: list[str] = []

    def ask() -> None:
        try:
            os.stat(path)
            answer.append("")
        except OSError as error:  # a dead FUSE mount: "Transport endpoint is not connected"
            answer.append(error.strerror or str(error))

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    asker.join(MOUNT_TIMEOUT_S)
    if not answer:
        return None, f"it did not answer within {MOUNT_TIMEOUT_S} s"
    return (None, answer[0]) if answer[0] else (True, "")


def _load_state(path: str) -> dict:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _save_state(path: str, state: dict) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    with open(f"{path}.partial", "w") as handle:
        json.dump(state, handle)
    os.replace(f"{path}.partial", path)


def hardware_xids(state_file: str, now: float, read_log: bool) -> list[Xid]:
    """The hardware XIDs seen since the state folder was made (this boot): those kept, and the
    new ones in the kernel log since the last run."""
    state = _load_state(state_file)
    kept = [Xid(*row) for row in state.get("xids", [])]
    journalctl = shutil.which("journalctl")
    if read_log and journalctl:
        since = float(state.get("since") or now - FIRST_LOOK_BACK_S)
        status, out, _ = _run(
            [journalctl, "-k", "--no-pager", "-q", "-o", "cat", f"--since=@{int(since)}"]
        )
        if status == 0:
            for xid in parse_xids(out):
                if xid.code not in APPLICATION_XIDS and xid not in kept:
                    kept.append(xid)
            state["since"] = now
    state["xids"] = [[xid.device, xid.code, xid.text] for xid in kept]
    _save_state(state_file, state)
    return kept


def read_node(config: dict, now: float) -> Readings:
    gpu_dir = config.get("gpu_dir", "/proc/driver/nvidia/gpus")
    gpus_now = (
        len([entry for entry in os.scandir(gpu_dir) if entry.is_dir()])
        if os.path.isdir(gpu_dir)
        else 0
    )
    smi_path = shutil.which("nvidia-smi")
    smi = None
    if smi_path:
        smi = _run([smi_path, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"])
    gpus = int(config.get("gpus", 0))
    xids = hardware_xids(config["state_file"], now, read_log=bool(smi_path or gpus))
    shared = config.get("shared_dir", "")
    shared_mounted, shared_error = mounted(shared) if shared else (None, "")
    return Readings(
        gpus_expected=gpus,
        gpus_now=gpus_now,
        smi=smi,
        xids=xids,
        shared_dir=shared,
        shared_mounted=shared_mounted,
        shared_error=shared_error,
        limits=own_limits(slurmd_limits_path(config.get("slurmd_pid_file", ""))),
        min_limits=config.get("min_limits", {}),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--prolog", action="store_true", help="fail when the node has a problem")
    parser.add_argument("--once", action="store_true", help="print what is found, change nothing")
    parser.add_argument("--clear", action="store_true", help="forget the hardware XIDs seen")
    args = parser.parse_args(argv)
    with open(args.config) as handle:
        config = json.load(handle)
    node = config["node"]
    if args.clear and os.path.exists(config["state_file"]):
        state = _load_state(config["state_file"])
        state["xids"] = []
        _save_state(config["state_file"], state)
    problems = node_problems(read_node(config, time.time()))
    if args.once:
        print(f"{node}: " + ("; ".join(problems) if problems else "healthy"))
        return 1 if problems else 0
    status, out, err = _run(
        ["sinfo", "--noheader", f"--nodes={node}", "--format=%T|%E"]
        if shutil.which("sinfo")
        else ["false"]
    )
    action, detail = decide(problems, parse_sinfo(out) if status == 0 else None)
    if action == "drain":
        status, _, err = _run(
            ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={detail}"]
        )
    elif action == "resume":
        status, _, err = _run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    if action and status != 0:
        print(f"{node}: scontrol could not {action} the node: {err.strip()}", file=sys.stderr)
    print(f"{node}: {action or 'unchanged'}: {detail}")
    return 1 if args.prolog and problems else 0
