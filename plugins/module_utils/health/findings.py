"""What the cluster health check (playbooks/check.yml) finds about every cluster's nodes: a Finding
is one failure, naming the node or the pair, the measured value, the limit it broke and what to
do about it. This file holds the Finding and the checks of what every node must share
(environment, versions, GPUs, reach, clocks, leftover jobs, disk). Standard library only: it
runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# What must be the same on every node: a collective between different builds fails or hangs.
MUST_MATCH = ("torch", "cuda", "nccl", "python")


PROVISION_HINT = "run playbooks/provision.yml"


@dataclass(frozen=True)
class Finding:
    # versions, environment, gpus, reachability, clock, leftovers, disk, limits, collectives,
    # slurm
    check: str
    subject: str  # a node, or a pair "node0 -> node1"
    value: str  # what was measured
    limit: str  # what it should have been
    fix: str

    def line(self) -> str:
        return f"{self.subject}: {self.value} (limit: {self.limit}); {self.fix}"

    def as_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


def _majority(values: Mapping[str, str]) -> str:
    counts: dict[str, int] = {}
    for value in values.values():
        counts[value] = counts.get(value, 0) + 1
    return max(counts, key=lambda value: (counts[value], value))


def environment_findings(rows: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """Nodes whose training environment is missing or does not import torch."""
    return [
        Finding(
            "environment",
            name,
            row.get("torch_error") or "no training environment",
            "torch imports in the training environment",
            PROVISION_HINT + " for this node",
        )
        for name, row in rows.items()
        if not row.get("torch")
    ]


def version_findings(rows: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """A build that differs from the other nodes' names the odd node (the majority wins; on
    a tie every node is named)."""
    findings = []
    with_env = {name: row for name, row in rows.items() if row.get("torch")}
    for key in MUST_MATCH:
        values = {name: str(row.get(key) or "none") for name, row in with_env.items()}
        if len(set(values.values())) < 2:
            continue
        common = _majority(values)
        tie = list(values.values()).count(common) * 2 <= len(values)
        for name, value in values.items():
            if tie or value != common:
                findings.append(
                    Finding(
                        "versions",
                        name,
                        f"{key} {value}",
                        f"{key} {common} as on the others",
                        "set the same pytorch_* versions for every node and " + PROVISION_HINT,
                    )
                )
    return findings


def gpu_findings(rows: Mapping[str, Mapping[str, Any]], nproc: Mapping[str, str]) -> list[Finding]:
    findings = []
    for name, row in rows.items():
        driver, seen = int(row.get("driver_gpus") or 0), int(row.get("torch_gpus") or 0)
        if driver and row.get("torch") and seen < driver:
            findings.append(
                Finding(
                    "gpus",
                    name,
                    f"torch sees {seen} of {driver} GPUs",
                    f"{driver}",
                    "install an NVIDIA driver new enough for the CUDA build, or pick an older "
                    "pytorch_cuda_variant",
                )
            )
        wanted = str(nproc.get(name, "auto"))
        if driver and wanted.isdigit() and int(wanted) > driver:
            findings.append(
                Finding(
                    "gpus",
                    name,
                    f"nproc {wanted}",
                    f"at most {driver} (its GPUs)",
                    "lower nproc for this host",
                )
            )
        for key, what in (
            ("ecc_uncorrected", "uncorrectable ECC errors"),
            ("remaps_pending", "pending row remaps"),
        ):
            if int(row.get(key) or 0) > 0:
                findings.append(
                    Finding(
                        "gpus",
                        name,
                        f"{row[key]} {what}",
                        "0",
                        "drain the node and reset or replace the GPU",
                    )
                )
    return findings


def reach_findings(results: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Finding]:
    """Each connection a node could not open to a peer, as "node0 -> node1: port P blocked"."""
    return [
        Finding(
            "reachability",
            f"{name} -> {attempt['peer']}",
            f"port {attempt['port']} blocked ({attempt['outcome']})",
            "connected",
            f"the firewall of {attempt['peer']} must trust {name}: is {name} in the training "
            f"group, and was playbooks/provision.yml run since? (firewall-cmd "
            f"--zone=torch-cluster --list-sources on {attempt['peer']})",
        )
        for name, attempts in results.items()
        for attempt in attempts
        if attempt["outcome"] != "connected"
    ]


def clock_findings(offsets: Mapping[str, float | None], master: str, limit: float) -> list[Finding]:
    findings = []
    for name, offset in offsets.items():
        if offset is None:
            findings.append(
                Finding(
                    "clock",
                    name,
                    "not measured (no answer over SSH)",
                    f"within {limit:g} s of {master}",
                    "check SSH trust from the master (provision.yml)",
                )
            )
        elif abs(offset) > limit:
            findings.append(
                Finding(
                    "clock",
                    name,
                    f"{offset:+.3f} s from {master}",
                    f"within {limit:g} s",
                    "enable time sync (chronyd) on every node",
                )
            )
    return findings


def leftover_findings(rows: Mapping[str, Mapping[str, Any]], port: int) -> list[Finding]:
    findings = []
    for name, row in rows.items():
        for unit in row.get("units") or []:
            findings.append(
                Finding(
                    "leftovers",
                    name,
                    f"job unit {unit} still active",
                    "none",
                    "ansible-playbook playbooks/stop.yml -e job_id="
                    + unit.removeprefix("torch-job-").removesuffix(".service"),
                )
            )
        for process in row.get("processes") or []:
            findings.append(
                Finding(
                    "leftovers",
                    name,
                    f"training process left: {process}",
                    "none",
                    "stop its job (playbooks/stop.yml) or kill the process",
                )
            )
        for user in row.get("port_users") or []:
            findings.append(
                Finding(
                    "leftovers",
                    name,
                    f"master port {port} in use by {user}",
                    "free",
                    "stop what listens there, or choose another cluster_master_port",
                )
            )
    return findings


def disk_findings(rows: Mapping[str, Mapping[str, Any]], min_free_gib: float) -> list[Finding]:
    return [
        Finding(
            "disk",
            name,
            f"{row['disk_free_gib']:.1f} GiB free in {row.get('disk_path', '')}",
            f"at least {min_free_gib:g} GiB",
            "free space, or set train_node_base_dir elsewhere",
        )
        for name, row in rows.items()
        if row.get("disk_free_gib") is not None and row["disk_free_gib"] < min_free_gib
    ]
