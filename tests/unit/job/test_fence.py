"""Self-fencing: the fence stops a job whose heartbeat its watcher stopped touching, and the
controller's next attempt waits for the lost nodes' fences. The fence runs here for real, as
its own program, against a stand-in for systemctl that kills the job's process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job import fence as fence_file
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.fence import (
    FENCE_MARGIN_S,
    FENCE_POLL_S,
    fence_due,
    fence_unit_argv,
    fence_until,
    heartbeat_path,
    touch_then,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.inputs import (
    liveness_problems,
)


def test_the_next_attempt_waits_for_the_newest_lost_nodes_fence() -> None:
    heard = {"node0": 1000.0, "node1": 990.0, "node2": 995.0}
    assert fence_until(heard, ["node1", "node2"], 10) == 995.0 + 10 + FENCE_MARGIN_S
    assert fence_until(heard, [], 10) == 0.0
    assert fence_until(heard, ["node1"], 0) == 0.0  # no fence: nothing to wait for


def test_a_fence_is_due_at_its_timeout_and_never_without_one() -> None:
    assert not fence_due(9.9, 10)
    assert fence_due(10.0, 10)
    assert not fence_due(1e6, 0)


def test_a_poll_touches_the_heartbeat_before_it_asks(tmp_path: Path) -> None:
    beat = tmp_path / "unit.heard"
    beat.write_text("")
    os.utime(beat, (1000, 1000))
    done = subprocess.run(
        touch_then(str(beat), ["echo", "asked"]), capture_output=True, text=True, check=False
    )
    assert done.stdout == "asked\n"
    assert beat.stat().st_mtime > time.time() - 5
    # A node whose job has no fence gets no heartbeat file.
    missing = tmp_path / "none.heard"
    assert subprocess.run(touch_then(str(missing), ["true"]), check=False).returncode == 0
    assert not missing.exists()


def test_the_fence_unit_is_bound_to_the_jobs_unit() -> None:
    argv = fence_unit_argv("/usr/bin/python3", "torch-job-x", 10, "/var/log/x.log", "node1")
    assert argv[:2] == ["systemd-run", "--unit=fence-torch-job-x"]
    assert "--property=BindsTo=torch-job-x.service" in argv
    assert argv[argv.index("--") + 1 :] == [
        "/usr/bin/python3",
        "/run/torch-cluster/fence.py",
        "torch-job-x",
        heartbeat_path("torch-job-x"),
        "10",
        "/var/log/x.log",
        "node1",
    ]


SYSTEMCTL = """#!/bin/sh
# A stand-in for systemctl: the job's main process is $JOB_PID; kill and stop end it.
echo "$@" >> "$CALLS"
case "$1" in
  show) echo "$JOB_PID" ;;
  kill|stop) kill -9 "$JOB_PID" 2>/dev/null ;;
esac
"""


@pytest.fixture
def job(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    sleeper = subprocess.Popen(["sleep", "60"])
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "JOB_PID": str(sleeper.pid),
        "CALLS": str(tmp_path / "calls"),
    }
    yield sleeper, env, tmp_path
    sleeper.kill()
    sleeper.wait()


def run_fence(env: dict, tmp_path: Path, beat: Path, timeout: float) -> subprocess.Popen:
    argv = ["torch-job-x", str(beat), str(timeout), str(tmp_path / "node.log"), "node1"]
    return subprocess.Popen([sys.executable, fence_file.__file__, *argv], env=env)


def test_a_node_not_heard_from_kills_its_job_and_says_why(job) -> None:
    sleeper, env, tmp_path = job
    beat = tmp_path / "x.heard"
    beat.write_text("")
    began = time.monotonic()
    fence = run_fence(env, tmp_path, beat, 2)
    assert fence.wait(timeout=10) == 0
    took = time.monotonic() - began
    # The job's process was reaped by the fixture's Popen: it is gone once kill ran.
    assert sleeper.wait(timeout=5) == -9
    # The fence's own count: the timeout, plus at most one look (its process's start aside).
    log = (tmp_path / "node.log").read_text()
    silent = float(re.search(r"had not reached it for ([\d.]+) s", log).group(1))
    assert 2 <= silent <= 2 + FENCE_POLL_S + 0.2, silent
    assert silent <= took < 2 + FENCE_MARGIN_S + 1.5, took
    assert "=== torch-cluster: node node1 fenced itself: its watcher" in log
    assert "(train_fence_timeout=2)" in log
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[1:] == ["kill --signal=SIGKILL torch-job-x", "stop --no-block torch-job-x"]


def test_a_heartbeat_kept_fresh_keeps_the_job_and_the_fence_ends_with_it(job) -> None:
    sleeper, env, tmp_path = job
    beat = tmp_path / "x.heard"
    beat.write_text("")
    fence = run_fence(env, tmp_path, beat, 2)
    for _ in range(8):  # 4 s, twice the fence timeout
        os.utime(beat)
        time.sleep(0.5)
    assert fence.poll() is None
    assert sleeper.poll() is None
    sleeper.kill()  # the job ends by itself, and systemd reaps it
    sleeper.wait()
    assert fence.wait(timeout=5) == 0
    assert not (tmp_path / "node.log").exists()


LIVENESS = {
    "defaults": ({"train_lost_after": 6, "train_fence_timeout": 10}, []),
    "no fence": ({"train_lost_after": 6, "train_fence_timeout": 0}, []),
    "lost_after too short": ({"train_lost_after": 2, "train_fence_timeout": 0}, ["3 or more"]),
    "fence inside the loss": (
        {"train_lost_after": 6, "train_fence_timeout": 8},
        ["train_fence_timeout=8 is too short for train_lost_after=6"],
    ),
    "not a number": ({"train_fence_timeout": "ten"}, ["train_fence_timeout must be a whole"]),
}


@pytest.mark.parametrize(("inputs", "found"), LIVENESS.values(), ids=list(LIVENESS))
def test_the_liveness_inputs_are_checked(inputs: dict, found: list[str]) -> None:
    problems = liveness_problems(inputs)
    assert len(problems) == len(found), problems
    for problem, part in zip(problems, found, strict=True):
        assert part in problem
