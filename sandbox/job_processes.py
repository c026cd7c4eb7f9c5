"""List, or kill the workers of, one launcher job's processes on a node (tests and benchmarks).

    python3 job_processes.py JOB_ID list|kill

A job's processes are those whose environment carries its TORCH_JOB_ID (the launcher sets
it on the job's systemd unit; everything torchrun starts inherits it). Prints one line per
process, "PID ROLE COMMAND", ROLE being "worker" for torchrun's workers (they have
LOCAL_RANK) and "agent" for torchrun itself. "kill" sends SIGKILL to the workers only, as a
crash would: torchrun then sees them die. Standard library only; runs on any node.
"""

import os
import signal
import sys


def main(job_id: str, action: str) -> None:
    marker = f"TORCH_JOB_ID={job_id}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                env = handle.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if marker not in env or int(pid) == os.getpid():
            continue
        worker = any(entry.startswith(b"LOCAL_RANK=") for entry in env)
        if action == "kill" and worker:
            os.kill(int(pid), signal.SIGKILL)
        print(pid, "worker" if worker else "agent", command)


if __name__ == "__main__":
    main(*sys.argv[1:3])
