"""The health check's judgement of what real GPU servers add: each GPU's links and slowdowns,
NVLinks and their error counters, XIDs, RDMA ports and their rates, the network path's MTU and
routes, PCIe under load, and the absolute floors (health/floors.py). Part of the health check
(playbooks/check.yml): each check turns what the nodes reported into Findings
(health/findings.py), one failure each, naming the node or the pair, the measured value, the
limit it broke, and what to do about it. Standard library only: it runs on the nodes' system
Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.findings import Finding
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.floors import (
    below_floors,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.gpu import (
    gpu_health_problems,
    nvlink_error_growth,
    parse_nvlink_errors,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.net_path import (
    path_problems,
)


def hardware_findings(rows: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """Each GPU's narrow PCIe link, slowdown or persistence mode off, NVLinks down, XIDs since
    boot, RDMA ports down or without RoCE v2, and a node whose RDMA ports are slower than most
    nodes'."""
    findings = []
    for name, row in rows.items():
        for found, wanted, fix in gpu_health_problems(row.get("gpu_details") or []):
            findings.append(Finding("gpus", name, found, wanted, fix))
        for gpu, links in (row.get("nvlinks_inactive") or {}).items():
            findings.append(
                Finding(
                    "gpus",
                    name,
                    f"GPU {gpu} NVLinks {', '.join(map(str, links))} inactive",
                    "every NVLink active",
                    "check the baseboard and the fabric manager (nvidia-fabricmanager); "
                    "drain the node and reset the GPUs",
                )
            )
        xids = row.get("xids") or []
        if xids:
            shown = "; ".join(xids[:3]) + (f" and {len(xids) - 3} more" if len(xids) > 3 else "")
            findings.append(
                Finding(
                    "gpus",
                    name,
                    f"{len(xids)} XID event(s) since boot: {shown}",
                    "none (but those of applications)",
                    "look the XIDs up in NVIDIA's XID catalogue; drain the node, reset the GPU "
                    "or reboot",
                )
            )
        failed = row.get("dcgm_failures") or []
        if failed:
            findings.append(
                Finding(
                    "gpus",
                    name,
                    f"DCGM's quick diagnostic failed: {'; '.join(failed)}",
                    "every test passes",
                    "run dcgmi diag -r 2 on the node for detail; drain it and have the GPUs "
                    "checked",
                )
            )
        for found, wanted, fix in fabric_problems(row.get("rdma_ports") or []):
            findings.append(Finding("fabric", name, found, wanted, fix))
    rates = {name: fabric_rate(row.get("rdma_ports") or []) for name, row in rows.items()}
    for name, (rate, common) in odd_rates(rates).items():
        findings.append(
            Finding(
                "fabric",
                name,
                f"fastest RDMA port {rate:g} Gb/s",
                f"{common:g} Gb/s, as on most nodes",
                "check the port's cable and the switch port's speed (ibstat)",
            )
        )
    return findings


def path_findings(
    paths: Mapping[str, Mapping[str, Any]], addresses: Mapping[str, str]
) -> list[Finding]:
    """The network path's MTU, don't-fragment pings, routes and hostnames, by node."""
    return [
        Finding("network", subject, found, wanted, fix)
        for subject, found, wanted, fix in path_problems(paths, addresses)
    ]


