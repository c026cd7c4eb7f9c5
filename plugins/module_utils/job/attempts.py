"""One attempt of a job (one start of its units) and how it ended, as attempts.json records it, the
options that name it there, and what the nodes' stops said of it. Standard library only: it runs
on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.failures import RankFailure
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.gpu_release import (
    held_problem,
)


@dataclass
class Attempt:
    """One start of the job's units, and how it ended."""

    number: int
    outcome: str  # a JOB_* verdict
    nodes: dict[str, dict[str, object]] = field(default_factory=dict)  # name -> NodeState dict
    failed_nodes: list[str] = field(default_factory=list)  # first failure first
    unreachable_nodes: list[str] = field(default_factory=list)
    training_started: bool = False
    started_at: float = 0.0  # seconds since the epoch, by the controller's clock
    seconds: float = 0.0
    tails: dict[str, str] = field(default_factory=dict)
    error: str = ""  # why the master could not be watched, or a node's unit not started
    teardown_problems: list[str] = field(default_factory=list)
    # Every failed process (RankFailure.as_dict()), the first failure first.
    failures: list[dict[str, Any]] = field(default_factory=list)
    restarted: bool = False
    not_restarted_because: str = ""
    # Without a shared folder: what keeping the output folders in step cost before and after
    # the attempt (torch_job_sync's seconds, bytes, files, transfers, by phase).
    sync: dict[str, Any] = field(default_factory=dict)
    # The attempt's nodes in rank order; the nodes it lost (name -> why), the spares that took
    # their places (lost -> spare), and the next attempt's nodes (when it restarts).
    nodes_used: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, str] = field(default_factory=dict)
    next_nodes: list[str] = field(default_factory=list)
    # Where its rank 0 found the job's files (its checkpoint) at the start.
    resumed_from: str = ""
    # A stalled attempt: where each rank was (torch_job_stall.stall_outliers) and the stacks.
    stall: dict[str, Any] = field(default_factory=dict)
    # Copies of the master's output folder made while it ran (no shared folder).
    copies_during: list[dict[str, Any]] = field(default_factory=list)
    # When each node was last heard from (seconds since the epoch, the controller's clock), and
    # when the lost ones had all fenced themselves (job/fence.py:fence_until; 0: nothing to wait).
    heard: dict[str, float] = field(default_factory=dict)
    fence_until: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)

    @property
    def first_failure(self) -> RankFailure | None:
        return RankFailure(**self.failures[0]) if self.failures else None


def attempt_argument_spec() -> dict[str, dict[str, Any]]:
    """The options that name an attempt in the job's attempts file (torch_job_started,
    torch_job_record), as the doc fragment torch_cluster.cluster.job_attempt documents them."""
    return {
        "path": {"type": "path", "required": True},
        "job_id": {"type": "str", "required": True},
        "attempt": {"type": "int", "required": True},
        "nodes": {"type": "list", "elements": "str", "required": True},
        "max_restarts": {"type": "int", "default": 0},
    }


def teardown_problems(teardown: Mapping[str, Mapping[str, object]]) -> tuple[list[str], list[str]]:
    """(unreachable nodes, other problems) from every node's stop result (torch_job_unit
    state=absent, or Ansible's own result for a node it could not reach or skipped)."""
    unreachable, problems = [], []
    for name, result in teardown.items():
        if result.get("unreachable"):
            unreachable.append(name)
        elif result.get("skipped"):
            unreachable.append(name)  # the watch had found it unreachable
        elif result.get("failed"):
            problems.append(
                f"{name}: the job could not be stopped: {result.get('msg', 'no reason given')}"
            )
        else:
            left = list(result.get("leftovers") or [])
            if left:
                problems.append(f"{name}: processes of the job are left: " + "; ".join(left[:5]))
            held = result.get("gpu_held") or {}
            if held:
                waited = float(result.get("gpu_release_seconds") or 0)  # type: ignore[arg-type]
                memory = {int(pid): int(mib) for pid, mib in held.items()}  # type: ignore[union-attr]
                problems.append(held_problem(name, memory, waited))
            if result.get("port_users"):
                problems.append(
                    f"{name}: the master port is in use by {', '.join(result['port_users'])}"  # type: ignore[arg-type]
                )
    return unreachable, problems
