"""What a user sees of a running job, in plain Python: rank 0's lines as they come (follow),
each node's GPU use, and the progress a script prints, as numbers (progress.csv).

The watch module (plugins/modules/torch_job_watch.py) reads; its action plugin
(plugins/action/torch_job_watch.py) shows and writes on the controller; the progress
module (plugins/modules/torch_job_progress.py) turns rank 0's log into a table and a plot.
Standard library only: it runs on the nodes' system Python (3.9 on EL9) too.
"""

from __future__ import annotations

import csv
import io
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# --- Follow: rank 0's lines, capped ------------------------------------------------
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


# --- GPU use -----------------------------------------------------------------------
# `nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits`, one row per GPU.
GPU_QUERY = "index,utilization.gpu,memory.used,memory.total"
# Marks where the GPU rows begin in a poll's output (after systemctl's properties).
GPU_MARK = "--- gpus"
# A node's GPUs are idle when their mean use is below this while another node's is at
# least BUSY_PCT.
IDLE_PCT, BUSY_PCT = 5.0, 30.0


@dataclass(frozen=True)
class GpuUse:
    index: int
    utilization: float | None  # percent; None where the driver does not say ([N/A])
    memory_used: float | None  # MiB
    memory_total: float | None  # MiB


def _number(text: str) -> float | None:
    """A field of nvidia-smi's CSV: '87', '87 %', '30123 MiB'; None for [N/A], [Not
    Supported] and the like."""
    found = re.match(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:%|MiB)?\s*$", text)
    return float(found.group(1)) if found else None


def parse_gpu_query(text: str) -> list[GpuUse]:
    """The rows of `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total
    --format=csv,noheader[,nounits]`. A header line, a blank line or an error message
    ("NVIDIA-SMI has failed because ...") gives no row."""
    gpus = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if len(row) != 4 or not row[0].strip().isdigit():
            continue
        used, total = _number(row[2]), _number(row[3])
        gpus.append(GpuUse(int(row[0]), _number(row[1]), used, total))
    return gpus


def split_poll_output(stdout: str) -> tuple[str, str]:
    """A poll's output: (systemctl's properties, the GPU rows or '')."""
    head, mark, gpus = stdout.partition(f"\n{GPU_MARK}\n")
    if not mark and stdout.startswith(f"{GPU_MARK}\n"):
        return "", stdout[len(GPU_MARK) + 1 :]
    return head + ("\n" if mark else ""), gpus


def gpu_poll_script(systemctl: Sequence[str], timeout_s: int = 3) -> str:
    """The shell text of one poll that also reads the GPUs: systemctl's own exit status is
    the poll's; nvidia-smi, where there is one, runs under a time limit (a GPU that has
    fallen off the bus can make it hang) and its failure only leaves the rows out."""
    query = f"timeout {timeout_s} nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits"
    return (
        f"{shlex.join(systemctl)}; rc=$?; "
        f"if command -v nvidia-smi >/dev/null 2>&1; then echo '{GPU_MARK}'; "
        f"{query} 2>/dev/null; fi; exit $rc"
    )


