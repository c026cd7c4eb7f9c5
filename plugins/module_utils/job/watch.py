"""The job's verdict over its nodes, and one round of the master's watch: one bad node decides the
job (the others would wait for it until a collective times out), a node that misses two polls in
a row is taken for lost, and a job whose rank 0 is quiet too long has stalled. Standard library
only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    SUCCEEDED,
    TIMED_OUT,
    UNREACHABLE,
    NodeState,
)

JOB_RUNNING = "running"


JOB_SUCCEEDED = "succeeded"


JOB_FAILED = "failed"


JOB_STOPPED = "stopped"  # by playbooks/stop.yml


JOB_TIMED_OUT = "timed out"


JOB_UNWATCHABLE = "unwatchable"  # the master could not be asked


# Rank 0 printed nothing for train_stall_timeout seconds while every unit ran.
JOB_STALLED = "stalled"


@dataclass(frozen=True)
class Verdict:
    job: str
    bad_nodes: tuple[str, ...] = ()


def judge(states: Mapping[str, NodeState], stop_requested: bool) -> Verdict:
    """The job's state from its nodes' (unreachable here means: decided unreachable).

    One bad node decides the job: torchrun on the others would wait for it until a
    collective times out. A time limit wins over everything (it stops every node); a
    requested stop over a failure (stopping the units makes them look failed)."""
    bad = tuple(name for name, node in states.items() if node.bad)
    if any(node.state == TIMED_OUT for node in states.values()):
        return Verdict(JOB_TIMED_OUT, bad)
    if bad:
        return Verdict(JOB_STOPPED if stop_requested else JOB_FAILED, bad)
    if states and all(node.state == SUCCEEDED for node in states.values()):
        return Verdict(JOB_SUCCEEDED)
    return Verdict(JOB_RUNNING)


@dataclass
class Round:
    """One watch round: polls until the job ends or `wait` seconds pass."""

    verdict: Verdict
    states: dict[str, NodeState]
    polls: int


def watch_round(
    poll_all: Callable[[], dict[str, NodeState]],
    stop_requested: Callable[[], bool],
    *,
    wait: float,
    poll: float,
    unreachable_polls: int = 2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stalled: Callable[[], bool] = lambda: False,
    news: Callable[[], bool] = lambda: False,
    min_wait: float = 0.0,
    settled: Callable[[], bool] = lambda: True,
) -> Round:
    """Poll every node until the job ends, or `wait` seconds pass.

    A node that does not answer `unreachable_polls` polls in a row is taken for dead. A
    round does not end while a node has missed fewer polls than that: it is decided
    first, so that the count never restarts from zero in a new round. A job that runs on
    every node but `stalled()` holds for (rank 0 silent too long) ends the round as stalled.
    A running job's round also ends once `min_wait` seconds have passed and `news()` holds
    (rank 0's new lines to show, when the controller follows them). A running job's round
    ends at `wait` only once `settled()` holds (every node answered in this round or is lost:
    a slow answer in flight is not thrown away with the round)."""
    misses: dict[str, int] = {}
    begun = clock()
    deadline = begun + wait
    polls = 0
    while True:
        states = poll_all()
        polls += 1
        for name, node in states.items():
            misses[name] = misses.get(name, 0) + 1 if node.state == UNREACHABLE else 0
        decided = {
            name: node
            for name, node in states.items()
            if node.state != UNREACHABLE or misses[name] >= unreachable_polls
        }
        undecided = len(decided) < len(states)
        verdict = judge(
            decided, stop_requested() if any(n.bad for n in decided.values()) else False
        )
        if undecided and verdict.job == JOB_SUCCEEDED:
            verdict = Verdict(JOB_RUNNING)
        if verdict.job == JOB_RUNNING and not undecided and stalled():
            verdict = Verdict(JOB_STALLED)
        if verdict.job != JOB_RUNNING or (clock() >= deadline and not undecided and settled()):
            return Round(verdict, states, polls)
        if not undecided and clock() >= begun + min_wait and news() and settled():
            return Round(verdict, states, polls)
        sleep(poll)


def first_failure(states: Mapping[str, NodeState], bad: Sequence[str]) -> list[str]:
    """The bad nodes, the one whose unit ended first leading (the others mostly followed it:
    torchrun stops a node's workers when a peer's connection breaks). Nodes with no end
    time (unreachable, gone) come last, in their given order. The times come from each
    node's own clock, so the order is as good as the nodes' clock sync."""
    ended = [name for name in bad if states[name].ended > 0]
    rest = [name for name in bad if name not in ended]
    return sorted(ended, key=lambda name: states[name].ended) + rest
