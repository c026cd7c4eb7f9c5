"""The job list (jobs.yml) and the log reader (logs.yml): from the launcher's records and the
nodes' logs and units."""

from __future__ import annotations

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import read_tail
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.listing import (
    NodeJob,
    job_row,
    job_rows,
    job_table,
    log_lines,
    scan_node_log,
)

HEADER = (
    "=== torch-cluster: job {job}, attempt {attempt}, node {node} (node_rank {rank}), "
    "started 2026-12-05T10:0{attempt}:00+00:00 ==="
)


def node_log(job: str, node: str, parts: list[tuple[int, int, list[str]]]) -> str:
    lines = []
    for attempt, rank, body in parts:
        lines.append(HEADER.format(job=job, attempt=attempt, node=node, rank=rank))
        lines += body
    return "\n".join(lines) + "\n"


def progress(line: str) -> bool:
    return line.startswith("epoch ")


def test_a_node_log_gives_its_newest_attempt_and_rank_0s_lines() -> None:
    text = node_log(
        "j1",
        "node1",
        [
            (1, 1, ["[rank1]: epoch 1 loss 2.0"]),
            (2, 0, ["[rank0]: epoch 3 loss 1.0", "[rank0]: saving", "[rank1]: epoch 3 loss 9"]),
        ],
    )
    job = scan_node_log("j1", text, progress)
    assert (job.attempt, job.node_rank, job.started) == (2, 0, "2026-12-05T10:02:00+00:00")
    assert (job.last_line, job.progress) == ("saving", "epoch 3 loss 1.0")


def test_a_slurm_jobs_node_log_gives_its_attempt_and_rank_0s_progress() -> None:
    # attempt-slurm.yml's header (written when the node's part is made ready), then the step's.
    text = (
        "=== torch-cluster: job j2, attempt 1, node node0 (node_rank 0), submitted to Slurm "
        "2026-12-07T06:08:29+00:00 ===\n"
        "=== torch-cluster: job j2, attempt 1, Slurm job 7, node node0 (node_rank 0) ===\n"
        "[rank0]: epoch 4 loss 0.5\n"
    )
    job = scan_node_log("j2", text, progress)
    assert (job.attempt, job.node_rank, job.progress) == (1, 0, "epoch 4 loss 0.5")
    assert job.started == "2026-12-07T06:08:29+00:00"


def test_a_log_without_a_header_gives_no_attempt() -> None:
    job = scan_node_log("j1", "torchrun: starting\n", progress)
    assert (job.attempt, job.node_rank, job.last_line) == (0, -1, "")


def record(*outcomes: str, launcher: str = "systemd") -> dict:
    attempts = [
        {
            "number": n,
            "outcome": o,
            "nodes_used": ["node0", "node1"],
            "started_at": 1_780_000_000.0 + n * 100,
            "seconds": 50.0,
        }
        for n, o in enumerate(outcomes, start=1)
    ]
    return {"job_id": "j", "launcher": launcher, "world_size": 4, "attempts": attempts}


def nodes(unit: str = "", attempt: int = 1) -> dict[str, NodeJob]:
    return {
        "node0": NodeJob("j", attempt, 0, "x", unit, "epoch 2", "epoch 2"),
        "node1": NodeJob("j", attempt, 1, "x", unit, "", ""),
    }


@pytest.mark.parametrize(
    ("outcomes", "unit", "state"),
    [
        (("running",), "active/running", "running"),
        (("running",), "", "interrupted"),
        # The launcher's units remain after their process exits, until it removes them.
        (("running",), "active/exited", "interrupted"),
        (("running",), "failed/failed", "interrupted"),
        (("succeeded",), "", "succeeded"),
        (("failed",), "", "failed"),
        (("failed", "stalled"), "", "stalled"),
        (("stopped",), "", "stopped"),
        (("timed out",), "", "timed out"),
        (("unwatchable",), "", "failed"),
        # Between two attempts: the record holds the first's outcome, the units run the next.
        (("failed",), "activating/start", "running"),
    ],
)
def test_the_state_comes_from_the_record_and_the_units(outcomes, unit, state) -> None:
    row = job_row("j", record(*outcomes), nodes(unit, len(outcomes)))
    assert row.state == state
    assert row.attempt == len(outcomes)
    assert (row.launcher, row.world_size, row.nodes) == ("systemd", 4, ["node0", "node1"])
    assert row.progress == "epoch 2"
    assert row.started == "2026-05-28T20:28:20+00:00"
    assert bool(row.ended) == (state not in ("running", "interrupted"))


def test_a_slurm_jobs_record_says_running_without_units() -> None:
    row = job_row("j", record("running", launcher="slurm"), nodes(""))
    assert (row.state, row.launcher) == ("running", "slurm")


def test_a_job_without_a_record_here_is_known_by_its_units() -> None:
    assert job_row("j", None, nodes("active/running")).state == "running"
    unknown = job_row("j", None, nodes(""))
    assert (unknown.state, unknown.nodes, unknown.started) == ("unknown", ["node0", "node1"], "x")


def test_rows_put_the_newest_job_first_and_the_table_aligns() -> None:
    records = {"old": record("succeeded"), "new": record("running")}
    records["new"]["attempts"][0]["started_at"] += 10_000
    node_jobs = {"node0": [NodeJob("new", 1, 0, "s", "active/running", "epoch 9").as_dict()]}
    rows = job_rows(records, node_jobs)
    assert [(r.job_id, r.state) for r in rows] == [("new", "running"), ("old", "succeeded")]
    table = job_table(rows).splitlines()
    assert table[0].split() == [
        "JOB",
        "STATE",
        "LAUNCHER",
        "NODES",
        "WORLD",
        "TRY",
        "STARTED",
        "ENDED",
        "PROGRESS",
    ]
    assert table[1].split()[:3] == ["new", "running", "systemd"]
    assert table[1].index("running") == table[0].index("STATE")
    assert table[1].endswith("epoch 9")


def test_log_lines_pick_a_rank_and_an_attempt() -> None:
    text = node_log(
        "j",
        "node0",
        [(1, 0, ["[rank0]: a", "[rank1]: b", "torchrun says"]), (2, 0, ["[rank0]: c"])],
    )
    assert log_lines(text, "0") == [text.splitlines()[0], "a", text.splitlines()[4], "c"]
    assert log_lines(text, "1") == [text.splitlines()[0], "b", text.splitlines()[4]]
    assert log_lines(text, "0", attempt=2) == [text.splitlines()[4], "c"]
    assert log_lines(text, "all", attempt=1)[1:] == ["[rank0]: a", "[rank1]: b", "torchrun says"]


def test_the_tail_of_a_big_log_starts_on_a_whole_line(tmp_path) -> None:
    log = tmp_path / "node.log"
    log.write_text("".join(f"[rank0]: line {n}\n" for n in range(100_000)))
    tail = read_tail(str(log), 4096)
    assert tail.startswith("[rank0]: line ")
    assert tail.endswith("line 99999\n")
    assert read_tail(str(tmp_path / "missing")) == ""
