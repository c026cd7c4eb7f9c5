"""The cluster's jobs and their logs, in plain Python: what playbooks/jobs.yml lists and
playbooks/logs.yml shows.

A job leaves two records, which the launcher keeps and these functions only read:
- on the controller, runs/<job id>/attempts.json (torch_job_record): an attempt is written as
  "running" when it starts, and replaced by its outcome when it ends;
- on each node, the job's folder with its log (node.log), in which each attempt's part begins
  with the launcher's header (attempt, node, node_rank, start), and the job's unit. Standard
  library only: it runs on the nodes' system Python (3.9 on EL9) too.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.logs import (
    HEADER,
    rank_line,
)

# The unit states of a job that still runs on a node: an active unit whose process has
# exited (the launcher's units remain after their exit, until the launcher collects and
# removes them) runs nothing any more.
ACTIVE = frozenset({"active", "activating", "deactivating", "reloading"})


def unit_runs(state: str) -> bool:
    """Whether a unit in this "ActiveState/SubState" (or bare ActiveState) still runs."""
    active, _, sub = state.partition("/")
    return active in ACTIVE and sub != "exited"


@dataclass
class NodeJob:
    """One job as one node holds it: its newest attempt's header, its unit, rank 0's newest
    lines there (when the node ran node_rank 0)."""

    job_id: str
    attempt: int = 0
    node_rank: int = -1
    started: str = ""
    unit: str = ""  # "ActiveState/SubState", or "" where the node has no unit of the job
    last_line: str = ""
    progress: str = ""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def scan_node_log(job_id: str, text: str, is_progress) -> NodeJob:
    """The newest attempt's header in a node's log, and rank 0's newest line and progress line
    after it."""
    job = NodeJob(job_id)
    lines = text.splitlines()
    start = 0
    for index in range(len(lines) - 1, -1, -1):
        header = HEADER.match(lines[index])
        if header:
            job.attempt, job.node_rank = int(header["attempt"]), int(header["node_rank"])
            job.started, start = header["started"], index + 1
            break
    for raw in lines[start:]:
        worker = rank_line(raw.rstrip("\r"))
        if worker and worker[0] == 0 and worker[1].strip():
            job.last_line = worker[1]
            if is_progress(job.last_line):
                job.progress = job.last_line
    return job


@dataclass
class JobRow:
    job_id: str
    state: str
    launcher: str = ""
    nodes: list[str] = field(default_factory=list)
    world_size: int = 0
    attempt: int = 0
    started: str = ""
    ended: str = ""
    progress: str = ""
    detail: str = ""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _iso(seconds: float | None) -> str:
    if not seconds:
        return ""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.isoformat(timespec="seconds")


def job_row(job_id: str, record: Mapping | None, on_nodes: Mapping[str, NodeJob]) -> JobRow:
    """A job's row: its state from the launcher's record and the nodes' units.

    - The record's newest attempt is "running" (the launcher wrote it at the start): running
      while a node's unit is active, else "interrupted" (the launcher stopped watching, and
      nothing runs any more). A Slurm job has no units: its record's "running" stands.
    - It has an outcome: that outcome (succeeded, failed, stalled, stopped, timed out), but
      running while a unit is active (the launcher is starting the next attempt).
    - No record here (the job was started from another controller, or into another runs
      folder): running while a unit is active, else unknown."""
    active = sorted(name for name, job in on_nodes.items() if unit_runs(job.unit))
    attempts = list((record or {}).get("attempts") or [])
    last = attempts[-1] if attempts else {}
    newest = max((job.attempt for job in on_nodes.values()), default=0)
    row = JobRow(job_id, "unknown", launcher=str((record or {}).get("launcher") or ""))
    row.world_size = int((record or {}).get("world_size") or 0)
    row.attempt = max(int(last.get("number") or 0), newest)
    row.nodes = list(last.get("nodes_used") or [])
    if not row.nodes:
        row.nodes = [name for name, job in on_nodes.items() if job.attempt == newest and newest]
    if attempts:
        row.started = _iso(float(attempts[0].get("started_at") or 0))
    else:
        starts = sorted(
            job.started for job in on_nodes.values() if job.started and job.attempt == 1
        )
        row.started = starts[0] if starts else ""
    outcome = str(last.get("outcome") or "")
    if active:
        row.state = "running"
    elif outcome == "running" and row.launcher == "slurm":
        # Slurm's steps run without the launcher's units: the record is all there is here.
        row.state = "running"
        row.detail = "in Slurm: squeue shows its state there"
    elif outcome == "running":
        row.state = "interrupted"
        row.detail = "the launcher stopped watching it, and no node runs it any more"
    elif outcome:
        row.state = "failed" if outcome == "unwatchable" else outcome
        ended = float(last.get("started_at") or 0) + float(last.get("seconds") or 0)
        row.ended = _iso(ended) if last.get("started_at") else ""
    # Rank 0's newest progress: on the node that ran node_rank 0 in the newest attempt.
    ranks0 = [job for job in on_nodes.values() if job.node_rank == 0 and job.attempt == row.attempt]
    if ranks0:
        row.progress = ranks0[0].progress or ranks0[0].last_line
    return row


def job_rows(
    records: Mapping[str, Mapping], nodes: Mapping[str, Sequence[Mapping]]
) -> list[JobRow]:
    """Every job that a record or a node knows, the newest start first. records: attempts.json
    by job id; nodes: each node's jobs (NodeJob as dicts)."""
    by_job: dict[str, dict[str, NodeJob]] = {}
    for name, jobs in nodes.items():
        for job in jobs:
            by_job.setdefault(job["job_id"], {})[name] = NodeJob(**job)
    ids = sorted(set(records) | set(by_job))
    rows = [job_row(job_id, records.get(job_id), by_job.get(job_id, {})) for job_id in ids]
    return sorted(rows, key=lambda row: (row.started, row.job_id), reverse=True)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def job_table(rows: Sequence[JobRow], width: int = 60) -> str:
    """The job list as the user reads it: one row a job."""
    head = ("JOB", "STATE", "LAUNCHER", "NODES", "WORLD", "TRY", "STARTED", "ENDED", "PROGRESS")
    body = [
        (
            row.job_id, row.state, row.launcher or "-", ",".join(row.nodes) or "-",
            str(row.world_size or "-"), str(row.attempt or "-"), row.started or "-",
            row.ended or "-", _cut(row.progress, width) or "-",
        )
        for row in rows
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [head, *body]
    ]
    return "\n".join(lines)


def log_lines(text: str, rank: str, attempt: int = 0) -> list[str]:
    """A node's log lines to show: one rank's (without its prefix), or every line ("all"),
    of one attempt (0: every attempt). The launcher's headers are kept."""
    shown, current = [], 0
    for raw in text.splitlines():
        header = HEADER.match(raw)
        if header:
            current = int(header["attempt"])
        if attempt and current != attempt:
            continue
        if header or rank == "all":
            shown.append(raw)
            continue
        worker = rank_line(raw.rstrip("\r"))
        if worker and str(worker[0]) == rank:
            shown.append(worker[1])
    return shown