def _mean(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


def idle_nodes(gpus: Mapping[str, Sequence[GpuUse]]) -> list[str]:
    """The nodes whose GPUs sit idle while another node's work (nodes without GPUs are
    left out)."""
    means = {name: _mean(g.utilization for g in rows) for name, rows in gpus.items() if rows}
    known = {name: mean for name, mean in means.items() if mean is not None}
    if not known or max(known.values()) < BUSY_PCT:
        return []
    return [name for name, mean in known.items() if mean < IDLE_PCT]


def _gib(mib: float | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f}"


def gpu_summary(gpus: Mapping[str, Sequence[GpuUse]]) -> str:
    """The watch line's GPU part: each node's mean utilisation and memory in use over its
    GPUs, and the nodes whose GPUs sit idle while the others work; '' where no node has
    GPUs."""
    parts = []
    for name, rows in gpus.items():
        if not rows:
            continue
        mean = _mean(g.utilization for g in rows)
        used = sum(g.memory_used or 0 for g in rows)
        total = sum(g.memory_total or 0 for g in rows)
        use = "?" if mean is None else f"{mean:.0f}%"
        parts.append(f"{name} {use} {_gib(used)}/{_gib(total)} GiB")
    if not parts:
        return ""
    idle = idle_nodes(gpus)
    line = "GPU " + ", ".join(parts)
    if idle:
        line += f"; idle while the others work: {', '.join(idle)}"
    return line


GPU_CSV_FIELDS = ("time", "node", "gpu", "utilization_pct", "memory_used_mib", "memory_total_mib")


def gpu_csv_rows(at: float, gpus: Mapping[str, Sequence[GpuUse]]) -> list[list[str]]:
    """gpu.csv's rows for one reading (GPU_CSV_FIELDS; an unknown value is empty)."""

    def cell(value: float | None) -> str:
        return "" if value is None else f"{value:.15g}"

    return [
        [f"{at:.1f}", name, str(g.index), cell(g.utilization), cell(g.memory_used),
         cell(g.memory_total)]
        for name, rows in gpus.items()
        for g in rows
    ]  # fmt: skip


# --- Progress: rank 0's lines as numbers -------------------------------------------
# The launcher's header of an attempt's part of a node's log (roles/train/tasks/attempt.yml).
HEADER = re.compile(
    r"^=== torch-cluster: job (?P<job>\S+), attempt (?P<attempt>\d+), node (?P<node>\S+) "
    r"\(node_rank\s+(?P<node_rank>\d+)\), started (?P<started>\S+) ===$"
)
# Rank 0's lines (torch_job.rank_line's, for rank 0: this file stays standalone, the watch
# action loads it by its path).
_RANK0 = re.compile(r"^\[rank0\]: ?(?:\[rank\d+\]: ?)?(.*)$")


@dataclass(frozen=True)
class ProgressRow:
    attempt: int
    line: int  # rank 0's line number over the whole job, from 1
    values: dict[str, float | str]


def rank0_attempts(logs: Mapping[str, str]) -> dict[int, list[str]]:
    """Rank 0's lines of each attempt, from the nodes' logs (each attempt's part begins with
    the launcher's header; rank 0 runs on the attempt's node_rank 0, which a lost master
    changes)."""
    attempts: dict[int, list[str]] = {}
    for text in logs.values():
        current: int | None = None
        for raw in text.splitlines():
            header = HEADER.match(raw)
            if header:
                rank0 = header.group("node_rank") == "0"
                current = int(header.group("attempt")) if rank0 else None
                if current is not None:
                    attempts.setdefault(current, [])
                continue
            if current is None:
                continue
            found = _RANK0.match(raw.rstrip("\r"))
            if found and found.group(1).strip():
                attempts[current].append(found.group(1))
    return dict(sorted(attempts.items()))


def regex_groups(regex: str) -> list[str]:
    """The named groups of a progress regex, in order; a bad regex raises ValueError."""
    try:
        return list(re.compile(regex).groupindex)
    except re.error as err:
        raise ValueError(
            f"train_progress_regex {regex!r} is not a regular expression: {err}"
        ) from None


def _value(text: str | None) -> float | str | None:
    if text is None:
        return None
    try:
        number = float(text)
    except ValueError:
        return text.strip()
    return number if math.isfinite(number) else text.strip()


def progress_rows(attempts: Mapping[int, Sequence[str]], regex: str) -> list[ProgressRow]:
    """Each rank 0 line that the regex matches, with its named groups' values (numbers where
    they read as numbers)."""
    pattern = re.compile(regex)
    rows, number = [], 0
    for attempt, lines in sorted(attempts.items()):
        for text in lines:
            number += 1
            found = pattern.search(text)
            if not found:
                continue
            values = {k: v for k, v in ((k, _value(v)) for k, v in found.groupdict().items())}
            kept = {key: value for key, value in values.items() if value is not None}
            if kept:
                rows.append(ProgressRow(attempt, number, kept))
    return rows


def x_axis(rows: Sequence[ProgressRow]) -> str:
    """What the plot's x axis is: the step, else the epoch (numbers in every row), else
    rank 0's line number."""
    for name in ("step", "epoch"):
        if rows and all(isinstance(row.values.get(name), float) for row in rows):
            return name
    return "line"


def numeric_series(rows: Sequence[ProgressRow], x: str) -> list[str]:
    """The groups to plot: those that read as a number in some row, other than the x axis
    (and than the epoch where the x axis is the step: it only counts)."""
    names: list[str] = []
    for row in rows:
        for name, value in row.values.items():
            if isinstance(value, float) and name not in names:
                names.append(name)
    skip = {x, "epoch"} if x == "step" else {x}
    return [name for name in names if name not in skip]


def progress_csv(rows: Sequence[ProgressRow], groups: Sequence[str]) -> str:
    """progress.csv: the attempt, rank 0's line number, then each named group."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["attempt", "line", *groups])
    for row in rows:
        cells = []
        for name in groups:
            value = row.values.get(name)
            if isinstance(value, float):
                value = f"{value:.15g}"
            cells.append("" if value is None else value)
        writer.writerow([row.attempt, row.line, *cells])
    return out.getvalue()


def restarts(rows: Sequence[ProgressRow]) -> list[int]:
    """The indices of the rows where a new attempt begins (restarts, to mark on the plot)."""
    return [i for i in range(1, len(rows)) if rows[i].attempt != rows[i - 1].attempt]
