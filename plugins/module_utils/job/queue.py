"""The Slurm queue in one view (playbooks/jobs.yml): every person's queued and running jobs, and
one person's finished ones, from squeue and sacct on the master. A job this launcher started
(Slurm name torch-<job_id>) shows rank 0's last progress line beside it. torch_job_queue runs
the commands; the reading and the tables are here. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.slurm import (
    JOB_NAME_PREFIX,
)

# squeue --all --noheader --format=SQUEUE_FORMAT: id, name, user, state, reason, GPUs and other
# generic resources per node, node count, nodes (or, for a waiting job, those it asked for),
# time used, time limit.
SQUEUE_FORMAT = "%i|%j|%u|%T|%r|%b|%D|%N|%M|%l"
SQUEUE_FIELDS = ("id", "name", "user", "state", "reason", "gres", "nodes", "nodelist", "time",
                 "limit")  # fmt: skip

# sacct --noheader --parsable2 --allocations --format=SACCT_FORMAT.
SACCT_FIELDS = ("JobID", "JobName", "User", "State", "Start", "Elapsed", "NNodes", "NodeList",
                "AllocTRES")  # fmt: skip
SACCT_FORMAT = ",".join(SACCT_FIELDS)


def _rows(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    rows = []
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) == len(fields):
            rows.append(dict(zip(fields, (cell.strip() for cell in cells))))
    return rows


def parse_squeue(text: str) -> list[dict[str, str]]:
    """squeue's lines in SQUEUE_FORMAT, one dict each."""
    return _rows(text, SQUEUE_FIELDS)


def parse_sacct(text: str) -> list[dict[str, str]]:
    """sacct's lines in SACCT_FORMAT, one dict each."""
    return _rows(text, SACCT_FIELDS)


def launcher_job(name: str) -> str:
    """The launcher's job id of a Slurm job it submitted (named torch-<job_id>); '' otherwise."""
    return name[len(JOB_NAME_PREFIX) :] if name.startswith(JOB_NAME_PREFIX) else ""


def gpus(gres: str, nodes: str = "1") -> str:
    """The GPUs of a job: squeue's per-node gres (gres:gpu:2, gres/gpu:2, gpu:a100:2) times its
    nodes, or sacct's AllocTRES (gres/gpu=4); '-' without GPUs."""
    for part in gres.replace("gres/", "gres:").split(","):
        if "gpu" not in part:
            continue
        if "=" in part:  # sacct's AllocTRES: the job's total
            count = part.split("=", 1)[1]
            return count if count.isdigit() else "-"
        count = part.split(":")[-1].split("(")[0]
        if count.isdigit() and nodes.isdigit():
            return str(int(count) * int(nodes))
    return "-"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
             for row in [header, *rows]]  # fmt: skip
    return "\n".join(lines)


def queue_table(
    rows: Sequence[Mapping[str, str]], progress: Mapping[str, str], width: int = 50
) -> str:
    """Every queued and running job, each person's, oldest first as squeue lists them; a job of
    this launcher shows its job id and rank 0's last progress line (from `progress`)."""
    if not rows:
        return "Slurm's queue is empty."
    body = []
    for row in rows:
        job_id = launcher_job(row["name"])
        reason = row["reason"] if row["state"] == "PENDING" and row["reason"] != "None" else ""
        body.append(
            [
                row["id"],
                row["user"],
                job_id or row["name"],
                row["state"] + (f" ({reason})" if reason else ""),
                gpus(row["gres"], row["nodes"]),
                row["nodelist"] or "-",
                row["time"],
                _cut(progress.get(job_id, ""), width) or "-" if job_id else "",
            ]
        )
    header = ["SLURM", "USER", "JOB", "STATE", "GPUS", "NODES", "TIME", "PROGRESS"]
    return _table(header, body)


def history_table(rows: Sequence[Mapping[str, Any]], user: str) -> str:
    """One person's finished jobs from sacct, newest first."""
    done = [row for row in rows if row["State"] not in ("PENDING", "RUNNING")]
    if not done:
        return f"No finished Slurm jobs of {user}."
    body = [
        [
            row["JobID"],
            launcher_job(row["JobName"]) or row["JobName"],
            row["State"].split(" ")[0],
            row["Start"],
            row["Elapsed"],
            gpus(row["AllocTRES"]),
            row["NodeList"],
        ]
        for row in sorted(done, key=lambda row: row["Start"], reverse=True)
    ]
    header = ["SLURM", "JOB", "STATE", "START", "ELAPSED", "GPUS", "NODES"]
    return f"Finished Slurm jobs of {user}:\n" + _table(header, body)
