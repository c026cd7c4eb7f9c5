"""Watching a job as users expect: rank 0's lines followed live, each node's GPU use in the
watch line and in gpu.csv, progress.csv and progress.png from any script's own lines,
train.yml's output without the skipped tasks (-v shows them), the job list (jobs.yml) and a
job's log (logs.yml), the latter after the launcher was interrupted too.

The GPU part runs with a fake nvidia-smi on the nodes' PATH that prints recorded rows
(tests/unit/data/nvidia-smi): the sandbox has no GPU. It answers only the watch's query, as
a node without a driver answers the rest, and is removed after the test.
"""

from __future__ import annotations

import base64
import csv
import json
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from launcher import PROJECT_DIR, Job, Playbook, attempts, job_vars
from sandbox_nodes import Node

SCRIPTS = Path(__file__).parent / "scripts"
EXAMPLES = PROJECT_DIR / "train" / "examples"
SMI_DATA = PROJECT_DIR / "tests" / "unit" / "data" / "nvidia-smi"
FAKE_SMI = "/usr/local/bin/nvidia-smi"
WATCH_QUERY = "--query-gpu=index,utilization.gpu,memory.used,memory.total"
TICK = re.compile(r"^\[rank0\] tick (\d+) printed at ([\d.]+)$")
# snapshot_ddp.py's own progress line (PyTorch's DDP tutorial), and a regex for it.
TUTORIAL_LINE = re.compile(
    r"^\[rank0\]: \[GPU0\] Epoch (\d+) \| Batchsize: \d+ \| Steps: (\d+) \| Loss: ([\d.]+)$", re.M
)
TUTORIAL_REGEX = (
    r"\[GPU0\] Epoch (?P<epoch>\d+) \| Batchsize: \d+ \| Steps: (?P<steps>\d+) \| "
    r"Loss: (?P<loss>[\d.]+)"
)


def script_job(job: Job, code: Path, script: str, args: list[str], **extra: object) -> dict:
    return job_vars(
        job, train_code_dir=str(code), train_script=script, train_script_args=args, nproc=1,
        **extra,
    )  # fmt: skip


def install_fake_smi(node: Node, rows: Path) -> None:
    script = (
        "#!/bin/sh\n"
        "# torch-cluster test: recorded rows for the watch's query; no driver for the rest.\n"
        f'if [ "$1" = "{WATCH_QUERY}" ]; then\n'
        f"  printf '%s' {shlex.quote(rows.read_text())}\n"
        "  exit 0\n"
        "fi\n"
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\n'
        "exit 9\n"
    )
    encoded = base64.b64encode(script.encode()).decode()
    node.host.check_output(f"echo {encoded} | base64 -d > {FAKE_SMI} && chmod 755 {FAKE_SMI}")


@pytest.fixture
def fake_smi(members: list[Node]) -> Iterator[None]:
    """node0's 8 GPUs train; every other member's sit idle."""
    try:
        for index, node in enumerate(members):
            install_fake_smi(
                node, SMI_DATA / ("h100x8-training.csv" if index == 0 else "h100x8-idle.csv")
            )
        yield
    finally:
        for node in members:
            node.host.run(f"rm -f {FAKE_SMI}")


def test_followed_lines_reach_the_controller_within_3_s_in_order(playbook: Playbook) -> None:
    job = Job(f"test-{secrets.token_hex(4)}")
    extra = script_job(
        job, SCRIPTS, "tick_every_second.py", ["12"], train_follow=True, train_watch_interval=30
    )
    running = playbook.start("train.yml", extra)
    received: list[tuple[float, str]] = []
    try:
        for line in running.process.stdout:
            received.append((time.time(), line.rstrip("\n")))
        running.process.wait(timeout=60)
    finally:
        running.kill()
    output = "\n".join(line for _, line in received)
    assert running.process.returncode == 0, output[-4000:]
    ticks = [
        (at, int(found.group(1)), float(found.group(2)))
        for at, line in received
        if (found := TICK.match(line))
    ]
    assert [tick for _, tick, _ in ticks] == list(range(12)), output[-4000:]
    lags = [round(at - printed, 2) for at, _, printed in ticks]
    assert max(lags) <= 3.0, lags
    print(f"follow: lags {lags} s")


