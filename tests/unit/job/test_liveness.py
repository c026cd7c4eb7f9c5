"""A node is lost when it has not answered for train_lost_after seconds, whatever the polls: a
slow answer is an answer, and the count goes on across watch rounds. Through Slurm too."""

from __future__ import annotations

from ansible_collections.torch_cluster.cluster.plugins.action import torch_job_watch as watch_action
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.liveness import Liveness
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.slurm import with_lost_nodes
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    RUNNING,
    SUCCEEDED,
    UNREACHABLE,
    NodeState,
)

RUN = NodeState(RUNNING, "active/running")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_node_silent_longer_than_lost_after_is_lost_and_only_then() -> None:
    clock = Clock()
    live = Liveness(["node0", "node1"], 6, clock=clock)
    live.answered("node0", RUN)
    live.answered("node1", RUN)
    clock.now += 5.9
    live.answered("node0", RUN)
    assert live.states()["node1"].state == RUNNING
    clock.now += 0.2
    states = live.states()
    assert states["node1"].state == UNREACHABLE
    assert "not heard from for 6.1 s (train_lost_after=6)" in states["node1"].detail
    assert states["node0"].state == RUNNING


def test_a_slow_answer_every_2_s_keeps_a_node_in() -> None:
    # An SSH hiccup: each poll takes 2 s more than usual, for 20 s.
    clock = Clock()
    live = Liveness(["node1"], 6, clock=clock)
    for _ in range(10):
        clock.now += 3.0  # the 1 s poll, plus 2 s of delay
        live.answered("node1", RUN)
        assert live.states()["node1"].state == RUNNING


def test_the_silence_carries_over_from_the_last_round() -> None:
    clock = Clock()
    live = Liveness(["node0", "node1"], 6, heard_ago={"node1": 5.0}, clock=clock)
    clock.now += 1.5
    assert live.states()["node1"].state == UNREACHABLE
    assert live.states()["node0"].state == RUNNING
    assert live.heard_ago() == {"node0": 1.5, "node1": 6.5}


def test_a_node_not_polled_yet_runs_and_its_latest_answer_counts() -> None:
    clock = Clock()
    live = Liveness(["node0"], 6, clock=clock)
    assert live.states()["node0"] == NodeState(RUNNING, "not polled yet this round")
    live.answered("node0", NodeState(SUCCEEDED, "exit status 0"))
    assert live.states()["node0"].state == SUCCEEDED


def test_the_controller_gives_the_master_its_calls_length_plus_lost_after(monkeypatch) -> None:
    """The controller's side: a round of 2 s may take 2 s and its overhead; the master is lost
    only once lost_after more has passed without an answer. The other nodes' times come from
    the master's round."""
    clock = Clock()
    monkeypatch.setattr(watch_action.time, "monotonic", clock)
    heard = watch_action._Heard("node0", ["node0", "node1"], 6)
    heard.expect(2)
    clock.now += 2 + heard.OVERHEAD_S + 5.9
    assert not heard.master_lost()
    clock.now += 0.2
    assert heard.master_lost()
    heard.round({"heard_ago": {"node0": 0.1, "node1": 4.0}})
    assert heard.ago() == {"node0": 0.0, "node1": 4.0}
    assert not heard.master_lost()


def test_a_round_waits_for_a_slow_answer_in_flight_and_not_for_a_lost_node() -> None:
    """The round of 2 s ends only once every node has answered in it or is lost: node1's
    answers take 2.5 s, and a round that ended first would never hear one."""
    clock = Clock()
    live = Liveness(["node0", "node1", "node2"], 6, heard_ago={"node2": 3.0}, clock=clock)
    live.answered("node0", RUN)
    clock.now += 2.0
    assert not live.settled()  # node1's first answer is on its way; node2 is not lost yet
    clock.now += 0.5
    live.answered("node1", RUN)
    assert not live.settled()
    clock.now += 0.6  # node2: 6.1 s without an answer, lost
    assert live.settled()


def test_through_slurm_a_silent_node_is_lost_after_lost_after_whatever_slurm_says() -> None:
    """Slurm still calls the job RUNNING (slurmctld waits for its SlurmdTimeout): the node that
    the watch has not heard from for train_lost_after is unreachable, and leads the failure."""
    clock = Clock()
    live = Liveness(["node0", "node1", "node2"], 6, clock=clock)
    slurm = {name: NodeState(RUNNING, "Slurm job RUNNING") for name in ("node0", "node1", "node2")}
    live.answered("node0", RUN)
    live.answered("node2", RUN)
    clock.now += 5.0
    live.answered("node0", RUN)
    live.answered("node2", RUN)
    assert with_lost_nodes(slurm, live.states()) == slurm  # node1 silent 5 s: not yet
    clock.now += 1.5
    live.answered("node0", RUN)
    live.answered("node2", RUN)
    states = with_lost_nodes(slurm, live.states())
    assert list(states) == ["node1", "node0", "node2"]
    assert states["node1"].state == UNREACHABLE
    assert "not heard from for 6.5 s" in states["node1"].detail
    assert states["node0"] == states["node2"] == NodeState(RUNNING, "Slurm job RUNNING")


def test_through_slurm_an_answering_node_keeps_slurms_state() -> None:
    """A node that answers, however its unit looks (there is none through Slurm), has the state
    Slurm gives it: a job that ended stays ended."""
    live = Liveness(["node0", "node1"], 6, clock=Clock())
    live.answered("node0", NodeState("inactive", "no such unit"))
    ended = {
        "node0": NodeState(SUCCEEDED, "torchrun exit status 0 (Slurm: COMPLETED)"),
        "node1": NodeState(SUCCEEDED, "torchrun exit status 0 (Slurm: COMPLETED)"),
    }
    assert with_lost_nodes(ended, live.states()) == ended