def node_traits(
    rows: Mapping[str, Mapping[str, Any]], transports: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """What a floor row can match on, by node: GPU model and count, fastest RDMA port's rate,
    and NCCL's transport."""
    return {
        name: {
            "gpu": row.get("gpu_model") or "",
            "gpus": int(row.get("driver_gpus") or 0),
            "nic_rate_gbps": fabric_rate(row.get("rdma_ports") or []),
            "transport": transports.get(name, ""),
        }
        for name, row in rows.items()
    }


def floor_findings(
    figures: Mapping[str, Any],
    rows: Mapping[str, Mapping[str, Any]],
    transports: Mapping[str, str],
    floors: Sequence[Mapping[str, Any]],
) -> list[Finding]:
    """Each figure of the collectives below the floor that binds for its node or pair."""
    measured = {
        "pair_busbw_gbs": dict(figures.get("pairs") or {}),
        "node_allreduce_busbw_gbs": dict(figures.get("inside_nodes") or {}),
        "h2d_gbs": dict(figures.get("h2d") or {}),
    }
    return [
        Finding("floors", found["subject"], found["value"], found["limit"], found["fix"])
        for found in below_floors(measured, node_traits(rows, transports), floors)
    ]


def parse_pcie_rows(text: str) -> list[dict[str, Any]]:
    """The collectives' nvidia-smi reading under load: index, bus id, current and maximum
    generation (the host's maximum where the driver gives it), current and maximum width."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) not in (6, 7) or not cells[0].isdigit():
            continue
        numbers = [int(cell) if cell.isdigit() else None for cell in cells[2:]]
        gen, gen_max = numbers[0], numbers[1]
        if len(cells) == 7 and numbers[2]:
            gen_max = min(value for value in (gen_max, numbers[2]) if value)
        rows.append(
            {
                "index": cells[0],
                "bus_id": cells[1],
                "gen": gen,
                "gen_max": gen_max,
                "width": numbers[-2],
                "width_max": numbers[-1],
            }
        )
    return rows


def pcie_load_findings(readings: Mapping[str, str]) -> list[Finding]:
    """A GPU whose PCIe link ran below its generation while it copied (an idle GPU lowers it
    to save power, so only this reading under load is judged)."""
    findings = []
    for name, text in readings.items():
        for row in parse_pcie_rows(text):
            if row["gen"] and row["gen_max"] and row["gen"] < row["gen_max"]:
                findings.append(
                    Finding(
                        "gpus",
                        name,
                        f"GPU {row['index']} ({row['bus_id']}) PCIe Gen{row['gen']} under load",
                        f"Gen{row['gen_max']}",
                        "check the slot's generation in the BIOS, the riser and the GPU's seating",
                    )
                )
    return findings


def nvlink_error_findings(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, str]
) -> list[Finding]:
    """Each NVLink whose error counters grew while the collectives loaded it: the probe's
    reading from before them (parsed) against the collectives' reading after them (text).
    Counts since the driver loaded are not judged: an old burst says nothing of the link now."""
    findings = []
    for name, text in after.items():
        grown = nvlink_error_growth(before.get(name) or {}, parse_nvlink_errors(text))
        links: dict[tuple[str, str], list[str]] = {}
        for gpu, link, counter, growth, count in grown:
            links.setdefault((gpu, link), []).append(f"{counter} +{growth} (now {count})")
        for (gpu, link), counters in links.items():
            findings.append(
                Finding(
                    "gpus",
                    name,
                    f"GPU {gpu} NVLink {link} errors grew under the check's load: "
                    + ", ".join(counters),
                    "no new NVLink errors",
                    "drain the node; reset the GPUs (nvidia-smi -r) and run the check again; if "
                    "they grow again, have the baseboard or the NVLink bridge replaced",
                )
            )
    return findings


def fabric_rate(ports: Sequence[Mapping[str, Any]]) -> float | None:
    """The rate of the node's fastest active RDMA port, Gb/s (None without one)."""
    rates = [p["rate_gbps"] for p in ports if p.get("state") == "ACTIVE" and p.get("rate_gbps")]
    return max(rates) if rates else None


def fabric_problems(ports: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(found, wanted, fix) for each RDMA port that is not active, and each RoCE port
    without a RoCE v2 GID."""
    problems = []
    for port in ports:
        label = f"{port['device']} port {port['port']}"
        if port.get("state") != "ACTIVE":
            problems.append(
                (
                    f"{label} {port.get('state') or 'state unknown'}",
                    "ACTIVE",
                    "check its cable and the switch port (ibstat, ibv_devinfo)",
                )
            )
        elif port.get("link_layer") == "Ethernet" and not port.get("roce_v2"):
            problems.append(
                (
                    f"{label} (RoCE) has no RoCE v2 GID",
                    "a RoCE v2 GID with an address",
                    "give the interface its IP address; set NCCL_IB_GID_INDEX to the v2 GID",
                )
            )
    return problems


def odd_rates(rates: Mapping[str, float | None]) -> dict[str, tuple[float, float]]:
    """Nodes whose fastest RDMA port is slower than most nodes' (node -> (its, most's))."""
    known = {name: rate for name, rate in rates.items() if rate}
    if len(known) < 2:
        return {}
    values = sorted(known.values())
    common = max(set(values), key=values.count)
    return {name: (rate, common) for name, rate in known.items() if rate < common}
