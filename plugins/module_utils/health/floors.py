"""Absolute floors for the health check's figures, beside its relative rules.

The relative rules (a fraction of the cluster's baseline, or of the median of its pairs) pass a
cluster that is slow everywhere: every node on TCP instead of InfiniBand, every GPU on a narrow
PCIe link. A floor is a figure that a kind of server must reach, whatever the rest of the
cluster does. The table (roles/check/vars/floors.yml) keeps published figures with their
sources; the inventory's check_floors overrides a row by its name, or adds rows.

A row applies to a node when all of its match keys hold:

- gpu: a part of the node's GPU model, as nvidia-smi names it ("H100"), any case;
- gpus: the node's number of GPUs;
- nic_rate_gbps: the rate of the node's fastest active RDMA port (Gb/s);
- transport: the network transport NCCL chose ("IB", "Socket").

A row without match keys applies to every node. Where several rows set the same figure for a
node, the highest floor binds. Floors are in GB/s (10^9 bytes per second).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# The figures a floor can set: what the check measures, and what to do when it falls short.
METRICS = {
    "node_allreduce_busbw_gbs": (
        "all_reduce busbw over every GPU of the node",
        "check its NVLink (nvidia-smi nvlink -s, nvidia-smi topo -m) and its GPUs' PCIe links",
    ),
    "h2d_gbs": (
        "host-to-GPU copy",
        "check the GPUs' PCIe links (generation and width) and the CPU and NUMA binding",
    ),
    "pair_busbw_gbs": (
        "all_reduce busbw between two nodes (one rank each: one NIC)",
        "check the NIC's rate (ibstat, ethtool), its cable and switch port, and that NCCL uses "
        "NET/IB (NCCL_DEBUG=INFO)",
    ),
}


MATCH_KEYS = {"gpu": str, "gpus": int, "nic_rate_gbps": (int, float), "transport": str}


OTHER_KEYS = {"name", "source"}


def floor_problems(rows: Any, where: str = "check_floors") -> list[str]:
    """One sentence per malformed row: a list of mappings, each with a name, known keys only
    (a misspelt key would silently match every node), positive numbers for the figures."""
    if not isinstance(rows, list):
        return [f"{where} must be a list of floors (got {rows!r})"]
    problems = []
    for index, row in enumerate(rows):
        label = f"{where}[{index}]"
        if not isinstance(row, Mapping):
            problems.append(f"{label} must be a mapping (got {row!r})")
            continue
        if not isinstance(row.get("name"), str) or not row.get("name"):
            problems.append(f"{label} needs a name")
        unknown = sorted(set(row) - set(METRICS) - set(MATCH_KEYS) - OTHER_KEYS)
        if unknown:
            known = ", ".join(sorted([*METRICS, *MATCH_KEYS, *OTHER_KEYS]))
            problems.append(f"{label} has unknown keys {', '.join(unknown)} (known: {known})")
        for key, kind in MATCH_KEYS.items():
            if key in row and (not isinstance(row[key], kind) or isinstance(row[key], bool)):
                problems.append(f"{label}.{key} has the wrong type (got {row[key]!r})")
        for key in METRICS:
            value = row.get(key)
            if key in row and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
            ):
                problems.append(f"{label}.{key} must be a number of GB/s, 0 or more ({value!r})")
    return problems


def merged(table: Sequence[Mapping[str, Any]], overrides: Sequence[Mapping[str, Any]]) -> list:
    """The table with the inventory's rows: one of the same name replaces the table's row,
    the others are added."""
    mine = {row["name"]: row for row in overrides}
    rows = [dict(mine.get(row["name"], row)) for row in table]
    names = {row["name"] for row in table}
    return rows + [dict(row) for row in overrides if row["name"] not in names]


def applies(row: Mapping[str, Any], traits: Mapping[str, Any]) -> bool:
    """Whether every match key of the row holds for a node's traits."""
    for key in MATCH_KEYS:
        if key not in row:
            continue
        have = traits.get(key)
        if key == "gpu":
            if not have or str(row[key]).lower() not in str(have).lower():
                return False
        elif key == "transport":
            if not have or str(row[key]).lower() != str(have).lower():
                return False
        elif have is None or float(row[key]) != float(have):
            return False
    return True


def binding(
    rows: Sequence[Mapping[str, Any]], metric: str, traits: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The row whose floor for the metric binds for the nodes of `traits` (every node must
    match it): the highest one set above 0."""
    found = [
        row
        for row in rows
        if float(row.get(metric) or 0) > 0 and all(applies(row, t) for t in traits)
    ]
    return max(found, key=lambda row: float(row[metric])) if found else None


def floor_text(row: Mapping[str, Any], metric: str) -> str:
    source = f"; source: {row['source']}" if row.get("source") else ""
    return f"{float(row[metric]):g} GB/s, the floor '{row['name']}'{source}"


def below_floors(
    figures: Mapping[str, Mapping[str, float]],
    traits: Mapping[str, Mapping[str, Any]],
    rows: Sequence[Mapping[str, Any]],
) -> list[dict[str, str]]:
    """Each figure below the floor that binds for it: figures maps a metric to subject ->
    bytes/s, where a subject is a node or a pair "a <-> b" (both must match the row). Returns
    dicts with subject, value, limit, fix and metric."""
    found = []
    for metric, values in figures.items():
        what, fix = METRICS[metric]
        for subject, value in values.items():
            nodes = [part.strip() for part in subject.split("<->")]
            row = binding(rows, metric, [traits.get(node, {}) for node in nodes])
            if row is None or value >= float(row[metric]) * 1e9:
                continue
            found.append(
                {
                    "metric": metric,
                    "subject": subject,
                    "value": f"{what} {value / 1e9:.3g} GB/s",
                    "limit": floor_text(row, metric),
                    "fix": fix,
                }
            )
    return found