def test_the_watch_line_and_gpu_csv_show_each_nodes_gpu_use(
    playbook: Playbook, members: list[Node], fake_smi: None
) -> None:
    job = Job(f"test-{secrets.token_hex(4)}")
    extra = script_job(job, SCRIPTS, "tick_every_second.py", ["10"], train_watch_interval=3)
    outcome = playbook.run("train.yml", extra)
    assert outcome.rc == 0, outcome.output
    idle = ", ".join(f"{node.name} 0% 0.0/637.2 GiB" for node in members[1:])
    line = f"GPU {members[0].name} 98% 556.8/637.2 GiB, {idle}; idle while the others work: "
    shown = re.findall(rf"^job {job.job_id} \[[0-9:]+\] .*$", outcome.output, flags=re.M)
    assert any(line in row for row in shown), shown
    with (playbook.runs_dir / job.job_id / "gpu.csv").open() as table:
        rows = list(csv.DictReader(table))
    first = {(row["node"], row["gpu"]): row for row in rows}
    assert len(first) == 8 * len(members)
    assert first[(members[0].name, "6")]["utilization_pct"] == "100"
    assert first[(members[0].name, "6")]["memory_used_mib"] == "71402"
    assert first[(members[-1].name, "0")]["utilization_pct"] == "0"


def test_without_gpus_the_watch_line_shows_none(playbook: Playbook) -> None:
    job = Job(f"test-{secrets.token_hex(4)}")
    extra = script_job(job, SCRIPTS, "tick_every_second.py", ["6"], train_watch_interval=2)
    outcome = playbook.run("train.yml", extra)
    assert outcome.rc == 0, outcome.output
    assert " | GPU " not in outcome.output
    assert not (playbook.runs_dir / job.job_id / "gpu.csv").exists()


def test_a_tutorial_scripts_own_lines_become_progress_csv_and_png_and_skips_stay_quiet(
    playbook: Playbook, members: list[Node]
) -> None:
    job = Job(f"test-{secrets.token_hex(4)}")
    extra = script_job(
        job, EXAMPLES, "snapshot_ddp.py", ["6", "3", "--dataset_size", "4000"],
        train_progress_regex=TUTORIAL_REGEX, train_watch_interval=5,
    )  # fmt: skip
    outcome = playbook.run("train.yml", extra)
    assert outcome.rc == 0, outcome.output
    printed = [
        (int(epoch), int(steps), float(loss))
        for epoch, steps, loss in TUTORIAL_LINE.findall(job.log(members[0]))
    ]
    assert [epoch for epoch, _, _ in printed] == list(range(6))
    with (playbook.runs_dir / job.job_id / "progress.csv").open() as table:
        rows = list(csv.DictReader(table))
    assert list(rows[0]) == ["attempt", "line", "epoch", "steps", "loss"]
    assert [(int(r["epoch"]), int(r["steps"]), float(r["loss"])) for r in rows] == printed
    assert {r["attempt"] for r in rows} == {"1"}
    picture = playbook.runs_dir / job.job_id / "progress.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plotted in {picture}" in outcome.output
    # Quiet output: the default shows no skipped task, and no banner of one.
    assert "skipping:" not in outcome.output
    assert "TASK [train : Write the job's batch script" not in outcome.output


def test_verbose_output_shows_the_skipped_tasks_again(playbook: Playbook) -> None:
    job = Job(f"test-{secrets.token_hex(4)}")
    extra = script_job(job, SCRIPTS, "tick_every_second.py", ["1"])
    outcome = playbook.run("train.yml", extra, args=("-v",))
    assert outcome.rc == 0, outcome.output
    assert re.search(r"^skipping: \[node\d+\]", outcome.output, flags=re.M), outcome.output[-3000:]


def job_states(output: str, job_ids: list[str]) -> dict[str, str]:
    """Each job's STATE in jobs.yml's table (the states are one word, but "timed out")."""
    states = {}
    for job_id in job_ids:
        found = re.search(rf'^\s*"?{re.escape(job_id)}\s+(timed out|\S+)\s', output, flags=re.M)
        states[job_id] = found.group(1) if found else "missing"
    return states


