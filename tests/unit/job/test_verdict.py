"""A job's verdict from its nodes' states, and the watch round that polls them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.log_reader import (
    RankZeroLog,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    FAILED,
    RUNNING,
    STOPPED,
    SUCCEEDED,
    TIMED_OUT,
    UNREACHABLE,
    NodeState,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.watch import (
    JOB_FAILED,
    JOB_RUNNING,
    JOB_STALLED,
    JOB_STOPPED,
    JOB_SUCCEEDED,
    JOB_TIMED_OUT,
    Round,
    Verdict,
    first_failure,
    judge,
    watch_round,
)

RUN = NodeState(RUNNING, "active/running")
DONE = NodeState(SUCCEEDED, "exit status 0")
FAIL = NodeState(FAILED, "exit status 1")
TIME = NodeState(TIMED_OUT, "time limit")
GONE = NodeState(STOPPED, "stopped")
LOST = NodeState(UNREACHABLE, "no answer")

# (node0's and node1's states, whether a stop was requested, the verdict, the bad nodes)
JUDGE = {
    "both running": ((RUN, RUN), False, JOB_RUNNING, ()),
    "one finished first": ((DONE, RUN), False, JOB_RUNNING, ()),
    "both finished": ((DONE, DONE), False, JOB_SUCCEEDED, ()),
    "one failed": ((RUN, FAIL), False, JOB_FAILED, ("node1",)),
    "one failed after the other finished": ((DONE, FAIL), False, JOB_FAILED, ("node1",)),
    "both failed": ((FAIL, FAIL), False, JOB_FAILED, ("node0", "node1")),
    "one stopped by hand": ((GONE, RUN), False, JOB_FAILED, ("node0",)),
    "one unreachable": ((RUN, LOST), False, JOB_FAILED, ("node1",)),
    "stop requested": ((GONE, GONE), True, JOB_STOPPED, ("node0", "node1")),
    "stop requested, one failed too": ((FAIL, GONE), True, JOB_STOPPED, ("node0", "node1")),
    "time limit on one": ((TIME, RUN), False, JOB_TIMED_OUT, ("node0",)),
    "time limit wins over a failure": ((TIME, FAIL), False, JOB_TIMED_OUT, ("node0", "node1")),
    "time limit wins over stop.yml": ((TIME, GONE), True, JOB_TIMED_OUT, ("node0", "node1")),
    "a stop request alone is no verdict": ((RUN, RUN), True, JOB_RUNNING, ()),
}  # fmt: skip


@pytest.mark.parametrize(("states", "stop", "job", "bad"), JUDGE.values(), ids=list(JUDGE))
def test_the_verdict_follows_the_nodes(
    states: tuple[NodeState, ...], stop: bool, job: str, bad: tuple[str, ...]
) -> None:
    verdict = judge(dict(zip(("node0", "node1"), states, strict=True)), stop)
    assert verdict == Verdict(job, bad)


class FakeTime:
    """A clock that moves only when the watcher sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def polls(*rounds: tuple[NodeState, NodeState]) -> Iterator[dict[str, NodeState]]:
    for node0, node1 in rounds:
        yield {"node0": node0, "node1": node1}
    while True:  # then as the last poll
        yield {"node0": node0, "node1": node1}


def watch(
    seen: Iterator[dict[str, NodeState]], wait: float = 10, stop: bool = False
) -> tuple[Round, float]:
    time = FakeTime()
    result = watch_round(
        lambda: next(seen), lambda: stop, wait=wait, poll=2, clock=time.clock, sleep=time.sleep
    )
    return result, time.now


def test_a_round_of_a_running_job_ends_after_its_wait() -> None:
    result, elapsed = watch(polls((RUN, RUN)))
    assert result.verdict.job == JOB_RUNNING
    assert elapsed == 10


def test_a_failure_ends_the_round_at_once() -> None:
    result, elapsed = watch(polls((RUN, RUN), (RUN, FAIL)))
    assert result.verdict == Verdict(JOB_FAILED, ("node1",))
    assert (elapsed, result.polls) == (2, 2)


