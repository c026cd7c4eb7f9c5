"""What a node's /proc tells about its processes: a job's processes (by the TORCH_JOB_ID in their
environment), who listens on a TCP port, and which files under a folder are held open. Reading
only: the decisions that use these are elsewhere. Standard library only (Linux).
"""

from __future__ import annotations

import os

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


def open_files(folder: str, proc: str = "/proc") -> list[str]:
    """The files under `folder` that a process this user can see holds open (its
    /proc/<pid>/fd links), relative to the folder: a checkpoint being written."""
    root = os.path.realpath(folder) + os.sep
    found = set()
    for pid in os.listdir(proc) if os.path.isdir(proc) else []:
        fds = os.path.join(proc, pid, "fd")
        try:
            names = os.listdir(fds) if pid.isdigit() else []
        except OSError:
            continue  # another user's process, or gone
        for name in names:
            try:
                link = os.readlink(os.path.join(fds, name))
            except OSError:
                continue  # closed meanwhile
            if link.startswith(root):
                found.add(os.path.relpath(link, root))
    return sorted(found)
