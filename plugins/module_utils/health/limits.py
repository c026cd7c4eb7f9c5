"""The health check's judgement of the limits a job unit gets (memlock, nofile): below what NCCL
needs, a job fails at its first collective. Part of the health check (playbooks/check.yml): each
check turns what the nodes reported into Findings (health/findings.py), one failure each, naming
the node or the pair, the measured value, the limit it broke, and what to do about it. Standard
library only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.findings import Finding

# systemd's size suffixes (base 1024), as LimitMEMLOCK= takes them.
_SIZE_SUFFIXES = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def limit_number(value: int | str) -> float:
    """A resource limit as a number: infinity (or unlimited) is math.inf; a size may carry
    systemd's K, M, G or T. ValueError for anything else."""
    text = str(value).strip()
    if text in ("infinity", "unlimited"):
        return math.inf
    if text[-1:].upper() in _SIZE_SUFFIXES and text[:-1].isdigit():
        return int(text[:-1]) * _SIZE_SUFFIXES[text[-1:].upper()]
    if text.isdigit():
        return int(text)
    raise ValueError(f"not a limit: {value!r}")


def _limit_text(key: str, value: int | str) -> str:
    number = limit_number(value)
    if number == math.inf:
        return "unlimited"
    if key != "memlock":
        return f"{number:.0f}"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if number >= size and number % size == 0:
            return f"{number / size:.0f} {unit}"
    return f"{number:.0f} B"


_LIMIT_PROPERTIES = {"memlock": "LimitMEMLOCK", "nofile": "LimitNOFILE"}


_LIMIT_WHY = {
    "memlock": "NCCL over InfiniBand or RoCE fails in ibv_reg_mr under it. ",
    "nofile": "",
}


def limit_findings(
    rows: Mapping[str, Mapping[str, Any]], min_memlock: str = "", min_nofile: int = 0
) -> list[Finding]:
    """Nodes whose job units get a memlock or nofile limit below the minimum: by default what
    the launcher asks for (the probe's transient unit asked the same), so that a unit that
    did not get what it asked for is named."""
    findings = []
    for name, row in rows.items():
        limits = row.get("job_limits") or {}
        if limits.get("error"):
            findings.append(
                Finding(
                    "limits",
                    name,
                    f"a job unit's limits not read ({limits['error']})",
                    "a transient unit's /proc/self/limits",
                    "the launcher starts every job with systemd-run: check systemd on the node "
                    "(systemd-run --wait --pipe true)",
                )
            )
            continue
        asked = limits.get("asked") or {}
        for key, given in (("memlock", min_memlock), ("nofile", min_nofile)):
            minimum = given or asked.get(key)
            if key not in limits or not minimum:
                continue
            floor = limit_number(minimum)
            if limit_number(limits[key]) >= floor:
                continue
            what = f"{_LIMIT_PROPERTIES[key]}={asked.get(key)}" if asked.get(key) else "nothing"
            findings.append(
                Finding(
                    "limits",
                    name,
                    f"{key} {_limit_text(key, limits[key])} in a job unit (it asked for {what})",
                    "unlimited" if floor == math.inf else f"at least {_limit_text(key, minimum)}",
                    f"{_LIMIT_WHY[key]}systemd gives a unit no more than its own hard limit "
                    "where it may not raise it (a container without CAP_SYS_RESOURCE): raise "
                    f"the {key} limit that systemd runs with on {name} (a container's --ulimit "
                    f"{key}={-1 if floor == math.inf else int(floor)}); limits.conf does not "
                    "reach units",
                )
            )
    return findings


def limit_lines(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The limits a job unit gets, one line per node, after what the units ask for."""
    measured = {name: row["job_limits"] for name, row in rows.items() if row.get("job_limits")}
    if not measured:
        return []
    asked = next(iter(measured.values())).get("asked") or {}
    wanted = ", ".join(f"{key} {_limit_text(key, value)}" for key, value in asked.items() if value)
    lines = [f"Job unit limits (asked: {wanted or 'nothing'}):"]
    for name, limits in measured.items():
        if limits.get("error"):
            lines.append(f"  {name}: not read ({limits['error']})")
            continue
        got = ", ".join(f"{key} {_limit_text(key, limits[key])}" for key in _LIMIT_PROPERTIES)
        lines.append(f"  {name}: {got}")
    return lines
