"""Rank 0's part of the master's log, read a little at each poll: the newest progress line, the
newest line, and how long rank 0 has been quiet (the stall watchdog). Reading only: job/logs.py
says which lines are rank 0's and which are progress. Standard library only: it runs on the
nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.logs import rank_line


@dataclass(frozen=True)
class LogScan:
    progress: str  # rank 0's newest progress line in the part read, or ""
    last_line: str  # rank 0's newest non-empty line in the part read, or ""
    offset: int  # where the next scan starts: after the last complete line read


def scan_log(
    path: str,
    offset: int,
    matches: Callable[[str], bool],
    chunk: int = 1 << 20,
    sink: Callable[[str], None] | None = None,
) -> LogScan:
    """Read rank 0's lines of the log from byte `offset` to its last complete line (without
    their rank prefix); each non-empty one also goes to `sink` (follow). A log that has
    shrunk below the offset (replaced) is read from its start."""
    progress = last = ""
    try:
        with open(path, "rb") as log:
            size = os.fstat(log.fileno()).st_size
            if size < offset:
                offset = 0
            log.seek(offset)
            pending = b""
            while True:
                data = log.read(chunk)
                if not data:
                    break
                lines = (pending + data).split(b"\n")
                pending = lines.pop()
                offset += len(data)
                for raw in lines:
                    worker = rank_line(raw.decode(errors="replace").rstrip("\r"))
                    if worker and worker[0] == 0 and worker[1].strip():
                        last = worker[1]
                        if sink:
                            sink(last)
                        if matches(last):
                            progress = last
            offset -= len(pending)
    except OSError:
        pass
    return LogScan(progress, last, offset)


class RankZeroLog:
    """Rank 0's part of the master's log, read a little at each poll: the newest progress
    line, the newest line, and how long rank 0 has been quiet (for the stall watchdog).
    `quiet_for`: how long it had been quiet already when this reading began."""

    def __init__(
        self,
        path: str,
        offset: int,
        matches: Callable[[str], bool],
        quiet_for: float = 0.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        sink: Callable[[str], None] | None = None,
    ) -> None:
        self.path, self.offset, self.matches, self.clock = path, offset, matches, clock
        self.progress = self.last_line = ""
        self.last_output = clock() - quiet_for
        self.sink = sink

    def read(self) -> None:
        scan = scan_log(self.path, self.offset, self.matches, sink=self.sink)
        self.offset = scan.offset
        if scan.last_line:
            self.last_line, self.last_output = scan.last_line, self.clock()
        if scan.progress:
            self.progress = scan.progress

    def quiet_for(self) -> float:
        return self.clock() - self.last_output

    def stalled(self, timeout: float) -> bool:
        """Read on; whether rank 0 has been quiet for `timeout` seconds (0: never)."""
        self.read()
        return timeout > 0 and self.quiet_for() >= timeout
