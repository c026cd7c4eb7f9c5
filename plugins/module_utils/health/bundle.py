"""The health check's support bundle: each node's versions and diagnostics, the collectives' logs,
the figures in nccl-tests' layout and the report, in one tar.gz. Standard library only: it runs
on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Mapping, Sequence
from typing import Any


def nccl_tests_lines(group: Sequence[Mapping[str, Any]], world_size: int) -> list[str]:
    """The whole group's all_reduce sweep in nccl-tests' all_reduce_perf layout (float32,
    sum; one measurement, in place; nothing checks the results, so #wrong is N/A)."""
    lines = [
        f"# all_reduce over {world_size} ranks, by the health check (in place)",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
    ]
    for row in group:
        lines.append(
            f"{row['size']:>12} {row['size'] // 4:>13} {'float':>9} {'sum':>7} {-1:>7} "
            f"{row['seconds'] * 1e6:>8.1f} {row['algbw'] / 1e9:>7.2f} {row['busbw'] / 1e9:>7.2f}"
            f" {'N/A':>6}"
        )
    return lines


def write_bundle(path: str, files: Mapping[str, str]) -> int:
    """A tar.gz of the files (name inside -> text); the number of files written."""
    with tarfile.open(path, "w:gz") as bundle:
        for name, text in sorted(files.items()):
            data = text.encode("utf-8", "replace")
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            bundle.addfile(info, io.BytesIO(data))
    return len(files)


def bundle_files(
    rows: Mapping[str, Mapping[str, Any]],
    logs: Mapping[str, str],
    report: Mapping[str, Any],
    figures: Mapping[str, Any],
    world_size: int,
) -> dict[str, str]:
    """What goes into the support bundle: each node's versions and diagnostics, the
    collectives' node logs (NCCL_DEBUG=INFO), the figures in nccl-tests' layout, and the
    report itself."""
    files = {"report.json": json.dumps(report, indent=2) + "\n"}
    if figures.get("group"):
        files["all_reduce_perf.txt"] = "\n".join(nccl_tests_lines(figures["group"], world_size))
    for name, row in rows.items():
        versions = {k: v for k, v in row.items() if k != "diagnostics"}
        files[f"nodes/{name}/versions.json"] = json.dumps(versions, indent=2) + "\n"
        for file, text in (row.get("diagnostics") or {}).items():
            files[f"nodes/{name}/{file}"] = text
        if logs.get(name):
            files[f"nodes/{name}/collectives.log"] = logs[name]
    return files
