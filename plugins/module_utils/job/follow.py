"""Rank 0's lines as they come, shown on the controller while a job runs (train_follow), at most
train_follow_max_lines a round and each line cut at FOLLOW_LINE_CHARS. Standard library only: it
runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# A line longer than this is cut (a progress bar redrawn with \r can be one long line).
FOLLOW_LINE_CHARS = 500


@dataclass
class FollowBuffer:
    """Rank 0's new lines for the controller, in order, at most `keep` of them: a script
    that prints more between two rounds has its oldest ones left out and counted, so that a
    chatty script cannot flood the controller (logs.yml shows everything)."""

    keep: int
    lines: list[str]
    skipped: int = 0

    @classmethod
    def empty(cls, keep: int) -> FollowBuffer:
        return cls(keep, [])

    def add(self, line: str) -> None:
        if self.keep <= 0:
            return
        if len(line) > FOLLOW_LINE_CHARS:
            line = line[:FOLLOW_LINE_CHARS] + " [...]"
        self.lines.append(line)
        if len(self.lines) > self.keep:
            drop = len(self.lines) - self.keep
            del self.lines[:drop]
            self.skipped += drop


def follow_lines(lines: Sequence[str], skipped: int, prefix: str) -> list[str]:
    """The controller's lines for one round: a note of what was left out, then the lines."""
    shown = [f"{prefix}{line}" for line in lines]
    if skipped:
        note = f"{prefix}[... {skipped} line(s) left out: rank 0 printed faster than followed; "
        shown.insert(0, note + "playbooks/logs.yml shows them]")
    return shown
