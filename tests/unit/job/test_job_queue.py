"""Slurm's queue in jobs.yml: squeue's and sacct's lines (in the formats torch_job_queue asks
for, as the sandbox's Slurm 22.05 printed them) read and shown, every person's jobs with the
launcher's own progress beside its jobs."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.queue import (
    gpus,
    history_table,
    launcher_job,
    parse_sacct,
    parse_squeue,
    queue_table,
)

DATA = Path(__file__).parents[1] / "data" / "slurm"


def test_squeue_lines_are_read_every_field() -> None:
    rows = parse_squeue((DATA / "squeue.txt").read_text())
    assert [(row["id"], row["user"], row["state"]) for row in rows] == [
        ("41", "torch", "RUNNING"),
        ("42", "torch", "RUNNING"),
        ("43", "torch", "PENDING"),
        ("44", "alice", "PENDING"),
    ]
    assert rows[2]["reason"] == "Resources"
    assert rows[0]["name"] == "torch-demo-a"


def test_the_gpus_of_a_job_from_squeue_or_sacct() -> None:
    assert gpus("gres:gpu:1", "2") == "2"
    assert gpus("gres/gpu:a100:2", "1") == "2"
    assert gpus("billing=2,cpu=2,gres/gpu=2,node=2") == "2"
    assert gpus("N/A", "2") == "-"
    assert gpus("billing=4,cpu=4,node=2") == "-"


def test_launcher_jobs_are_known_by_their_slurm_name() -> None:
    assert launcher_job("torch-demo-a") == "demo-a"
    assert launcher_job("bash") == ""


def test_the_queue_shows_every_persons_jobs_and_the_launchers_progress() -> None:
    rows = parse_squeue((DATA / "squeue.txt").read_text())
    table = queue_table(rows, {"demo-a": "progress epoch=3 loss=0.41", "demo-c": ""})
    lines = table.splitlines()
    assert lines[0].split() == [
        "SLURM",
        "USER",
        "JOB",
        "STATE",
        "GPUS",
        "NODES",
        "TIME",
        "PROGRESS",
    ]
    assert lines[1].split()[:6] == ["41", "torch", "demo-a", "RUNNING", "2", "node[0-1]"]
    assert lines[1].endswith("progress epoch=3 loss=0.41")
    assert "demo-c  PENDING (Resources)" in lines[3]
    assert lines[3].rstrip().endswith("-")  # the launcher's job: no progress yet
    # Someone else's job, not the launcher's: its Slurm name, and no progress column.
    assert lines[4].split()[:4] == ["44", "alice", "wrap", "PENDING"]


def test_an_empty_queue_says_so() -> None:
    assert queue_table([], {}) == "Slurm's queue is empty."


def test_a_persons_history_lists_finished_jobs_newest_first() -> None:
    rows = parse_sacct((DATA / "sacct-history.txt").read_text())
    table = history_table(rows, "torch")
    lines = table.splitlines()
    assert lines[0] == "Finished Slurm jobs of torch:"
    assert [line.split()[0] for line in lines[2:]] == ["40", "39"]
    assert lines[2].split()[1:3] == ["demo-x", "CANCELLED"]
    assert history_table([], "alice") == "No finished Slurm jobs of alice."
