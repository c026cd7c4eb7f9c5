"""The plan of a job's attempt: which nodes run it, in rank order, which is the master, each
node's node_rank, and where the code and the data must go first.

The training group (train_nodes: name -> cluster address, in inventory order) minus the spares
(train_spare_group) is the job's first set of nodes; after a lost node, torch_job_record names the
next attempt's nodes (job/lost_nodes.py), and this plans that attempt the same way. A node's
node_rank is its index in the attempt's nodes, and the first is the master. Only the nodes whose
copies differ from the controller's get the code and the data: the job's nodes, then the spares
(one may take a lost node's place in any attempt); the code goes from node to node when it is
large (train_code_spread_mb) and more than one node lacks it. Standard library
only: it runs on the controller (the torch_job_plan action).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MIB = 1 << 20


@dataclass(frozen=True)
class AttemptPlan:
    """One attempt's nodes and where the job's files go."""

    attempt: int
    names: list[str]  # the attempt's nodes, in rank order: the first is the master
    start_names: list[str]  # the nodes the job started on (train_nodes without the spares)
    spares: list[str]  # train_nodes in the spare group, in inventory order
    addresses: dict[str, str] = field(default_factory=dict)  # the attempt's nodes' addresses
    code_hosts: list[str] = field(default_factory=list)  # nodes and spares that lack the code
    code_spreads: bool = False  # the code goes from node to node
    data_hosts: list[str] = field(default_factory=list)  # nodes and spares that lack the data
    world_size: int = 0  # the ranks over the attempt's nodes (0: the nodes' nproc not known)
    gpus_per_node: int = 0  # the GPUs of each of the attempt's nodes; 0 when they differ
    resumes: bool = False  # the attempt continues from the checkpoint

    @property
    def master(self) -> str:
        return self.names[0] if self.names else ""

    @property
    def ranks(self) -> dict[str, int]:
        return {name: rank for rank, name in enumerate(self.names)}

    def as_dict(self) -> dict[str, object]:
        return {
            **self.__dict__,
            "master": self.master,
            "master_address": self.addresses.get(self.master, ""),
            "ranks": self.ranks,
        }


def start_nodes(nodes: Sequence[str], spare_hosts: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the nodes the job starts on, the spares): train_nodes split by the spare group, both in
    inventory order."""
    spares = [name for name in nodes if name in spare_hosts]
    return [name for name in nodes if name not in spares], spares


def lacking(names: Sequence[str], hosts: Sequence[str], current: Mapping[str, bool]) -> list[str]:
    """The nodes, in the given order, that the play still runs on and whose copy differs from
    the controller's (current[name] false)."""
    return [name for name in names if name in hosts and not current.get(name, False)]


def common_count(counts: Sequence[int]) -> int:
    """The count every node has (the nodes' GPUs for Slurm's --gpus-per-node); 0 when they
    differ or none is known."""
    return counts[0] if len(set(counts)) == 1 else 0


def plan_attempt(
    nodes: Mapping[str, str],
    spare_hosts: Sequence[str],
    *,
    attempt: int = 1,
    next_nodes: Sequence[str] | None = None,
    checks: Mapping[str, Mapping[str, object]] | None = None,
    hosts: Sequence[str] = (),
    code_bytes: int = 0,
    code_spread_mb: int = 32,
    resume: bool = False,
) -> AttemptPlan:
    """The plan of attempt `attempt`. `nodes`: train_nodes (name -> address, inventory order);
    `spare_hosts`: the spare group's hosts; `next_nodes`: the attempt's nodes as
    torch_job_record named them (None for the first attempt: the nodes without the spares);
    `checks`: each node's preflight result (torch_job_preflight: code_current, data_current,
    nproc, gpus), where known; `hosts`: the play's hosts that still run; `code_bytes`: the code's
    size; `resume`: train_resume."""
    start, spares = start_nodes(list(nodes), spare_hosts)
    names = list(start if next_nodes is None else next_nodes)
    unknown = [name for name in names if name not in nodes]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} not in train_nodes ({', '.join(nodes)})")
    checks = checks or {}
    checked = [checks[name] for name in names if checks.get(name)]
    # The spares too: a spare that takes a lost node's place trains with these copies.
    staged = names + [name for name in spares if name not in names]
    code_hosts = lacking(staged, hosts, {n: bool(c.get("code_current")) for n, c in checks.items()})
    data_hosts = lacking(staged, hosts, {n: bool(c.get("data_current")) for n, c in checks.items()})
    complete = checked and len(checked) == len(names)
    return AttemptPlan(
        attempt=attempt,
        names=names,
        start_names=start,
        spares=spares,
        addresses={name: nodes[name] for name in names},
        code_hosts=code_hosts if checks else [],
        code_spreads=bool(checks) and len(code_hosts) > 1 and code_bytes >= code_spread_mb * MIB,
        data_hosts=data_hosts if checks else [],
        world_size=sum(int(c.get("nproc") or 0) for c in checked) if complete else 0,
        gpus_per_node=common_count([int(c.get("gpus") or 0) for c in checked]) if complete else 0,
        resumes=resume or attempt > 1,
    )
