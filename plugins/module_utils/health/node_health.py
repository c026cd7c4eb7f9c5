"""The node-local health check that Slurm runs (HealthCheckProgram, and the prolog before a job):
what is wrong with this node, and whether Slurm should drain it or take it back.

The check looks at what a job on this node needs and a bad node breaks: the GPUs the driver
lists against the count Slurm was given, nvidia-smi answering, uncorrectable ECC errors and new
XIDs that are not the application's (gpu_faults.hardware_faults, the launcher's own rule), the
shared folder mounted, and the memlock and nofile limits that slurmd hands to its jobs.
node_health_run.py reads the node and calls scontrol; the decisions are here. Standard library
only: it runs on the nodes' system Python (3.9 on EL9).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.findings import Finding
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.gpu_faults import (
    Xid,
    hardware_faults,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.limits import (
    limit_number,
)

# Every drain this check makes carries this prefix: it takes back only the nodes it drained
# itself, never one that a person or Slurm drained for another reason.
REASON_PREFIX = "torch-cluster health:"

# Slurm keeps a reason of any length; sinfo's and scontrol's tables cut it, so keep it readable.
REASON_MAX = 200


@dataclass(frozen=True)
class Readings:
    """What node_health_run.py read on the node."""

    gpus_expected: int = 0
    gpus_now: int = 0
    # nvidia-smi's (exit status, stdout, stderr); None where it is not installed.
    smi: tuple[int, str, str] | None = None
    xids: Sequence[Xid] = ()
    shared_dir: str = ""
    # None: not looked at (no shared folder); otherwise whether it is a mount point.
    shared_mounted: bool | None = None
    shared_error: str = ""
    # The limits slurmd gives its jobs (its own, which the check inherits): name -> text.
    limits: Mapping[str, str] = field(default_factory=dict)
    min_limits: Mapping[str, str] = field(default_factory=dict)


def node_problems(readings: Readings) -> list[str]:
    """One sentence per problem, the most serious first (GPUs, then storage, then limits)."""
    problems = hardware_faults(
        readings.gpus_expected, readings.gpus_now, readings.smi, readings.xids
    )
    if readings.shared_dir and readings.shared_mounted is not True:
        why = f" ({readings.shared_error})" if readings.shared_error else ""
        problems.append(f"shared folder {readings.shared_dir} not mounted{why}")
    for name, minimum in readings.min_limits.items():
        if not minimum:
            continue
        have = readings.limits.get(name)
        if have is None:
            problems.append(f"{name} limit not read")
        elif limit_number(have) < limit_number(minimum):
            problems.append(f"{name} limit {have} below {minimum}")
    return problems


def drain_reason(problems: Sequence[str]) -> str:
    """Slurm's Reason= for a drain: the prefix, the first problem, and how many more."""
    text = f"{REASON_PREFIX} {problems[0]}"
    if len(problems) > 1:
        text += f" (and {len(problems) - 1} more)"
    text = " ".join(text.split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


@dataclass(frozen=True)
class SlurmNode:
    """The node in Slurm: sinfo's long state (idle, drained, draining, ...) and its reason."""

    state: str
    reason: str

    @property
    def drained(self) -> bool:
        return self.state.startswith("drain")

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


def _slurm_node(state: str, reason: str) -> SlurmNode:
    reason = reason.strip()
    return SlurmNode(state.strip().rstrip("*~#!%$@^-"), "" if reason == "none" else reason)


def parse_sinfo(text: str) -> SlurmNode | None:
    """`sinfo --noheader --nodes=NAME --format=%T|%E` (state|reason); None when empty."""
    for line in text.splitlines():
        if "|" in line:
            return _slurm_node(*line.split("|", 1))
    return None


# `sinfo --noheader --Node --format=...`: every node, its state and reason.
SINFO_NODES_FORMAT = "%N|%T|%E"


def parse_sinfo_nodes(text: str) -> dict[str, dict[str, str]]:
    """`sinfo --noheader --Node --format=SINFO_NODES_FORMAT`: name -> {state, reason}."""
    nodes = {}
    for line in text.splitlines():
        if line.count("|") >= 2:
            name, state, reason = line.split("|", 2)
            node = _slurm_node(state, reason)
            nodes[name.strip()] = {"state": node.state, "reason": node.reason}
    return nodes


def drained_findings(
    slurm_nodes: Mapping[str, Mapping[str, Any]], names: Sequence[str]
) -> list[Finding]:
    """The check's view of Slurm (playbooks/check.yml): each node of the group that Slurm
    drained, or holds down, and why."""
    findings = []
    for name in names:
        node = slurm_nodes.get(name)
        if not node:
            continue
        state, reason = node["state"], node.get("reason", "")
        if not (state.startswith("drain") or state.startswith("down") or "fail" in state):
            continue
        ours = reason.startswith(REASON_PREFIX)
        findings.append(
            Finding(
                "slurm",
                name,
                f"{state} in Slurm" + (f": {reason}" if reason else ""),
                "idle, mixed or allocated",
                "fix what the reason names: the health check takes the node back by itself "
                "once it passes"
                if ours
                else f"fix what the reason names, then: scontrol update NodeName={name} "
                "State=RESUME",
            )
        )
    return findings


def decide(problems: Sequence[str], node: SlurmNode | None) -> tuple[str, str]:
    """("drain", reason), ("resume", reason it had) or ("", why nothing).

    A node with problems is drained with them as its reason, unless it is drained already for
    the same ones or for a reason of someone else's (theirs stays). A node without problems is
    taken back only where this check drained it."""
    if node is None:
        return "", "Slurm does not list this node"
    if problems:
        reason = drain_reason(problems)
        if node.drained and (node.reason == reason or not node.ours):
            return "", f"drained already: {node.reason}"
        return "drain", reason
    if node.drained and node.ours:
        return "resume", node.reason
    return "", "healthy"
