"""The health check's judgement of GPUs, fabric, paths and floors (playbooks/check.yml).

cluster_health.py judges what every cluster has (versions, connections, clocks, bandwidth
against the cluster's own figures); this judges what real GPU servers add: each GPU's links
and slowdowns, NVLinks, XIDs, RDMA ports, the network path's MTU and routes, and the absolute
floors (check_floors). Each returns cluster_health Findings. Standard library only.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

# From the repository (ansible.cfg's module_utils path), else from the installed
# torch_cluster.cluster collection.
try:
    from ansible.module_utils.check_floors import below_floors
    from ansible.module_utils.cluster_health import Finding
    from ansible.module_utils.gpu_health import (
        fabric_problems,
        fabric_rate,
        gpu_health_problems,
        nvlink_error_growth,
        odd_rates,
        parse_nvlink_errors,
    )
    from ansible.module_utils.net_path import path_problems
except ImportError:
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.check_floors import (
        below_floors,
    )
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.cluster_health import (
        Finding,
    )
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.gpu_health import (
        fabric_problems,
        fabric_rate,
        gpu_health_problems,
        nvlink_error_growth,
        odd_rates,
        parse_nvlink_errors,
    )
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.net_path import (
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
