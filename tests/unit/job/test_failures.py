"""Which rank failed first, from torchrun's summaries of a failed run, and what followed.

The data files hold torchrun's summaries as torch 2.14 prints them (node1's was printed on the
sandbox by a script that raised ValueError on rank 2; the frames are shortened)."""

from __future__ import annotations

import time
from pathlib import Path

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.failures import (
    RankFailure,
    failure_report,
    job_failures,
    merge_tails,
    nodes_by_failure,
    order_failures,
    parse_torchrun_failures,
    script_traceback,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.logs import last_lines
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    FAILED,
    STOPPED,
    UNREACHABLE,
)

DATA = Path(__file__).parents[1] / "data"


def summary(node: str) -> list[RankFailure]:
    return parse_torchrun_failures((DATA / f"torchrun_summary_{node}.log").read_text(), node)


def at(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%d_%H:%M:%S"))


def test_a_raised_exception_is_read_with_its_rank_time_and_traceback() -> None:
    failures = {f.rank: f for f in summary("node1")}
    raised = failures[2]
    assert (raised.node, raised.local_rank, raised.exitcode) == ("node1", 0, 1)
    assert raised.message == "ValueError: boom from rank 2"
    assert raised.time == at("2026-12-03_09:23:50")
    assert raised.traceback.startswith("Traceback (most recent call last):")
    assert raised.traceback.splitlines()[-1] == "ValueError: boom from rank 2"
    assert not raised.consequence


def test_a_worker_that_torchrun_stopped_after_a_lost_peer_is_a_consequence() -> None:
    stopped = {f.rank: f for f in summary("node1")}[3]
    assert stopped.exitcode == -15
    assert stopped.message.startswith("RuntimeError: [")
    assert stopped.message.endswith("; then killed by SIGTERM")
    assert stopped.consequence


def test_a_killed_worker_is_named_with_its_signal() -> None:
    (killed,) = summary("node0")
    assert (killed.rank, killed.exitcode, killed.message) == (0, -9, "killed by SIGKILL")
    assert killed.traceback == ""
    assert not killed.consequence


def test_a_log_without_a_summary_has_no_failures() -> None:
    assert parse_torchrun_failures("[rank0]: progress 1\n[rank0]: done\n", "node0") == []


def test_the_first_failure_leads_and_the_consequences_follow() -> None:
    lost = "RuntimeError: Connection closed by peer"
    peer_lost = RankFailure("node0", 0, 0, 1, at("2026-12-03_09:23:50"), lost, consequence=True)
    ordered = order_failures([*summary("node1"), peer_lost])
    assert [(f.node, f.rank) for f in ordered] == [("node1", 2), ("node0", 0), ("node1", 3)]


def test_the_failed_nodes_lead_with_the_first_failures_node_not_the_first_unit_to_end() -> None:
    """node1's rank was killed; node0's torchrun saw the broken connection and its unit ended
    first. The watch listed node0 first (by end time); node1 leads once the failures are read."""
    killed = RankFailure("node1", 1, 0, -9, at("2026-12-03_09:23:51"), "killed by SIGKILL")
    lost = "RuntimeError: Connection closed by peer"
    peer_lost = RankFailure("node0", 0, 0, 1, at("2026-12-03_09:23:50"), lost, consequence=True)
    failures = order_failures([peer_lost, killed])
    assert nodes_by_failure(["node0", "node1"], failures) == ["node1", "node0"]
    # A failed node with no failure read (its log unread) keeps its place after the others.
    assert nodes_by_failure(["node2", "node0", "node1"], failures) == ["node1", "node0", "node2"]
    assert nodes_by_failure(["node0", "node1"], []) == ["node0", "node1"]


def test_a_node_whose_workers_left_no_summary_counts_by_its_unit() -> None:
    nodes = {
        "node0": {"state": FAILED, "detail": "torchrun exit status 1", "ended": 10.0},
        "node1": {"state": UNREACHABLE, "detail": "no answer within 8 s", "ended": 0.0},
        "node2": {"state": STOPPED, "detail": "stopped before it ended", "ended": 9.0},
    }
    failures = job_failures(nodes, {})
    assert [f.describe() for f in failures] == [
        "node0: failed (torchrun exit status 1)",
        "node1: unreachable (no answer within 8 s)",
    ]


def test_the_report_shows_the_first_failures_traceback_and_lists_the_others() -> None:
    lines = failure_report(order_failures(summary("node1")), {"node1": "[rank2]: x\n"})
    assert lines[0] == "First failure: node1, rank 2 (local rank 0): ValueError: boom from rank 2"
    assert "    ValueError: boom from rank 2" in lines
    assert lines[-2] == "Then, as consequences:"
    assert lines[-1].startswith("  node1, rank 3 (local rank 1): RuntimeError: [")


def test_the_traceback_shown_leaves_out_the_launchers_wrapper() -> None:
    recorded = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/opt/env/lib/python3.11/site-packages/torch/distributed/elastic/'
            'multiprocessing/errors/__init__.py", line 380, in wrapper',
            "    return f(*args, **kwargs)",
            '  File "/var/lib/torch-cluster/jobs/j/record_errors.py", line 14, in main',
            '    runpy.run_path(script, run_name="__main__")',
            '  File "<frozen runpy>", line 291, in run_path',
            '  File "/var/lib/torch-cluster/code/abc/fail.py", line 7, in <module>',
            "    raise ValueError(boom)",
            "ValueError: boom",
        ]
    )
    assert script_traceback(recorded) == [
        "Traceback (most recent call last):",
        '  File "/var/lib/torch-cluster/code/abc/fail.py", line 7, in <module>',
        "    raise ValueError(boom)",
        "ValueError: boom",
    ]


def test_a_nodes_last_lines_are_its_workers_or_else_torchruns() -> None:
    log = "=== header ===\n[rank1]: loading\n[rank1]: error: bad\nE1204 torchrun: failed\n"
    assert last_lines(log, 1) == "[rank1]: error: bad\n"
    assert last_lines("E1204 torchrun: failed\n", 5) == "E1204 torchrun: failed\n"
    assert last_lines("", 5) == ""


def test_the_stops_last_lines_complete_those_the_watcher_read() -> None:
    # The watcher saw node1 fail while node0 still ran; node0 failed first by its ranks' own
    # times, and only its stop read its log: every failed node has its lines.
    watched = {"node1": "[rank1]: error: bad\n"}
    stopped = {"node0": "[rank0]: error: bad\n", "node1": "[rank1]: error: bad\n", "node2": ""}
    assert merge_tails(watched, stopped) == {
        "node0": "[rank0]: error: bad\n",
        "node1": "[rank1]: error: bad\n",
    }
    # A node that did not answer the stop keeps what the watcher read.
    assert merge_tails({"node2": "(lines)\n"}, {"node2": ""}) == {"node2": "(lines)\n"}