def last_outcome(playbook: Playbook, job: Job) -> str:
    record = json.loads((playbook.runs_dir / job.job_id / "attempts.json").read_text())
    return record["attempts"][-1]["outcome"]


def test_jobs_yml_lists_running_succeeded_failed_and_stopped_jobs_as_recorded(
    playbook: Playbook, members: list[Node]
) -> None:
    token = secrets.token_hex(3)
    running_job, succeeded, failed, stopped = (
        Job(f"test-{name}-{token}") for name in ("running", "ok", "failed", "stopped")
    )
    # Another master port: the other jobs run meanwhile on the default one.
    long_run = playbook.start(
        "train.yml",
        script_job(running_job, SCRIPTS, "tick_every_second.py", ["600"], train_master_port=10611),
    )
    try:
        ok = playbook.run(
            "train.yml", script_job(succeeded, SCRIPTS, "tick_every_second.py", ["2"])
        )
        assert ok.rc == 0, ok.output
        bad = playbook.run("train.yml", script_job(failed, SCRIPTS, "raise_on_rank.py", ["1"]))
        assert bad.rc != 0
        to_stop = playbook.start(
            "train.yml", script_job(stopped, SCRIPTS, "tick_every_second.py", ["600"])
        )
        try:
            stopped.wait_for_log(members[0], r"^\[rank0\]: tick 2 printed")
            assert playbook.run("stop.yml", {"job_id": stopped.job_id}).rc == 0
            to_stop.wait(timeout=120)
        finally:
            to_stop.kill()
        running_job.wait_for_log(members[0], r"^\[rank0\]: tick 1 printed")
        listed = playbook.run("jobs.yml", {})
        assert listed.rc == 0, listed.output
        jobs = [running_job, succeeded, failed, stopped]
        states = job_states(listed.output, [job.job_id for job in jobs])
        recorded = {job.job_id: last_outcome(playbook, job) for job in jobs}
        assert recorded == {
            running_job.job_id: "running",
            succeeded.job_id: "succeeded",
            failed.job_id: "failed",
            stopped.job_id: "stopped",
        }
        assert states == recorded, listed.output
        row = re.search(
            rf'^\s*"?{running_job.job_id}\s+running\s+systemd\s+(\S+)\s+(\d+)\s+1\s',
            listed.output,
            re.M,
        )
        assert row, listed.output
        assert row.groups() == (",".join(node.name for node in members), str(len(members)))
        assert re.search(rf'^\s*"?{running_job.job_id}\s.*tick \d+ printed at', listed.output, re.M)
    finally:
        playbook.run("stop.yml", {"job_id": running_job.job_id})
        long_run.wait(timeout=120)
        long_run.kill()


def test_logs_yml_follows_a_job_whose_launcher_was_interrupted(
    playbook: Playbook, members: list[Node]
) -> None:
    job = Job(f"test-{secrets.token_hex(4)}")
    # Without a fence: a job whose launcher is gone runs on (train_fence_timeout=0).
    extra = script_job(job, SCRIPTS, "tick_every_second.py", ["20"], train_fence_timeout=0)
    running = playbook.start("train.yml", extra)
    try:
        job.wait_for_log(members[0], r"^\[rank0\]: tick 3 printed")
    finally:
        # The launcher is interrupted: the job runs on, unwatched.
        running.process.kill()
        running.process.wait()
    listed = playbook.run("jobs.yml", {"job_id": job.job_id})
    assert job_states(listed.output, [job.job_id]) == {job.job_id: "running"}, listed.output
    followed = playbook.run("logs.yml", {"job_id": job.job_id, "follow": True}, timeout=180)
    assert followed.rc == 0, followed.output
    ticks = [
        int(n)
        for n in re.findall(rf"^\[{members[0].name}\] tick (\d+) printed", followed.output, re.M)
    ]
    assert ticks == list(range(20)), followed.output
    assert f"[{members[0].name}] rank 0 done" in followed.output
    # Its process has ended (the unit remains, exited, until the launcher or stop.yml removes it).
    state = members[0].host.run(f"systemctl show {job.unit} --property=SubState --value")
    assert state.stdout.strip() in ("exited", "failed", "dead")
    # A finished job's log, and one node's rank.
    one = playbook.run("logs.yml", {"job_id": job.job_id, "node": members[1].name, "rank": 1})
    assert one.rc == 0, one.output
    assert f"[{members[1].name}] rank 1 done" in one.output
    assert "tick" not in one.output
    assert not re.search(rf"^\[{members[0].name}\] ", one.output, flags=re.M), one.output
    # Nobody recorded how it ended: the list says so, until stop.yml clears its units.
    listed = playbook.run("jobs.yml", {"job_id": job.job_id})
    assert job_states(listed.output, [job.job_id]) == {job.job_id: "interrupted"}, listed.output
    assert playbook.run("stop.yml", {"job_id": job.job_id}).rc == 0
    assert not any(job.unit_exists(node) for node in members)


