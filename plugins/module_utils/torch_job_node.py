"""What a node can tell about a job's processes and ports, read from /proc (Linux only).

Standard library only: runs on the nodes' system Python.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

# From the repository (ansible.cfg's module_utils path), else from the installed
# torch_cluster.cluster collection.
try:
    from ansible.module_utils.torch_job import ssh_argv
except ImportError:
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.torch_job import ssh_argv

# /proc/net/tcp's state column: 0A is LISTEN.
_LISTEN = "0A"


def _command_line(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def job_processes(job_id: str | None) -> list[str]:
    """'PID COMMAND' of every process whose environment carries TORCH_JOB_ID=job_id (the
    launcher sets it on the job's unit; every process torchrun starts inherits it); with
    job_id None, 'PID (job ID) COMMAND' of every process of any job."""
    prefix = b"TORCH_JOB_ID=" + (job_id.encode() if job_id is not None else b"")
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                entries = handle.read().split(b"\0")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if job_id is not None and prefix in entries:
            found.append(f"{pid} {_command_line(pid)[:200]}")
        elif job_id is None:
            jobs = [
                entry[len(prefix) :].decode(errors="replace")
                for entry in entries
                if entry.startswith(prefix)
            ]
            if jobs:
                found.append(f"{pid} (job {jobs[0]}) {_command_line(pid)[:200]}")
    return found


def matching_files(root: str, patterns: Sequence[str]) -> list[str]:
    """The files under root that match the glob patterns (relative to root; ** spans
    folders), as sorted relative paths. Nothing outside root is returned."""
    found = set()
    real_root = os.path.realpath(root)
    for pattern in patterns:
        for path in glob.glob(os.path.join(glob.escape(root), pattern), recursive=True):
            inside = os.path.realpath(path).startswith(real_root + os.sep)
            if os.path.isfile(path) and inside:
                found.add(os.path.relpath(path, root))
    return sorted(found)


def rsync_filters(files: Sequence[str]) -> list[str]:
    """rsync options that transfer exactly these files (relative paths) of the source folder,
    with the folders that lead to them and no other."""
    escaped = [re.sub(r"([*?\[\\])", r"\\\1", name) for name in files]
    return [
        "--prune-empty-dirs",
        *(f"--include=/{name}" for name in escaped),
        "--include=*/",
        "--exclude=*",
    ]


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def port_listeners(port: int) -> list[str]:
    """'PID COMMAND' of the processes that listen on the TCP port (any address), or
    'inode N' for a socket whose owner this user cannot see."""
    inodes = _listening_inodes(port)
    found = []
    owned = set()
    for pid in os.listdir("/proc"):
        if not inodes - owned:
            break
        if not pid.isdigit():
            continue
        links = set()
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                links.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:  # closed meanwhile
                continue
        for inode in inodes:
            if f"socket:[{inode}]" in links and inode not in owned:
                owned.add(inode)
                found.append(f"{pid} {_command_line(pid)[:200]}")
    return found + [f"inode {inode}" for inode in sorted(inodes - owned)]


def unreached_peers(
    peers: dict[str, str], as_user: Sequence[str] = (), shared: bool = True, timeout: float = 20
) -> list[str]:
    """One line per peer that `ssh ADDRESS true` (prefixed by as_user, e.g. runuser) does not
    reach, and why; all peers at once. With shared, the connections stay open for later
    polls (the watcher's)."""

    def reach(name: str) -> str:
        try:
            done = subprocess.run(
                [*as_user, *ssh_argv(peers[name], ["true"], shared=shared)],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"{name} ({peers[name]}): no answer within {timeout:.0f} s"
        if done.returncode == 0:
            return ""
        why = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        return f"{name} ({peers[name]}): {why}"

    if not peers:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(peers))) as pool:
        return [why for why in pool.map(reach, peers) if why]


# --- A job unit's resource limits -------------------------------------------
# NCCL over InfiniBand (RoCE and EFA alike) registers its buffers with ibv_reg_mr, which pins
# memory against RLIMIT_MEMLOCK: under a small limit the job fails at its first collective.
# limits.conf is applied by PAM at login and never reaches a systemd unit, so every job unit
# asks for its limits itself (torch_job_unit's defaults), and check.yml's probe asks for the
# same ones to learn what a job gets.
LIMIT_MEMLOCK = "infinity"
LIMIT_NOFILE = 1048576
UNLIMITED = "unlimited"
# /proc/<pid>/limits's names of the limits the launcher sets.
_PROC_LIMITS = {"Max locked memory": "memlock", "Max open files": "nofile"}
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


def gpu_device_nodes_command(
    gpu_dir: str = "/proc/driver/nvidia/gpus",
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
        if match and match.group(1) in _PROC_LIMITS:
            soft = match.group(2)
            found[_PROC_LIMITS[match.group(1)]] = int(soft) if soft.isdigit() else soft
    return found


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
    if done.returncode != 0 or set(found) != set(_PROC_LIMITS.values()):
        why = " ".join((done.stderr or done.stdout).split())[-300:]
        return {"asked": asked, "error": f"systemd-run: {why or f'exit status {done.returncode}'}"}
    return {"asked": asked, **found, "error": ""}
