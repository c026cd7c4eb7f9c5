"""The health check's judgement of the shared folder on every node: mounted, the same on every
node, writable. Part of the health check (playbooks/check.yml): each check turns what the nodes
reported into Findings (health/findings.py), one failure each, naming the node or the pair, the
measured value, the limit it broke, and what to do about it. Standard library only: it runs on
the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.findings import Finding
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.report import cell
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.mounts import (
    describe_mount,
)


def shared_findings(shared: Mapping[str, Any], min_free_gib: float) -> list[Finding]:
    """The shared folder's proof (plugins/modules/shared_dir_proof.py): each node that cannot
    write there or sees another filesystem, and a folder short of free space."""
    path = shared.get("path", "")
    findings = [
        Finding(
            "shared folder",
            problem["node"],
            problem["problem"],
            f"every node writes to {path} and reads every node's file there",
            "mount the shared folder there (playbooks/provision.yml), or check its permissions",
        )
        for problem in shared.get("problems") or []
    ]
    free = [w["free_gib"] for w in (shared.get("writes") or {}).values() if w.get("ok")]
    if free and min(free) < min_free_gib:
        findings.append(
            Finding(
                "shared folder",
                path,
                f"{min(free):.1f} GiB free",
                f"at least {min_free_gib:g} GiB",
                "free space on the shared folder's server",
            )
        )
    return findings


def shared_lines(shared: Mapping[str, Any]) -> list[str]:
    """The shared folder, one line per node: what is mounted there, its free space and the
    node's write throughput."""
    if not shared:
        return []
    lines = [f"Shared folder {shared['path']}:"]
    for name, wrote in (shared.get("writes") or {}).items():
        if "ok" not in wrote:
            lines.append(f"  {name}: no answer")
            continue
        where = describe_mount(wrote.get("mount") or {})
        speed = wrote.get("write_mb_s")
        lines.append(
            f"  {name}: {where}, {cell(wrote.get('free_gib'))} GiB free, "
            + (f"write {speed:.1f} MB/s" if speed is not None else "write not measured")
            + ("" if wrote.get("ok") else f" (cannot write: {wrote.get('error')})")
        )
    return lines
