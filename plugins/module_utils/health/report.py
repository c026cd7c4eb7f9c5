"""The health check's report: a table of the nodes and the findings, as Markdown. Standard library
only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.findings import Finding


def cell(value: Any) -> str:
    return str(value) if value not in (None, "") else "-"


def node_table(
    rows: Mapping[str, Mapping[str, Any]],
    transports: Mapping[str, str],
    offsets: Mapping[str, float | None],
) -> list[str]:
    """One line per node: the versions side by side, the clock against the master's (the
    first node), the free disk and the number of leftovers."""
    columns = (
        "node", "os", "kernel", "driver", "gpus (driver/torch)", "torch", "cuda", "nccl",
        "system nccl", "python", "transport", "clock (s)", "free GiB", "leftovers",
    )  # fmt: skip
    table = [list(columns)]
    for position, (name, row) in enumerate(rows.items()):
        offset = offsets.get(name)
        clock = "master" if position == 0 else cell(None if offset is None else f"{offset:+.3f}")
        free = row.get("disk_free_gib")
        table.append(
            [
                name,
                *(cell(row.get(key)) for key in ("os", "kernel", "driver")),
                f"{row.get('driver_gpus', 0)}/{cell(row.get('torch_gpus'))}",
                *(cell(row.get(key)) for key in ("torch", "cuda", "nccl", "system_nccl", "python")),
                cell(transports.get(name)),
                clock,
                cell(None if free is None else f"{free:.1f}"),
                str(sum(len(row.get(key) or []) for key in ("units", "processes", "port_users"))),
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table
    ]


def markdown(
    title: str,
    table: Sequence[str],
    reach: Mapping[str, Sequence[Mapping[str, Any]]],
    figures: Mapping[str, Any],
    findings: Sequence[Finding],
    *,
    shared: Sequence[str] = (),
    limits: Sequence[str] = (),
) -> str:
    """report.md: the same facts as report.json, to read."""
    lines = [f"# {title}", "", "## Nodes", "", "```", *table, "```", ""]
    if shared:
        lines += ["## Shared folder", "", "```", *shared, "```", ""]
    if limits:
        lines += ["## Job unit limits", "", "```", *limits, "```", ""]
    lines += ["## Connections", "", "| from | to | port | outcome |", "| --- | --- | ---: | --- |"]
    lines += [
        f"| {name} | {attempt['peer']} | {attempt['port']} | {attempt['outcome']} |"
        for name, attempts in reach.items()
        for attempt in attempts
    ]
    lines.append("")
    if figures.get("group"):
        lines += [
            "## All-reduce, whole group",
            "",
            "| size (B) | time (us) | algbw (GB/s) | busbw (GB/s) |",
            "| ---: | ---: | ---: | ---: |",
        ]
        for row in figures["group"]:
            time_us, algbw, busbw = row["seconds"] * 1e6, row["algbw"] / 1e9, row["busbw"] / 1e9
            lines.append(f"| {row['size']} | {time_us:.1f} | {algbw:.3f} | {busbw:.3f} |")
        lines += [
            "",
            "## Pairs and directions",
            "",
            "| between | bandwidth (MB/s) |",
            "| --- | ---: |",
        ]
        lines += [
            f"| {k} (all_reduce busbw) | {v / 1e6:.1f} |" for k, v in figures["pairs"].items()
        ]
        lines += [f"| {k} (one way) | {v / 1e6:.1f} |" for k, v in figures["directions"].items()]
        lines.append("")
    lines += ["## Verdict", ""]
    lines += [f"- **{f.check}** {f.line()}" for f in findings] or ["Healthy: every check passed."]
    return "\n".join(lines) + "\n"