def test_logs_yml_refuses_a_job_no_node_holds(playbook: Playbook) -> None:
    missing = playbook.run("logs.yml", {"job_id": "no-such-job"})
    assert missing.rc != 0
    assert "holds a log of job no-such-job" in missing.output


def test_a_job_whose_launcher_is_killed_stops_itself_on_every_node(
    playbook: Playbook, members: list[Node]
) -> None:
    """The controller is lost (its ansible-playbook killed): nobody watches the job, so every
    node's part stops by itself after train_fence_timeout, and each log says why."""
    job = Job(f"test-{secrets.token_hex(4)}")
    extra = script_job(job, SCRIPTS, "tick_every_second.py", ["120"], train_fence_timeout=10)
    running = playbook.start("train.yml", extra)
    try:
        job.wait_for_log(members[0], r"^\[rank0\]: tick 3 printed")
    finally:
        # The controller is gone: ansible-playbook and its workers (the watch runs in one).
        subprocess.run(["pkill", "-KILL", "-P", str(running.process.pid)], check=False)
        running.process.kill()
        running.process.wait()
    killed = time.monotonic()
    deadline = killed + 30
    while any(job.processes(node) for node in members) and time.monotonic() < deadline:
        time.sleep(0.5)
    took = time.monotonic() - killed
    try:
        assert {node.name: job.processes(node) for node in members} == {
            node.name: [] for node in members
        }
        for node in members:
            assert f"node {node.name} fenced itself: its watcher" in job.log(node)
        print(f"fence: every node's part of the job had stopped {took:.1f} s after the launcher")
        assert 10 <= took <= 10 + 6, took
    finally:
        assert playbook.run("stop.yml", {"job_id": job.job_id}).rc == 0


def test_gpu_memory_still_held_after_a_stop_fails_the_job_naming_the_node(
    playbook: Playbook, members: list[Node]
) -> None:
    """nvidia-smi (a fake: the sandbox has no GPU) says node1's ranks still hold GPU memory
    after their stop: the launcher waits train_gpu_release_timeout, then fails the job,
    naming node1, instead of starting the next attempt on GPUs that are not free."""
    node0, node1 = members
    job = Job(f"test-{secrets.token_hex(4)}")
    extra = script_job(
        job, SCRIPTS, "tick_every_second.py", ["60"],
        train_max_restarts=1, train_gpu_release_timeout=3,
    )  # fmt: skip
    running = playbook.start("train.yml", extra)
    try:
        job.wait_for_log(node0, r"^\[rank0\]: tick 3 printed")
        pids = [line.split()[0] for line in job.processes(node1)]
        held = "".join(f"{pid}, 1024\\n" for pid in pids)
        script = (
            "#!/bin/sh\n"
            "# torch-cluster test: node1's job processes on a GPU, whatever happened to them.\n"
            'case "$1" in --query-compute-apps=*) printf ' + shlex.quote(held) + "; exit 0;; esac\n"
            "exit 9\n"
        )
        encoded = base64.b64encode(script.encode()).decode()
        node1.host.check_output(f"echo {encoded} | base64 -d > {FAKE_SMI} && chmod 755 {FAKE_SMI}")
        job.kill_workers(node1)
        outcome = running.wait(timeout=180)
    finally:
        running.kill()
        node1.host.run(f"rm -f {FAKE_SMI}")
    assert outcome.rc != 0, outcome.output
    assert "node1: the GPU memory of the stopped attempt is still held" in outcome.output
    assert "(train_gpu_release_timeout)" in outcome.output
    assert len(attempts(playbook, job)) == 1  # no restart onto GPUs that are not free
