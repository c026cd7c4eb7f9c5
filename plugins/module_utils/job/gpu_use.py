"""Each node's GPU use while a job runs (train_watch_gpus): nvidia-smi's query read, the nodes
whose GPUs idle, the summary line and gpu.csv's rows. Standard library only: it runs on the
nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import csv
import io
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

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
