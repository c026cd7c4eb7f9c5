"""The health check's judgement of the collectives: the transport NCCL chose, the pairs measured
round by round, and the bandwidth of every node and pair against the cluster's own figures and
baseline. Part of the health check (playbooks/check.yml): each check turns what the nodes
reported into Findings (health/findings.py), one failure each, naming the node or the pair, the
measured value, the limit it broke, and what to do about it. Standard library only: it runs on
the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.findings import Finding


def transport_findings(
    rows: Mapping[str, Mapping[str, Any]], transports: Mapping[str, str]
) -> list[Finding]:
    """NCCL over sockets where RDMA NICs exist: the job runs, at a fraction of its speed."""
    return [
        Finding(
            "collectives",
            name,
            f"NCCL transport {transports[name]}",
            "IB (RDMA NICs present)",
            "install the RDMA userspace (rdma-core) and check NCCL_IB_HCA; see NCCL_DEBUG=INFO",
        )
        for name, row in rows.items()
        if row.get("rdma_nics") and transports.get(name, "").lower().startswith("socket")
    ]


def round_robin(names: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every pair of nodes exactly once, in rounds of disjoint pairs (the circle method):
    n - 1 rounds for an even n, n for an odd one."""
    players: list[str | None] = list(names) + ([None] if len(names) % 2 else [])
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return [r for r in rounds if r]


def bandwidth_findings(
    measured: Mapping[str, float],
    baseline: Mapping[str, float],
    fraction_of_baseline: float,
    fraction_of_median: float,
    what: str,
) -> list[Finding]:
    """Figures (subject -> bytes/s) below a fraction of the cluster's saved baseline, or,
    without one, below a fraction of the median of the same figures."""
    if not measured:
        return []
    median = statistics.median(measured.values())
    findings = []
    for subject, value in measured.items():
        if subject in baseline:
            limit, why = (
                fraction_of_baseline * baseline[subject],
                f"{fraction_of_baseline:.0%} of the baseline",
            )
        else:
            limit, why = fraction_of_median * median, f"{fraction_of_median:.0%} of the median"
        if value < limit:
            findings.append(
                Finding(
                    "collectives",
                    subject,
                    f"{what} {_rate(value)}",
                    f"{_rate(limit)}, {why}",
                    "check that link: cabling, NIC speed (ethtool), traffic shaping (tc), "
                    "and NCCL_SOCKET_IFNAME",
                )
            )
    return findings


def slow_nodes(direction_findings: Sequence[Finding], nodes: Sequence[str]) -> list[Finding]:
    """A node all of whose sends (or receives) are slow is the slow one, not its links. A
    slow receiver whose slow receives all come from slow senders is not blamed twice; with
    two nodes the check cannot tell one's sending from the other's receiving, and says so."""
    slow = {finding.subject: finding for finding in direction_findings}

    def all_slow(subjects: list[str]) -> bool:
        return bool(subjects) and all(subject in slow for subject in subjects)

    senders = [n for n in nodes if all_slow([f"{n} -> {p}" for p in nodes if p != n])]
    found = []
    for node in nodes:
        peers = [peer for peer in nodes if peer != node]
        receives = [f"{peer} -> {node}" for peer in peers]
        for side, subjects in (
            ("sends", [f"{node} -> {p}" for p in peers]),
            ("receives", receives),
        ):
            if not all_slow(subjects):
                continue
            if side == "receives" and all(peer in senders for peer in peers):
                continue
            values = "; ".join(f"{s}: {slow[s].value}" for s in subjects)
            note = (
                f" (or {peers[0]} {'receives' if side == 'sends' else 'sends'} slowly: with two "
                "nodes the check cannot tell which)"
                if len(nodes) == 2
                else ""
            )
            found.append(
                Finding(
                    "collectives",
                    node,
                    f"{side} slowly to every peer{note}: {values}",
                    slow[subjects[0]].limit,
                    f"{node}'s network is the slow part: check its NIC, its link speed (ethtool) "
                    "and any traffic shaping (tc)",
                )
            )
    return found


def nccl_transport(log: str) -> str:
    """The network transport NCCL chose, from its NCCL_DEBUG=INFO lines ("via NET/IB/0",
    "via NET/Socket/0"); "" when the log has none (gloo, or one node)."""
    found = re.search(r"via NET/([A-Za-z]+)", log)
    return found.group(1) if found else ""


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e6:.1f} MB/s"


def collective_figures(report: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The collectives script's report, by node name: the group's sweep, each pair's busbw at
    the largest size, each direction's one-way bandwidth and, where measured, each node's
    all_reduce over all its ranks, its slowest GPU's host-to-GPU copy, its PCIe reading under
    load and its NVLink error counters after the load (nvidia-smi nvlink -e's text)."""
    pairs, directions = {}, {}
    for key, result in report.get("pairs", {}).items():
        a, b = (names[int(i)] for i in key.split("-"))
        pairs[f"{a} <-> {b}"] = result["sweep"][-1]["busbw"]
        if "forward" in result:
            directions[f"{a} -> {b}"] = result["forward"]
        if "backward" in result:
            directions[f"{b} -> {a}"] = result["backward"]
    by_node = {
        key: {names[int(node)]: value for node, value in (report.get(key) or {}).items()}
        for key in ("inside_nodes", "h2d", "pcie_under_load", "nvlink_errors_after")
    }
    inside = {name: row["busbw"] for name, row in by_node["inside_nodes"].items()}
    return {
        "group": report.get("group", []),
        "pairs": pairs,
        "directions": directions,
        "inside_nodes": inside,
        "h2d": by_node["h2d"],
        "pcie_under_load": by_node["pcie_under_load"],
        "nvlink_errors_after": by_node["nvlink_errors_after"],
    }


def collective_findings(
    figures: Mapping[str, Any],
    baseline: Mapping[str, Any],
    names: Sequence[str],
    fraction_of_baseline: float,
    fraction_of_median: float,
) -> list[Finding]:
    """Slow nodes first (all their sends or receives slow), then slow directions and pairs."""

    def against_baseline(key: str, what: str) -> list[Finding]:
        return bandwidth_findings(
            figures[key], baseline.get(key, {}), fraction_of_baseline, fraction_of_median, what
        )

    directions = against_baseline("directions", "one way")
    pairs = against_baseline("pairs", "all_reduce busbw")
    group = {}
    if figures["group"] and baseline.get("group"):
        group = {"the whole group": figures["group"][-1]["busbw"]}
    whole = bandwidth_findings(
        group,
        {"the whole group": baseline.get("group", 0.0)},
        fraction_of_baseline,
        1.0,
        "all_reduce busbw",
    )
    return [*slow_nodes(directions, names), *directions, *pairs, *whole]
