"""Which rank failed first, and what followed: torchrun's summary of a failed run read rank by
rank, the failures that are only consequences of another's, and the lines of the message that
names the first failure with its traceback. Standard library only: it runs on the nodes' system
Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    FAILED,
    UNREACHABLE,
)


def merge_tails(watched: Mapping[str, str], stopped: Mapping[str, str]) -> dict[str, str]:
    """Each failed node's last lines: those its stop read from this attempt's part of its log
    (complete: torchrun had ended), else those the watcher read when it saw the node fail (a
    node that no longer answered the stop). The first failure, told by the ranks' own failure
    times, can be a node whose unit the watcher still saw running."""
    return {**watched, **{name: text for name, text in stopped.items() if text}}


# Failures that follow another rank's: its peers lose their connections, and torchrun stops
# a failed node's other workers with SIGTERM.
_CONSEQUENCE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|communicator was aborted"
    r"|DistNetworkError",
)


_SUMMARY_ENTRY = re.compile(r"^\[\d+\]:$")


_SUMMARY_FIELD = re.compile(r"^  (time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")


_SUMMARY_RULE = re.compile(r"^(=+|-+)$")


@dataclass
class RankFailure:
    """One process of the job that failed: a worker (rank >= 0), or a node's torchrun
    (rank -1, when no worker's failure is known there)."""

    node: str
    rank: int
    local_rank: int
    exitcode: int
    time: float  # seconds since the epoch; 0.0 when unknown
    message: str  # "ValueError: boom", "killed by SIGKILL", "exit status 2"
    traceback: str = ""
    consequence: bool = False

    def describe(self) -> str:
        if self.rank < 0:
            return f"{self.node}: {self.message}"
        return f"{self.node}, rank {self.rank} (local rank {self.local_rank}): {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _summary_time(text: str) -> float:
    """torchrun's "2026-12-03_09:23:50", in the node's local time (this runs on the node)."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%d_%H:%M:%S"))
    except ValueError:
        return 0.0


def _failure_message(exitcode: int, traceback: str) -> str:
    """The exception ("ValueError: boom"), and how the process ended when a signal did it."""
    lines = [line.strip() for line in traceback.splitlines() if line.strip()]
    exception = lines[-1] if lines and lines[0].startswith("Traceback") else ""
    if exitcode >= 0:
        return exception or f"exit status {exitcode}"
    try:
        killed = f"killed by {signal.Signals(-exitcode).name}"
    except ValueError:
        killed = f"killed by signal {-exitcode}"
    return f"{exception}; then {killed}" if exception else killed


def parse_torchrun_failures(text: str, node: str) -> list[RankFailure]:
    """The failed workers in torchrun's summary of a failed run (ChildFailedError), as one
    node's log shows it: each with its rank, exit code, time, and, when the worker left an
    error file, its exception and traceback."""
    failures: list[RankFailure] = []
    fields: dict[str, str] | None = None
    key = ""

    def close() -> None:
        if fields and "rank" in fields:
            rank = re.match(r"(-?\d+) \(local_rank: (\d+)\)", fields["rank"])
            code = re.match(r"(-?\d+)", fields.get("exitcode", ""))
            if rank and code:
                exitcode = int(code.group(1))
                trace = fields.get("traceback", "").rstrip()
                message = _failure_message(exitcode, trace)
                # torchrun stops a failed node's other workers with SIGTERM.
                stopped = exitcode == -signal.SIGTERM
                failures.append(
                    RankFailure(
                        node=node,
                        rank=int(rank.group(1)),
                        local_rank=int(rank.group(2)),
                        exitcode=exitcode,
                        time=_summary_time(fields.get("time", "")),
                        message=message,
                        traceback=trace if trace.startswith("Traceback") else "",
                        consequence=stopped or bool(_CONSEQUENCE.search(message)),
                    )
                )

    for line in text.splitlines():
        if _SUMMARY_ENTRY.match(line):
            close()
            fields, key = {}, ""
        elif fields is not None:
            field_match = _SUMMARY_FIELD.match(line)
            if field_match:
                key = field_match.group(1)
                fields[key] = field_match.group(2)
            elif _SUMMARY_RULE.match(line.strip()) or not line.startswith("  "):
                close()
                fields = None
            elif key == "traceback":
                fields[key] += "\n" + line[2:]
    close()
    return failures


def order_failures(failures: Sequence[RankFailure]) -> list[RankFailure]:
    """The first failure first: a failure that is not a consequence of another's, earliest
    (each node's own clock), lowest rank; the consequences after it. A rank's failure
    reported on two nodes (it does not happen) would count once."""
    unique = {(f.node, f.rank, f.local_rank): f for f in failures}
    return sorted(unique.values(), key=lambda f: (f.consequence, f.time or float("inf"), f.rank))


# Frames of the launcher's wrapper and of runpy, which stand between torch's `record` and the
# script's own frames in a recorded traceback.
_LAUNCHER_FRAME = re.compile(
    r'^  File "(.*/elastic/multiprocessing/errors/__init__\.py'
    r'|.*/record_errors\.py|<frozen runpy>)"'
)


def script_traceback(traceback: str) -> list[str]:
    """A recorded traceback without the frames the launcher's wrapper adds."""
    kept: list[str] = []
    skipping = False
    for line in traceback.splitlines():
        if line.startswith("  File "):
            skipping = bool(_LAUNCHER_FRAME.match(line))
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return kept


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure_report(failures: Sequence[RankFailure], tails: Mapping[str, str]) -> list[str]:
    """The lines of the message: the first failure with its traceback (or, without one, the
    last lines of its node's log), then the others."""
    if not failures:
        return []
    first, *others = failures
    lines = [f"First failure: {first.describe()}"]
    if first.traceback:
        lines += ["    " + line for line in script_traceback(first.traceback)[-16:]]
    elif first.node in tails:
        lines.append(f"  Last lines of {first.node}'s log:")
        lines += ["    " + line for line in tails[first.node].rstrip("\n").splitlines()]
    if others:
        lines.append("Then, as consequences:" if all(f.consequence for f in others) else "Then:")
        lines += [f"  {_short(f.describe())}" for f in others]
    return lines


def job_failures(
    nodes: Mapping[str, Mapping[str, Any]], reported: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[RankFailure]:
    """Every failure of an attempt, the first first: the workers' (from each node's torchrun
    summary), and the node's own (its unit's state) for a node that failed, timed out or
    stopped answering with no worker's failure known there."""
    failures = [RankFailure(**failure) for found in reported.values() for failure in found]
    known = {failure.node for failure in failures}
    for name, node in nodes.items():
        if name not in known and node.get("state") in (FAILED, UNREACHABLE):
            detail = f"{node['state']} ({node.get('detail', '')})"
            ended = float(node.get("ended") or 0.0)
            failures.append(RankFailure(name, -1, -1, 0, ended, detail))
    return order_failures(failures)


def nodes_by_failure(nodes: Sequence[str], failures: Sequence[RankFailure]) -> list[str]:
    """NODES with the node of the first failure leading: the nodes in the order of their first
    failure (ORDER_FAILURES' order), then the others as given. The watch orders the failed nodes
    by when their units ended, and a peer's unit can end before the node whose rank died
    (torchrun stops it as soon as the peer's connection breaks): the failures' order is the
    one that knows which came first."""
    named = list(dict.fromkeys(f.node for f in failures if f.node in nodes))
    return named + [name for name in nodes if name not in named]
