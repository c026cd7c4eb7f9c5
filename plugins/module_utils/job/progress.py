"""The progress a script prints, as numbers: train_progress_regex's named groups over rank 0's
lines, attempt by attempt, for progress.csv and progress.png. Standard library only: it runs on
the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.logs import (
    HEADER,
    rank_line,
)


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
            worker = rank_line(raw.rstrip("\r"))
            if worker and worker[0] == 0 and worker[1].strip():
                attempts[current].append(worker[1])
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
