"""What a node gives a job's unit, asked of the node itself: the limits a transient unit really
gets (systemd may give less than it is asked, without a word), and the NVIDIA device nodes a
confined job cannot make for itself. Standard library only: it runs on the nodes' system Python
(3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.node_paths import GPU_DIR
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_properties import (
    PROC_LIMITS,
    limit_properties,
    parse_limits,
)


def gpu_device_nodes_command(
    gpu_dir: str = GPU_DIR,
    uvm: str = "/dev/nvidia-uvm",
    modprobe: str | None = None,
) -> list[str]:
    """The command that makes the NVIDIA device nodes a CUDA process needs, where they are
    missing on a node with GPUs; [] where nothing is to do. CUDA makes them itself through the
    setuid nvidia-modprobe, which a job unit without privileges (NoNewPrivileges, an
    unprivileged user) cannot use: the launcher runs it as root before the start."""
    if not os.path.isdir(gpu_dir) or not os.listdir(gpu_dir) or os.path.exists(uvm):
        return []
    modprobe = modprobe if modprobe is not None else shutil.which("nvidia-modprobe")
    # -u: the unified memory module and its nodes; -c=0: /dev/nvidiactl and /dev/nvidia0.
    return [modprobe, "-u", "-c=0"] if modprobe else []


def unit_limits(memlock: str, nofile: int, timeout: float = 60) -> dict:
    """The limits a unit that asks for these gets: a transient unit reads its own
    /proc/self/limits. Where systemd may not raise its own hard limit (no CAP_SYS_RESOURCE, as
    in a container) it gives the unit that limit instead, without a word: only reading tells.
    {"asked": {...}, "memlock": ..., "nofile": ..., "error": ""}"""
    asked = {"memlock": memlock, "nofile": nofile}
    argv = [
        "systemd-run", "--wait", "--pipe", "--quiet", "--collect",
        *(f"--property={p}" for p in limit_properties(memlock, nofile)),
        "--", "cat", "/proc/self/limits",
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"asked": asked, "error": f"systemd-run: {error}"}
    found = parse_limits(done.stdout)
    if done.returncode != 0 or set(found) != set(PROC_LIMITS.values()):
        why = " ".join((done.stderr or done.stdout).split())[-300:]
        return {"asked": asked, "error": f"systemd-run: {why or f'exit status {done.returncode}'}"}
    return {"asked": asked, **found, "error": ""}
