"""The properties of a job's systemd unit: the resource limits it asks for (NCCL over RDMA pins
memory against RLIMIT_MEMLOCK, and limits.conf never reaches a unit) and the confinement of a
job that runs as the training user; and /proc/<pid>/limits read back. Standard library only: it
runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

# NCCL over InfiniBand (RoCE and EFA alike) registers its buffers with ibv_reg_mr, which pins
# memory against RLIMIT_MEMLOCK: under a small limit the job fails at its first collective.
# limits.conf is applied by PAM at login and never reaches a systemd unit, so every job unit
# asks for its limits itself (torch_job_unit's defaults), and check.yml's probe asks for the
# same ones to learn what a job gets.
LIMIT_MEMLOCK = "infinity"


LIMIT_NOFILE = 1048576


UNLIMITED = "unlimited"


# /proc/<pid>/limits's names of the limits the launcher sets.
PROC_LIMITS = {"Max locked memory": "memlock", "Max open files": "nofile"}


_PROC_LIMIT_LINE = re.compile(r"^(Max [a-z ]+?)\s{2,}(\d+|unlimited)\s+(\d+|unlimited)")


def limit_properties(memlock: str, nofile: int) -> list[str]:
    """The unit properties that ask for the limits; an empty memlock or a nofile of 0 asks for
    nothing (the service manager's default)."""
    return [
        *([f"LimitMEMLOCK={memlock}"] if memlock else []),
        *([f"LimitNOFILE={nofile}"] if nofile else []),
    ]


# The folders that systemd's ProtectHome= hides (home directories and runtime folders).
_PROTECTED_HOMES = ("/home", "/root", "/run/user")


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def protection_properties(home: str, writable: Sequence[str]) -> list[str]:
    """The unit properties that confine a job (torch_job_unit's protect): no privilege gained
    (setuid binaries run as the user), the whole filesystem read-only but the job's folders in
    `writable` and the user's home, a /tmp of its own, every other home hidden and the user's
    own ~/.ssh (its key to the other nodes) out of reach. /dev (the GPUs, /dev/shm), /proc and
    /sys stay as they are."""
    home = os.path.normpath(home) if home else ""
    paths = [os.path.normpath(path) for path in writable if path]
    properties = ["NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes"]
    if home and any(_under(home, folder) for folder in _PROTECTED_HOMES):
        # Every home is an empty read-only tmpfs, but the user's own, bound back in place.
        properties += ["ProtectHome=tmpfs", f"BindPaths={_word(home)}"]
    else:
        properties.append("ProtectHome=yes")
    if home and home != "/":
        paths.append(home)
    # One path a line: systemd splits a line at spaces, and a path may hold one.
    properties += [f"ReadWritePaths={_word(path)}" for path in dict.fromkeys(paths)]
    if home and home != "/":
        # "-": no error where the user has no ~/.ssh.
        properties.append(f"InaccessiblePaths={_word(os.path.join(home, '.ssh'), '-')}")
    return properties


def _word(path: str, prefix: str = "") -> str:
    """A path as one word of a systemd path list, quoted when it holds a space."""
    word = prefix + path
    return f'"{word}"' if any(char.isspace() for char in word) else word


def parse_limits(text: str) -> dict[str, int | str]:
    """The soft memlock (bytes) and nofile limits of a /proc/<pid>/limits text, each a number
    or UNLIMITED; one the text lacks is left out."""
    found: dict[str, int | str] = {}
    for line in text.splitlines():
        match = _PROC_LIMIT_LINE.match(line)
        if match and match.group(1) in PROC_LIMITS:
            soft = match.group(2)
            found[PROC_LIMITS[match.group(1)]] = int(soft) if soft.isdigit() else soft
    return found
