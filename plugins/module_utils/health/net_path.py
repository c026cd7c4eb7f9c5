"""The network path's problems, from what health/net_probe.py found on each node: an MTU that
differs along a path, a full-size packet that does not cross, a route through another interface,
the node's hostname on a loopback address (a classic cause of ranks advertising 127.0.1.1 to
their peers). Standard library only: it runs on the nodes' system Python (3.9 on EL9) and on the
controller.
"""

from __future__ import annotations

from collections.abc import Mapping


def common_mtu(mtus: Mapping[str, int | None]) -> int | None:
    """The cluster's MTU: the most common one; on a tie, the largest (jumbo frames are set on
    purpose, a node left at the default is the one to fix)."""
    values = [mtu for mtu in mtus.values() if mtu]
    if not values:
        return None
    return max(set(values), key=lambda mtu: (values.count(mtu), mtu))


def path_problems(
    reports: Mapping[str, Mapping], addresses: Mapping[str, str]
) -> list[tuple[str, str, str, str]]:
    """(subject, found, wanted, fix) for: a node whose training interface's MTU differs from
    the cluster's, a pair whose full-size don't-fragment echo is lost, a route toward a peer
    that leaves from another address than the node's cluster address, and a hostname that
    resolves to loopback."""
    problems = []
    mtus = {
        name: next((p["mtu"] for p in report.get("paths", {}).values() if p.get("mtu")), None)
        for name, report in reports.items()
    }
    common = common_mtu(mtus)
    for name, mtu in mtus.items():
        if mtu and common and mtu != common:
            problems.append(
                (
                    name,
                    f"MTU {mtu} on its training interface",
                    f"{common}, as on the other nodes",
                    "set the same MTU on every node's training interface (and the switch)",
                )
            )
    for name, report in reports.items():
        for peer, path in report.get("paths", {}).items():
            subject = f"{name} -> {peer}"
            if path.get("df") not in ("ok", "skipped (IPv6)"):
                problems.append(
                    (
                        subject,
                        f"a {path.get('mtu')}-byte don't-fragment ping: {path.get('df')}",
                        "answered",
                        "the path's MTU is smaller than the interface's: set the same MTU on "
                        "both nodes and every switch between them",
                    )
                )
            if not path.get("own_source"):
                problems.append(
                    (
                        subject,
                        f"the route leaves by {path.get('dev')} from {path.get('src')}",
                        f"from its cluster address {addresses.get(name)}",
                        "fix the routes, or give cluster_address the address that routes to "
                        "the peers",
                    )
                )
        for loop in report.get("loopback_hostname", []):
            problems.append(
                (
                    name,
                    f"its hostname resolves to {loop}",
                    "its cluster address",
                    "map the hostname to the cluster address in /etc/hosts (or DNS)",
                )
            )
    return problems
