"""Which nodes run a job's next attempt after one of them was lost.

A node is lost when it stops answering, or when it answers but its GPUs failed (a GPU gone from
the driver, a new XID, uncorrectable ECC errors: plugins/module_utils/health/gpu_faults.py). A
job that lost nodes goes on when train_spare_group holds a spare for each (the spare takes the
lost node's place and rank, so the world size stays the same), or when the nodes left number at
least train_min_nodes (they are recounted in inventory order, the first becoming the master). A
node that left is never used again in the same job. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodePlan:
    """The next attempt's nodes in rank order ([] when the job cannot go on), the lost nodes
    with why each left, the spares that take their places, and why the job stops."""

    nodes: list[str]
    left: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, str] = field(default_factory=dict)
    why_not: str = ""


def _names(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


def plan_nodes(
    current: Sequence[str],
    lost: Mapping[str, str],
    *,
    spares: Sequence[str],
    excluded: Sequence[str],
    job_size: int,
    min_nodes: int,
    indispensable: Mapping[str, str] | None = None,
) -> NodePlan:
    """The nodes of the next attempt after `current` (this attempt's, in rank order) lost
    `lost` (name -> why). `spares`: the spare group's nodes, in inventory order; `excluded`:
    the nodes that left in earlier attempts; `job_size`: the nodes the job started with;
    `min_nodes`: train_min_nodes (0: the job never runs on fewer than job_size);
    `indispensable`: nodes no attempt can start without (name -> what they do), such as the
    one that runs Slurm's controller."""
    lost = {name: why for name, why in lost.items() if name in current}
    if not lost:
        return NodePlan(list(current))
    needed = [name for name in lost if name in (indispensable or {})]
    if needed:
        why_not = "; ".join(
            f"{name} {lost[name]}: it {indispensable[name]}, and no attempt starts without it"
            for name in needed
        )
        return NodePlan([], dict(lost), {}, why_not)
    available = [
        name for name in spares if name not in excluded and name not in current and name not in lost
    ]
    nodes: list[str] = []
    replaced: dict[str, str] = {}
    for name in current:
        if name not in lost:
            nodes.append(name)
        elif available:
            replaced[name] = available.pop(0)
            nodes.append(replaced[name])
    required = min_nodes or job_size
    if len(nodes) >= required:
        return NodePlan(nodes, dict(lost), replaced)
    what = "; ".join(f"{name} {why}" for name, why in lost.items())
    spare_note = f", and no spare is left in train_spare_group ({_names(spares)})" if spares else ""
    if min_nodes:
        why_not = (
            f"{what}: {len(nodes)} node(s) would be left{spare_note}, fewer than "
            f"train_min_nodes={min_nodes}"
        )
    else:
        why_not = (
            f"{what}: the job does not restart on fewer nodes than its {job_size}{spare_note} "
            "(set train_min_nodes to go on with fewer, or train_spare_group for spare nodes)"
        )
    return NodePlan([], dict(lost), replaced, why_not)


def excluded_nodes(attempts: Sequence[Mapping[str, object]]) -> list[str]:
    """Every node that left the job in the attempts recorded so far."""
    found: list[str] = []
    for attempt in attempts:
        for name in attempt.get("left") or {}:  # type: ignore[union-attr]
            if name not in found:
                found.append(name)
    return found


def resumed_from(sync_before: Mapping[str, object], master: str, shared_dir: str) -> str:
    """Where an attempt's rank 0 found the job's files (its checkpoint among them): the shared
    folder, the other nodes' newer copies that the master fetched before the start, or the
    master's own folder."""
    if shared_dir:
        return f"the shared folder {shared_dir}"
    transfers = sync_before.get("transfers") or []
    fetched = [
        str(t["from"])
        for t in transfers  # type: ignore[union-attr]
        if t.get("to") == master and not t.get("error") and t.get("files")
    ]
    if fetched:
        return f"the newest copies, fetched by {master} from {_names(sorted(set(fetched)))}"
    return f"{master}'s own output folder"


def lost_nodes(
    current: Sequence[str],
    unreachable: Sequence[str],
    hardware: Mapping[str, Sequence[str]],
) -> dict[str, str]:
    """This attempt's lost nodes, in rank order, with why: no answer, or a hardware fault."""
    lost: dict[str, str] = {}
    for name in current:
        if name in unreachable:
            lost[name] = "stopped answering"
        elif hardware.get(name):
            lost[name] = "failed on hardware: " + "; ".join(hardware[name])
    return lost
