"""After an attempt: restart or not, and the messages the user reads."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempts import (
    Attempt,
    teardown_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.failures import RankFailure
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.messages import (
    final_message,
    restart_message,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.restarts import (
    decide_restart,
    time_left,
    training_started,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import FAILED
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.watch import (
    JOB_FAILED,
    JOB_STOPPED,
    JOB_SUCCEEDED,
    JOB_TIMED_OUT,
    JOB_UNWATCHABLE,
)


def attempt(outcome: str = JOB_FAILED, **changes: Any) -> Attempt:
    values: dict[str, Any] = {
        "number": 1,
        "outcome": outcome,
        "nodes": {
            "node0": {"state": FAILED, "detail": "torchrun exit status 1"},
            "node1": {"state": FAILED, "detail": "torchrun killed by SIGKILL"},
        },
        "failed_nodes": ["node1", "node0"],
        "training_started": True,
        "seconds": 42.0,
        "tails": {
            "node1": "[rank1]: step 3\n",
            "node0": "[rank0]: RuntimeError: Connection closed by peer\n",
        },
        # node1's worker was killed; node0's lost its peer.
        "failures": [
            RankFailure("node1", 1, 0, -9, 100.0, "killed by SIGKILL").as_dict(),
            RankFailure(
                "node0",
                0,
                0,
                1,
                100.0,
                "RuntimeError: Connection closed by peer",
                traceback="Traceback (most recent call last):\nRuntimeError: Connection closed",
                consequence=True,
            ).as_dict(),
        ],
    }
    values.update(changes)
    return Attempt(**values)


def report(
    attempts: list[Attempt],
    job_id: str = "j",
    timeout: int = 0,
    max_restarts: int = 0,
    stop_hint: str = "stop",
) -> str:
    run_dir = f"/runs/{job_id}"
    return final_message(
        job_id,
        attempts,
        run_dir=run_dir,
        timeout=timeout,
        max_restarts=max_restarts,
        stop_hint=stop_hint,
    )


# (the attempt, train_max_restarts, seconds left of the time limit, words of why not; None: restart)
DECISIONS = {
    "a failure in training restarts": (attempt(), 1, -1, None),
    "the last restart is used": (attempt(number=2), 2, -1, None),
    "no restarts asked for": (attempt(), 0, -1, "train_max_restarts is 0"),
    "restarts used up": (attempt(number=2), 1, -1, "restarted 1 time(s) already"),
    "a failure at start-up": (attempt(training_started=False), 3, -1, "failed at start-up"),
    "a node stopped answering": (
        attempt(unreachable_nodes=["node1"]), 3, -1, "does not restart on fewer nodes"),
    "a node is not clean": (
        attempt(teardown_problems=["node1: processes of the job are left: 77 python3"]), 3, -1,
        "not clean after the stop"),
    "success": (attempt(JOB_SUCCEEDED), 3, -1, "it succeeded"),
    "stop.yml": (attempt(JOB_STOPPED), 3, -1, "stopped by playbooks/stop.yml"),
    "time limit": (attempt(JOB_TIMED_OUT), 3, -1, "time limit"),
    "no time left": (attempt(), 3, 0, "no time is left"),
    "time left": (attempt(), 3, 100, None),
    "unwatchable master": (attempt(JOB_UNWATCHABLE), 3, -1, "could not be watched"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("tried", "restarts", "left", "why"), DECISIONS.values(), ids=list(DECISIONS)
)
def test_a_job_restarts_only_after_a_failure_in_training_with_every_node_clean(
    tried: Attempt, restarts: int, left: int, why: str | None
) -> None:
    decision = decide_restart(tried, restarts, startup_timeout=300, seconds_left=left)
    if why is None:
        assert decision is None
    else:
        assert decision is not None
        assert why in decision


@pytest.mark.parametrize(
    ("timeout", "started", "now", "left"),
    [(0, 100.0, 5000.0, -1), (600, 100.0, 160.5, 539), (600, 100.0, 900.0, 0)],
)
def test_the_time_limit_counts_from_the_first_attempt(
    timeout: int, started: float, now: float, left: int
) -> None:
    assert time_left(timeout, started, now) == left


# Each node's result of the stop, as Ansible registers it.
TEARDOWN = {
    "clean": ({"changed": True, "leftovers": [], "port_users": []}, [], []),
    "unreachable": ({"unreachable": True, "msg": "timed out"}, ["node1"], []),
    "skipped (the watch found it unreachable)": ({"skipped": True}, ["node1"], []),
    "stop failed": ({"failed": True, "msg": "denied"}, [], ["could not be stopped"]),
    "leftovers": ({"leftovers": ["77 python3 train.py"]}, [], ["processes of the job are left"]),
    "port taken": ({"leftovers": [], "port_users": ["88 nc -l"]}, [], ["master port is in use"]),
}  # fmt: skip


@pytest.mark.parametrize(("result", "lost", "words"), TEARDOWN.values(), ids=list(TEARDOWN))
def test_the_stop_results_tell_unreachable_and_unclean_nodes(
    result: dict[str, Any], lost: list[str], words: list[str]
) -> None:
    unreachable, problems = teardown_problems({"node0": {"leftovers": []}, "node1": result})
    assert unreachable == lost
    assert len(problems) == len(words)
    for problem, word in zip(problems, words, strict=True):
        assert problem.startswith("node1: ")
        assert word in problem


def test_the_restart_message_names_the_node_the_reason_and_the_attempt() -> None:
    message = restart_message("job7", attempt(), max_restarts=2)
    assert (
        "attempt 1: failed after 42 s: node1, rank 1 (local rank 0): killed by SIGKILL "
        "(first of 2 failures)."
    ) in message
    assert "restart 1 of 2" in message


def test_a_failed_job_reports_every_attempt_and_the_first_failed_nodes_log() -> None:
    first, second = attempt(restarted=True), attempt(number=2, not_restarted_because="used up")
    message = report([first, second], job_id="job7", max_restarts=1)
    lines = message.splitlines()
    assert lines[0] == "Job job7 failed; it is stopped on every node."
    assert "It was restarted 1 time(s); each attempt:" in lines
    assert sum(line.startswith("  attempt ") for line in lines) == 2
    assert "Not restarted again: used up." in lines
    first = lines.index("First failure: node1, rank 1 (local rank 0): killed by SIGKILL")
    assert lines[first + 1 : first + 5] == [
        "  Last lines of node1's log:",
        "    [rank1]: step 3",
        "Then, as consequences:",
        "  node0, rank 0 (local rank 0): RuntimeError: Connection closed by peer",
    ]
    assert lines[-1] == "Logs: /runs/job7/ (attempts.json, failure.json)"


def test_a_first_failure_with_a_traceback_shows_it_instead_of_the_log() -> None:
    raised = RankFailure(
        "node1", 2, 0, 1, 5.0, "ValueError: boom",
        traceback="Traceback (most recent call last):\n  File \"t.py\", line 7\nValueError: boom",
    )  # fmt: skip
    lines = report([attempt(failures=[raised.as_dict()])]).splitlines()
    start = lines.index("First failure: node1, rank 2 (local rank 0): ValueError: boom")
    assert lines[start + 1 : start + 4] == [
        "    Traceback (most recent call last):",
        '      File "t.py", line 7',
        "    ValueError: boom",
    ]
    assert "Last lines of" not in "\n".join(lines)


@pytest.mark.parametrize(
    ("outcome", "words"),
    [(JOB_TIMED_OUT, "Job j timed out after 30 s;"),
     (JOB_STOPPED, "Job j was stopped by playbooks/stop.yml;"),
     (JOB_UNWATCHABLE, "Job j could not be watched;")],
)  # fmt: skip
def test_the_message_says_how_the_job_ended(outcome: str, words: str) -> None:
    assert report([attempt(outcome)], timeout=30).startswith(words)


def test_an_unreachable_node_gets_the_way_to_stop_it_later() -> None:
    unreachable = RankFailure("node1", -1, -1, 0, 0.0, "unreachable (no answer within 8 s)")
    lost = attempt(
        unreachable_nodes=["node1"], failed_nodes=["node1"], failures=[unreachable.as_dict()]
    )
    message = report([lost], stop_hint="ansible-playbook playbooks/stop.yml -e job_id=j")
    assert "it is stopped on every node that answers." in message
    assert "node1: unreachable (no answer within 8 s)" in message
    assert "run ansible-playbook playbooks/stop.yml -e job_id=j when node1 answers again" in message


def test_a_start_up_failure_says_why_it_was_not_restarted() -> None:
    early = attempt(training_started=False, not_restarted_because="it failed at start-up (...)")
    assert "Not restarted: it failed at start-up" in report([early], max_restarts=2)


def test_without_restarts_asked_for_the_message_does_not_talk_of_them() -> None:
    plain = attempt(not_restarted_because="train_max_restarts is 0")
    assert "restart" not in report([plain]).lower()


@pytest.mark.parametrize(
    ("progress", "written", "seconds", "started"),
    [
        (False, False, 299, False),  # a bad argument, an import error: fails the same way again
        (True, False, 5, True),  # rank 0 printed a progress line
        (False, True, 5, True),  # a script with its own format wrote its snapshot
        (False, False, 300, True),  # it ran past train_startup_timeout
    ],
)
def test_training_has_started_by_a_progress_line_a_file_written_or_the_attempts_age(
    progress: bool, written: bool, seconds: float, started: bool
) -> None:
    assert training_started(progress, written, seconds, 300) is started


def test_a_start_up_failure_names_every_sign_it_lacked() -> None:
    why = decide_restart(attempt(training_started=False), max_restarts=1, startup_timeout=300)
    assert why == (
        "it failed at start-up (before rank 0 printed a progress line or the job wrote a file in "
        "its output folder, within train_startup_timeout=300 s): a restart would fail the same "
        "way"
    )
