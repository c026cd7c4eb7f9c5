"""NCCL's flight recorder on a stalled job's node: each rank asked for a dump through its pipe, the
dumps waited for and copied beside the stacks. Reading and writing only (job/flight_recorder.py
decides). Standard library only: it runs on the nodes' system Python (3.9 on EL9) and on the
controller.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import stat
import time
from collections.abc import Sequence


# On a node: the NCCL flight recorder
def request_flight_recorder_dumps(pipe_prefix: str) -> tuple[list[int], list[int]]:
    """Write to every rank's pipe (<pipe_prefix><rank>.pipe): the ranks asked, and the ranks
    whose pipe nobody reads (left by an earlier run)."""
    asked, unread = [], []
    for pipe in sorted(glob.glob(glob.escape(pipe_prefix) + "*.pipe")):
        rank = pipe[len(pipe_prefix) : -len(".pipe")]
        try:
            if not rank.isdigit() or not stat.S_ISFIFO(os.stat(pipe).st_mode):
                continue
            # Non-blocking: the rank keeps its end open for reading; without it, ENXIO.
            handle = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ENXIO:
                unread.append(int(rank))
            continue
        try:
            os.write(handle, b"dump\n")
            asked.append(int(rank))
        except OSError:
            unread.append(int(rank))
        finally:
            os.close(handle)
    return asked, unread


def flight_recorder_files(dump_prefix: str) -> dict[str, os.stat_result]:
    """The dump files (not the pipes) under the prefix, with their stat."""
    found = {}
    for path in glob.glob(glob.escape(dump_prefix) + "*"):
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found[path] = info
    return found


def wait_for_dumps(
    dump_prefix: str,
    ranks: Sequence[int],
    since: float,
    timeout: float,
    sleep: float = 0.5,
) -> list[int]:
    """Wait until each rank's dump (<prefix><rank>, or <prefix><rank>_<time>) is newer than
    since and stops growing; the ranks whose dump did not come within timeout."""
    deadline = time.time() + timeout
    sizes: dict[str, int] = {}
    while True:
        files = flight_recorder_files(dump_prefix)
        fresh = {p: i.st_size for p, i in files.items() if i.st_mtime >= since}
        settled = {p for p, size in fresh.items() if sizes.get(p) == size and size > 0}
        sizes = fresh
        pending = [
            rank
            for rank in ranks
            if not any(
                p == f"{dump_prefix}{rank}" or p.startswith(f"{dump_prefix}{rank}_")
                for p in settled
            )
        ]
        if not pending or time.time() >= deadline:
            return pending
        time.sleep(sleep)


def copy_flight_recorder_files(dump_prefix: str, dest: str) -> list[str]:
    os.makedirs(dest, mode=0o755, exist_ok=True)
    copied = []
    for path in sorted(flight_recorder_files(dump_prefix)):
        target = os.path.join(dest, os.path.basename(path))
        shutil.copyfile(path, target)
        os.chmod(target, 0o644)
        copied.append(target)
    return copied
