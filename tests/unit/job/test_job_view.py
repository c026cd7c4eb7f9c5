"""What a user sees of a job: followed lines, GPU use, and progress.csv/png from any script."""

from __future__ import annotations

import csv
import io
import os
import subprocess
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.follow import (
    FOLLOW_LINE_CHARS,
    FollowBuffer,
    follow_lines,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.gpu_use import (
    GpuUse,
    gpu_csv_rows,
    gpu_poll_script,
    gpu_summary,
    idle_nodes,
    parse_gpu_query,
    split_poll_output,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.log_reader import scan_log
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.progress import (
    numeric_series,
    progress_csv,
    progress_rows,
    rank0_attempts,
    regex_groups,
    restarts,
    x_axis,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    RUNNING,
    NodeState,
    parse_properties,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.watch import (
    JOB_RUNNING,
    watch_round,
)
from ansible_collections.torch_cluster.cluster.plugins.modules import torch_job_progress

DATA = Path(__file__).parents[1] / "data" / "nvidia-smi"
ROOT = Path(__file__).resolve().parents[3]


def smi(name: str) -> list[GpuUse]:
    return parse_gpu_query((DATA / name).read_text())


# --- GPU use ----------------------------------------------------------------------
def test_eight_h100s_parse_with_their_use_and_memory() -> None:
    gpus = smi("h100x8-training.csv")
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[6] == GpuUse(6, 100.0, 71402.0, 81559.0)


def test_units_and_na_fields_parse() -> None:
    assert smi("units.csv")[1] == GpuUse(1, 98.0, 27367.0, 81559.0)
    mig = smi("a100x4-mig.csv")
    assert [g.utilization for g in mig] == [None] * 4
    assert mig[0].memory_used == 13312.0


def test_a_failed_nvidia_smi_gives_no_gpu() -> None:
    assert smi("no-driver.txt") == []
    assert parse_gpu_query("") == []


def test_the_watch_line_shows_each_node_and_names_the_idle_one() -> None:
    busy, idle = smi("h100x8-training.csv"), [GpuUse(i, 0.0, 4.0, 81559.0) for i in range(8)]
    line = gpu_summary({"node0": busy, "node1": idle, "cpu-node": []})
    assert line.startswith("GPU node0 98% 556.8/637.2 GiB, node1 0% 0.0/637.2 GiB")
    assert "cpu-node" not in line
    assert line.endswith("; idle while the others work: node1")


def test_one_idle_gpu_on_a_busy_node_does_not_make_the_node_idle() -> None:
    gpus = {"node0": smi("h100x8-one-idle.csv"), "node1": smi("h100x8-training.csv")}
    assert idle_nodes(gpus) == []
    assert "idle" not in gpu_summary(gpus)


def test_nodes_idle_together_are_not_named_and_no_gpus_show_nothing() -> None:
    quiet = [GpuUse(0, 1.0, 10.0, 1000.0)]
    assert idle_nodes({"a": quiet, "b": quiet}) == []
    assert gpu_summary({"a": [], "b": []}) == ""
    assert idle_nodes({"a": smi("a100x4-mig.csv")}) == []


def test_gpu_csv_rows_leave_unknown_values_empty() -> None:
    rows = gpu_csv_rows(12.34, {"node0": smi("a100x4-mig.csv")[:1]})
    assert rows == [["12.3", "node0", "0", "", "13312", "40960"]]


def fake_bin(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


def test_the_poll_reads_the_unit_and_the_gpus_in_one_shell(tmp_path: Path) -> None:
    fake_bin(tmp_path, "systemctl", "echo ActiveState=active; echo SubState=running\n")
    rows = (DATA / "h100x8-training.csv").read_text()
    fake_bin(tmp_path, "nvidia-smi", f"echo \"$@\" > {tmp_path}/args\ncat <<'EOF'\n{rows}EOF\n")
    script = gpu_poll_script(["systemctl", "show", "torch-job-x", "--property=ActiveState"])
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0
    properties, gpus = split_poll_output(done.stdout)
    assert parse_properties(properties)["ActiveState"] == "active"
    assert len(parse_gpu_query(gpus)) == 8
    query = "--query-gpu=index,utilization.gpu,memory.used,memory.total"
    assert (tmp_path / "args").read_text().split() == [query, "--format=csv,noheader,nounits"]


def test_the_poll_keeps_systemctls_failure_and_a_node_without_nvidia_smi(tmp_path: Path) -> None:
    fake_bin(tmp_path, "systemctl", "echo 'Failed to connect to bus' >&2; exit 1\n")
    script = gpu_poll_script(["systemctl", "show", "u"])
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 1
    assert "Failed to connect to bus" in done.stderr
    assert split_poll_output(done.stdout) == ("", "")


def test_a_hung_nvidia_smi_is_cut_short(tmp_path: Path) -> None:
    fake_bin(tmp_path, "systemctl", "echo ActiveState=active\n")
    fake_bin(tmp_path, "nvidia-smi", "sleep 30\n")
    script = gpu_poll_script(["systemctl", "show", "u"], timeout_s=1)
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, env=env, check=False, timeout=10
    )
    assert done.returncode == 0
    assert split_poll_output(done.stdout) == ("ActiveState=active\n", "")


# --- Follow -----------------------------------------------------------------------
def test_followed_lines_keep_their_order_and_the_newest_within_the_cap() -> None:
    buffer = FollowBuffer.empty(3)
    for n in range(5):
        buffer.add(f"line {n}")
    assert buffer.lines == ["line 2", "line 3", "line 4"]
    assert buffer.skipped == 2
    shown = follow_lines(buffer.lines, buffer.skipped, "[rank0] ")
    assert shown[0].startswith("[rank0] [... 2 line(s) left out")
    assert shown[1:] == ["[rank0] line 2", "[rank0] line 3", "[rank0] line 4"]


def test_a_long_line_is_cut() -> None:
    buffer = FollowBuffer.empty(5)
    buffer.add("x" * 10_000)
    assert len(buffer.lines[0]) == FOLLOW_LINE_CHARS + len(" [...]")


def test_the_log_scan_hands_rank_0s_lines_to_the_follower(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text("[rank0]: a\n[rank1]: b\n[rank0]: \n[rank0]: c\n[rank0]: partial")
    buffer = FollowBuffer.empty(10)
    scan = scan_log(str(log), 0, lambda line: False, sink=buffer.add)
    assert buffer.lines == ["a", "c"]
    assert scan.offset == log.stat().st_size - len("[rank0]: partial")


def test_a_followed_round_ends_as_soon_as_there_is_news() -> None:
    clock = [0.0]
    news = iter([False, False, True])

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    running = {"node0": NodeState(RUNNING, "")}
    seen = watch_round(
        lambda: running,
        lambda: False,
        wait=25,
        poll=1,
        clock=lambda: clock[0],
        sleep=sleep,
        news=lambda: next(news),
        min_wait=1,
    )
    assert seen.verdict.job == JOB_RUNNING
    # The news is asked for once min_wait has passed: at the second, third and fourth poll.
    assert seen.polls == 4
    assert clock[0] == 3.0


# --- Progress ---------------------------------------------------------------------
HEADER = (
    "=== torch-cluster: job demo, attempt {attempt}, node {node} (node_rank {rank}), "
    "started 2026-12-05T00:00:00+00:00 ==="
)
REGEX = r"Epoch (?P<epoch>\d+) \| Step (?P<step>\d+) \| loss (?P<loss>[\d.]+)"


def logs_with_a_lost_master() -> dict[str, str]:
    """Attempt 1 with node0 as node_rank 0; node0 lost; attempt 2 on node1 as node_rank 0."""
    node0 = "\n".join([
        HEADER.format(attempt=1, node="node0", rank=0),
        "[rank0]: [GPU0] Epoch 0 | Batchsize: 32 | Steps: 4",
        "[rank0]: Epoch 0 | Step 10 | loss 2.30",
        "[rank1]: Epoch 0 | Step 10 | loss 9.99",
        "[rank0]: Epoch 0 | Step 20 | loss 1.90",
        "[rank0]: Epoch 1 | Step 30 | loss 1.50",
    ])  # fmt: skip
    node1 = "\n".join([
        HEADER.format(attempt=1, node="node1", rank=1),
        "[rank2]: Epoch 0 | Step 10 | loss 8.88",
        HEADER.format(attempt=2, node="node1", rank=0),
        "[rank0]: Resuming training from snapshot at Epoch 1",
        "[rank0]: Epoch 1 | Step 30 | loss 1.45",
        "[rank0]: Epoch 2 | Step 40 | loss 1.10",
    ])  # fmt: skip
    return {"node0.log": node0, "node1.log": node1}


def test_rank_0s_lines_follow_node_rank_0_across_attempts() -> None:
    attempts = rank0_attempts(logs_with_a_lost_master())
    assert list(attempts) == [1, 2]
    assert attempts[1][1] == "Epoch 0 | Step 10 | loss 2.30"
    assert attempts[2][0] == "Resuming training from snapshot at Epoch 1"
    assert not any(
        "9.99" in line or "8.88" in line for lines in attempts.values() for line in lines
    )


def test_progress_rows_and_csv_hold_the_named_groups() -> None:
    rows = progress_rows(rank0_attempts(logs_with_a_lost_master()), REGEX)
    assert [(r.attempt, r.values["step"], r.values["loss"]) for r in rows] == [
        (1, 10.0, 2.30), (1, 20.0, 1.90), (1, 30.0, 1.50), (2, 30.0, 1.45), (2, 40.0, 1.10),
    ]  # fmt: skip
    table = list(csv.reader(io.StringIO(progress_csv(rows, regex_groups(REGEX)))))
    assert table[0] == ["attempt", "line", "epoch", "step", "loss"]
    assert table[1] == ["1", "2", "0", "10", "2.3"]
    # The values as printed, to the last digit.
    precise = progress_rows({1: ["Epoch 0 | Step 1 | loss 10.00879"]}, REGEX)
    assert progress_csv(precise, ["loss"]).splitlines()[1] == "1,1,10.00879"
    assert table[-1] == ["2", "7", "2", "40", "1.1"]
    assert restarts(rows) == [3]
    assert x_axis(rows) == "step"
    assert numeric_series(rows, "step") == ["loss"]


def test_the_x_axis_is_the_epoch_else_the_line() -> None:
    attempts = {1: ["epoch 1 acc=0.5", "epoch 2 acc=0.7"]}
    rows = progress_rows(attempts, r"epoch (?P<epoch>\d+) acc=(?P<acc>[\d.]+)")
    assert x_axis(rows) == "epoch"
    rows = progress_rows(attempts, r"acc=(?P<acc>[\d.]+)")
    assert x_axis(rows) == "line"
    assert numeric_series(rows, "line") == ["acc"]


def test_text_groups_are_kept_as_text_and_a_bad_regex_is_named() -> None:
    rows = progress_rows({1: ["phase=warmup loss=nan"]}, r"phase=(?P<phase>\w+) loss=(?P<loss>\S+)")
    assert rows[0].values == {"phase": "warmup", "loss": "nan"}
    with pytest.raises(ValueError, match="is not a regular expression"):
        regex_groups("loss=(")


def test_the_plot_is_drawn_with_its_restart(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    progress = torch_job_progress
    rows = progress_rows(rank0_attempts(logs_with_a_lost_master()), REGEX)
    picture = tmp_path / "progress.png"
    assert progress.plot(str(picture), rows, "step", ["loss"], "job demo") == ""
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert picture.stat().st_size > 5000