def test_one_missed_poll_is_not_a_failure() -> None:
    result, _ = watch(polls((RUN, LOST), (RUN, RUN)))
    assert result.verdict.job == JOB_RUNNING


def test_two_missed_polls_in_a_row_make_a_node_unreachable() -> None:
    result, elapsed = watch(polls((RUN, RUN), (RUN, LOST), (RUN, LOST)))
    assert result.verdict == Verdict(JOB_FAILED, ("node1",))
    assert result.states["node1"].state == UNREACHABLE
    assert elapsed == 4


def test_a_round_does_not_end_while_a_node_is_undecided() -> None:
    # The miss comes at the deadline: the round polls once more instead of ending, so that
    # the next round does not count that node's misses from zero again.
    result, elapsed = watch(polls((RUN, RUN), (RUN, LOST), (RUN, LOST)), wait=2)
    assert result.verdict == Verdict(JOB_FAILED, ("node1",))
    assert elapsed == 4


def test_a_job_is_not_finished_while_a_node_is_undecided() -> None:
    result, _ = watch(polls((DONE, LOST), (DONE, DONE)), wait=0)
    assert result.verdict.job == JOB_SUCCEEDED
    assert result.polls == 2


def test_a_requested_stop_is_told_from_a_failure() -> None:
    result, _ = watch(polls((GONE, GONE)), stop=True)
    assert result.verdict.job == JOB_STOPPED


def test_the_first_node_to_end_leads_the_failures() -> None:
    states = {
        "node0": NodeState(FAILED, "exit status 1", ended=1000.5),
        "node1": NodeState(FAILED, "killed by SIGKILL", ended=1000.1),
        "node2": NodeState(UNREACHABLE, "no answer"),
        "node3": NodeState(FAILED, "exit status 1", ended=1000.3),
    }
    assert first_failure(states, list(states)) == ["node1", "node3", "node0", "node2"]


def rank0_log(tmp_path: Path, clock: FakeTime, quiet_for: float = 0) -> tuple[Path, RankZeroLog]:
    log = tmp_path / "node.log"
    log.write_text("=== torch-cluster: job j, attempt 1 ===\n")
    return log, RankZeroLog(
        str(log), 0, lambda line: line.startswith("step"), quiet_for, clock=clock.clock
    )


def test_rank_0_quiet_for_the_stall_timeout_stalls_a_running_job(tmp_path: Path) -> None:
    time = FakeTime()
    log, rank0 = rank0_log(tmp_path, time)
    with log.open("a") as out:
        out.write("[rank0]: step 1\n[rank1]: step 1\n")
    result = watch_round(
        lambda: {"node0": RUN, "node1": RUN},
        lambda: False,
        wait=60,
        poll=2,
        clock=time.clock,
        sleep=time.sleep,
        stalled=lambda: rank0.stalled(20),
    )
    assert result.verdict.job == JOB_STALLED
    assert time.now == 20
    assert rank0.progress == "step 1"


def test_other_ranks_lines_do_not_count_and_rank_0s_do(tmp_path: Path) -> None:
    time = FakeTime()
    log, rank0 = rank0_log(tmp_path, time, quiet_for=15)
    time.sleep(4)
    with log.open("a") as out:
        out.write("[rank1]: still here\n")
    assert not rank0.stalled(20)
    assert rank0.quiet_for() == 19
    time.sleep(1)
    with log.open("a") as out:
        out.write("[rank0]: loading shard 3\n")
    assert not rank0.stalled(20)
    assert rank0.quiet_for() == 0
    assert (rank0.last_line, rank0.progress) == ("loading shard 3", "")


def test_a_failure_is_no_stall_and_no_timeout_is_no_watchdog(tmp_path: Path) -> None:
    time = FakeTime()
    _, rank0 = rank0_log(tmp_path, time, quiet_for=1000)
    assert not rank0.stalled(0)
    result = watch_round(
        lambda: {"node0": RUN, "node1": FAIL},
        lambda: False,
        wait=60,
        poll=2,
        clock=time.clock,
        sleep=time.sleep,
        stalled=lambda: True,
    )
    assert result.verdict.job == JOB_FAILED
