"""A stalled job's stacks (plugins/module_utils/job/stall.py, stacks.py, processes.py,
flight_recorder.py and flight_dumps.py; plugins/modules/torch_job_stacks.py): py-spy's dumps
read, the ranks outside the collective named, the job's processes found, and the flight
recorder's pipes asked.

The data files in data/stall/ are a real job's (see data/stall/README.md): three gloo ranks on
the CPU, rank 2 asleep before an all_reduce that ranks 0 and 1 wait in.
`PYTHONPATH=.cache/collections .venv/bin/python tests/unit/job/test_stall.py DIR` records them
again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.flight_dumps import (
    copy_flight_recorder_files,
    request_flight_recorder_dumps,
    wait_for_dumps,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.flight_recorder import (
    flight_recorder_env,
    flight_recorder_prefix,
    flight_recorder_reason,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.processes import (
    JobProcess,
    cgroup_pids,
    environment_pids,
    job_processes_of,
    read_process,
    workers_and_agent,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.record_wrapper import (
    RECORD_WRAPPER,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.stacks import (
    collect_stacks,
    dump_stacks,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.stall import (
    Frame,
    main_thread,
    parse_dump,
    rank_list,
    shown_frames,
    stall_outliers,
)

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parents[1] / "data" / "stall"
SCRIPT = DATA / "stall.py"
BIN = Path(sys.executable).parent


def recorded() -> dict[int, list[dict]]:
    """Each rank's main-thread frames, as the module returns them (source lines included)."""
    ranks = json.loads((DATA / "collected.json").read_text())["ranks"]
    return {r["rank"]: r["frames"] for r in ranks}


def main_frames(name: str, pid_key: str = "pid") -> list[Frame]:
    threads = parse_dump((DATA / f"{name}.json").read_text())
    pid = json.loads((DATA / f"{name}.json").read_text())[0][pid_key]
    thread = main_thread(threads, pid)
    assert thread is not None
    return thread.frames


# --- py-spy's dumps


def test_a_json_dump_gives_the_main_threads_frames_innermost_first() -> None:
    frames = main_frames("rank0")
    assert frames[0].function == "all_reduce"
    assert frames[0].file == "torch/distributed/distributed_c10d.py"
    assert frames[0].path.endswith("/site-packages/torch/distributed/distributed_c10d.py")
    assert frames[0].line > 0
    assert frames[-1].function == "<module>"


def test_the_sleeping_ranks_innermost_frame_is_its_scripts_line() -> None:
    innermost = main_frames("rank2")[0]
    assert (innermost.function, innermost.file) == ("main", "stall.py")
    source = SCRIPT.read_text().splitlines()[innermost.line - 1]
    assert source.strip() == "time.sleep(sleep_s)"


def test_the_launchers_frames_are_left_out() -> None:
    every = main_frames("rank0")
    shown = shown_frames(every)
    left_out = {Path(f.file).name for f in every} - {Path(f.file).name for f in shown}
    assert left_out == {"record_errors.py", "<frozen runpy>", "__init__.py"}
    assert shown[-1].function == "<module>"
    assert shown[-1].file == "stall.py"


def test_the_agent_is_dumped_too() -> None:
    agent = json.loads((DATA / "collected.json").read_text())["agent"]
    assert "torchrun" in agent["command"]
    assert not agent["error"]
    assert any("elastic" in f["file"] for f in agent["frames"])


# --- naming the ranks outside the collective


def test_the_sleeping_rank_is_named_with_its_own_line() -> None:
    report = stall_outliers(recorded())
    assert report.outliers == [2]
    assert report.waiting == [0, 1]
    assert report.in_collective
    sleeping = report.outlier_frames[2]
    assert (sleeping.function, sleeping.file, sleeping.code) == (
        "main",
        "stall.py",
        "time.sleep(sleep_s)",
    )
    assert report.common_frames[0].function == "all_reduce"
    assert report.summary.startswith(
        f"rank 2 is elsewhere (time.sleep(sleep_s) at stall.py:{sleeping.line} in main) "
        "while ranks 0-1 wait in all_reduce (distributed_c10d.py:"
    )
    assert report.summary.endswith("from dist.all_reduce(total) at stall.py:19 in main")


@pytest.mark.parametrize(
    ("asleep", "waiting"), [(1, 0), (0, 1)], ids=["higher-rank-asleep", "rank-0-asleep"]
)
def test_of_two_ranks_the_one_in_the_collective_is_the_one_waited_for(
    asleep: int, waiting: int
) -> None:
    frames = recorded()
    report = stall_outliers({asleep: frames[2], waiting: frames[0]})
    assert (report.outliers, report.waiting) == ([asleep], [waiting])


def test_ranks_that_all_wait_in_one_place_point_at_the_collective() -> None:
    frames = recorded()
    report = stall_outliers({0: frames[0], 1: frames[1]})
    assert report.outliers == []
    assert report.summary.startswith("every rank (0-1) waits in all_reduce (distributed_c10d.py:")
    assert report.summary.endswith(
        ": look at the collective itself or the network (the NCCL flight recorder, NCCL_DEBUG=INFO)"
    )


def test_ranks_that_all_sleep_in_one_place_are_at_it() -> None:
    frames = recorded()
    report = stall_outliers({4: frames[2], 5: frames[2]})
    assert report.outliers == []
    assert not report.in_collective
    assert report.summary == (
        "every rank (4-5) is at time.sleep(sleep_s) at stall.py:17 in main: none is elsewhere"
    )


def test_a_rank_without_a_stack_is_listed_apart() -> None:
    report = stall_outliers({**recorded(), 3: None}, errors={3: "process gone"})
    assert report.outliers == [2]
    assert report.no_stack == {3: "process gone"}
    assert report.summary.endswith("; no stack from rank 3: process gone")
    assert report.as_dict()["no_stack"] == [{"rank": 3, "error": "process gone"}]


def test_without_any_stack_the_report_says_why() -> None:
    report = stall_outliers({0: None, 1: []}, errors={0: "py-spy gave no dump within 20 s"})
    assert report.outliers == []
    assert report.summary == (
        "no rank's stack could be read (rank 0: py-spy gave no dump within 20 s; "
        "rank 1: no stack was read)"
    )


def test_ranks_elsewhere_in_the_same_place_are_named_together() -> None:
    frames = recorded()
    ranks = {0: frames[0], 1: frames[0], 2: frames[0], 3: frames[2], 5: frames[2], 6: frames[1]}
    report = stall_outliers(ranks)
    assert report.outliers == [3, 5]
    assert report.summary.startswith("ranks 3, 5 are elsewhere (time.sleep(sleep_s) at")
    assert " while ranks 0-2, 6 wait in all_reduce" in report.summary


@pytest.mark.parametrize(
    ("ranks", "text"), [([0], "0"), ([3, 1, 2, 7], "1-3, 7"), ([0, 2, 4, 5], "0, 2, 4-5")]
)
def test_rank_lists_are_written_as_spans(ranks: list[int], text: str) -> None:
    assert rank_list(ranks) == text


# --- the job's processes on a node


def test_a_units_cgroup_gives_its_processes_and_those_of_the_cgroups_below(tmp_path: Path) -> None:
    unit = tmp_path / "system.slice" / "torch-job-x.service"
    (unit / "workers").mkdir(parents=True)
    (unit / "cgroup.procs").write_text("10\n11\n")
    (unit / "workers" / "cgroup.procs").write_text("12\n")
    assert cgroup_pids("/system.slice/torch-job-x.service", roots=[str(tmp_path)]) == [
        10,
        11,
        12,
    ]
    assert cgroup_pids("/system.slice/other.service", roots=[str(tmp_path)]) == []
    assert cgroup_pids("/", roots=[str(tmp_path)]) == []


def process(pid: int, ppid: int, **env: str) -> JobProcess:
    return JobProcess(pid=pid, ppid=ppid, argv=["python"], env=env)


def test_the_topmost_process_of_each_rank_is_its_worker_and_their_parent_the_agent() -> None:
    processes = [
        process(100, 1, TORCH_JOB_ID="j"),
        process(102, 100, RANK="1", LOCAL_RANK="1"),
        process(101, 100, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2"),
        process(103, 101, RANK="0", LOCAL_RANK="0"),  # rank 0's DataLoader worker
    ]
    workers, agent = workers_and_agent(processes)
    assert [(w.rank, w.pid) for w in workers] == [(0, 101), (1, 102)]
    assert workers[0].world_size == 2
    assert agent is not None
    assert agent.pid == 100


# --- the flight recorder


def test_the_launchers_environment_turns_the_flight_recorder_on_in_a_folder() -> None:
    env = flight_recorder_env("/var/lib/torch-cluster/jobs/j/fr")
    assert env == {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_ENABLE_MONITORING": "1",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": "/var/lib/torch-cluster/jobs/j/fr/nccl_trace_rank_",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/var/lib/torch-cluster/jobs/j/fr/nccl_trace_rank_",
    }


def test_a_rank_is_asked_through_its_pipe_and_its_dump_is_awaited(tmp_path: Path) -> None:
    prefix = flight_recorder_prefix(str(tmp_path))
    # Ranks 3 and 4 hold their pipes open as torch's DumpPipe does; rank 5's run is over.
    for rank in (3, 4, 5):
        os.mkfifo(f"{prefix}{rank}.pipe")
    readers = [os.open(f"{prefix}{rank}.pipe", os.O_RDONLY | os.O_NONBLOCK) for rank in (3, 4)]
    try:
        since = time.time() - 1
        assert request_flight_recorder_dumps(prefix) == ([3, 4], [5])
        assert all(os.read(reader, 128) for reader in readers)
        Path(f"{prefix}3").write_bytes(b"trace")
        assert wait_for_dumps(prefix, [3, 4], since, timeout=1, sleep=0.1) == [4]
    finally:
        for reader in readers:
            os.close(reader)
    assert flight_recorder_reason(prefix, [3, 4], [5], [4]) == (
        "nobody reads the pipe of rank 5 (an earlier run's); rank 4 wrote no dump in time"
    )
    dest = tmp_path / "stall"
    assert copy_flight_recorder_files(prefix, str(dest)) == [str(dest / "nccl_trace_rank_3")]


def test_a_gloo_job_has_no_pipe_and_no_flight_recorder(tmp_path: Path) -> None:
    prefix = flight_recorder_prefix(str(tmp_path))
    assert request_flight_recorder_dumps(prefix) == ([], [])
    assert "the job uses gloo, which has no NCCL flight recorder" in flight_recorder_reason(
        prefix, [], [], []
    )


# --- a live job: its processes found and their stacks dumped (real torchrun and py-spy)


def start_stalled_job(folder: Path, job_id: str, nproc: int = 3) -> subprocess.Popen:
    """torchrun with the launcher's wrapper and the flight recorder's settings, as a unit
    would run it; its last rank sleeps 300 s before the all_reduce."""
    wrapper = folder / "record_errors.py"
    wrapper.write_text(RECORD_WRAPPER)
    (folder / "fr").mkdir()
    env = {
        **os.environ,
        "TORCH_JOB_ID": job_id,
        "OMP_NUM_THREADS": "1",
        **flight_recorder_env(str(folder / "fr")),
    }
    with open(folder / "node.log", "ab") as log:
        return subprocess.Popen(
            [BIN / "torchrun", "--standalone", f"--nproc-per-node={nproc}", wrapper, SCRIPT, "300"],
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_job(job: subprocess.Popen, job_id: str) -> None:
    """Kill torchrun, then its workers (each in a session of its own), by their ids."""
    job.kill()
    job.wait()
    for pid in environment_pids(job_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def stalled_stacks(job_id: str, dest: Path, deadline: float) -> tuple[list, dict, list]:
    """Find the job's processes and dump them until ranks 0 and 1 wait in the all_reduce and
    rank 2 sleeps (it may still be finishing init_process_group when the others are there)."""
    while True:
        workers, agent = workers_and_agent(job_processes_of("", job_id))
        if len(workers) == 3 and agent is not None:
            ranks, agent_record, files = collect_stacks(workers, agent, str(dest), timeout=10)
            tops = [r["frames"][0]["code"] if r["frames"] else "" for r in ranks]
            if tops == ["work.wait()", "work.wait()", "time.sleep(sleep_s)"]:
                return ranks, agent_record, files
        assert time.time() < deadline, (dest.parent / "node.log").read_text()[-2000:]
        time.sleep(0.5)


@pytest.fixture(scope="module")
def ptrace() -> None:
    """py-spy must be able to attach (ptrace) here; skip when it cannot."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        dump = dump_stacks(str(BIN / "py-spy"), read_process(sleeper.pid), timeout=10)
    finally:
        sleeper.kill()
        sleeper.wait()
    if dump.error:
        pytest.skip(f"py-spy cannot read a process here (it needs ptrace): {dump.error}")


@dataclass
class Stalled:
    folder: Path
    job_id: str
    ranks: list
    agent: dict
    files: list


@pytest.fixture(scope="module")
def stalled(tmp_path_factory: pytest.TempPathFactory, ptrace: None) -> Iterator[Stalled]:
    """A live job, stalled, and its stacks as collect_stacks gives them."""
    folder = tmp_path_factory.mktemp("job")
    job_id = f"stall-{uuid.uuid4().hex[:8]}"
    job = start_stalled_job(folder, job_id)
    try:
        dest = folder / "stall"
        yield Stalled(folder, job_id, *stalled_stacks(job_id, dest, deadline=time.time() + 40))
    finally:
        stop_job(job, job_id)


def test_a_live_jobs_ranks_are_found_dumped_and_the_sleeper_named(stalled: Stalled) -> None:
    ranks = [(r["rank"], r["local_rank"], r["world_size"]) for r in stalled.ranks]
    assert ranks == [(0, 0, 3), (1, 1, 3), (2, 2, 3)]
    assert "torchrun" in stalled.agent["command"]
    written = sorted(Path(f).relative_to(stalled.folder / "stall") for f in stalled.files)
    assert [str(name) for name in written] == [
        f"{name}.{ext}" for name in ("agent", "rank0", "rank1", "rank2") for ext in ("json", "txt")
    ]
    assert '"MainThread"' in (stalled.folder / "stall" / "rank2.txt").read_text()
    report = stall_outliers({r["rank"]: r["frames"] for r in stalled.ranks})
    assert report.outliers == [2]
    assert report.outlier_frames[2].code == "time.sleep(sleep_s)"


def stacks(run_module, args: dict, check: bool = False) -> dict:
    """torch_job_stacks run by `ansible localhost`, on this machine's Python; its result."""
    done = run_module("torch_job_stacks", args, check=check)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.result


def test_the_module_finds_a_job_without_its_unit_by_its_job_id(
    stalled: Stalled, run_module
) -> None:
    # No systemd here: the unit is unknown, and the processes carry TORCH_JOB_ID.
    dest = stalled.folder / "module"
    prefix = flight_recorder_prefix(str(stalled.folder / "fr"))
    result = stacks(
        run_module,
        {
            "unit": f"torch-job-{stalled.job_id}",
            "job_id": stalled.job_id,
            "dest": str(dest),
            "flight_recorder_prefix": prefix,
            "timeout": 10,
        },
    )
    assert result["changed"]
    assert [r["rank"] for r in result["ranks"]] == [0, 1, 2]
    assert stall_outliers({r["rank"]: r["frames"] for r in result["ranks"]}).outliers == [2]
    assert "the job uses gloo" in result["flight_recorder"]["reason"]
    assert result["flight_recorder"]["files"] == []
    assert sorted(result["files"]) == sorted(str(p) for p in dest.iterdir())


def test_in_check_mode_the_module_only_finds_the_processes(stalled: Stalled, run_module) -> None:
    dest = stalled.folder / "checked"
    result = stacks(run_module, {"job_id": stalled.job_id, "dest": str(dest)}, check=True)
    assert [r["rank"] for r in result["ranks"]] == [0, 1, 2]
    assert result["files"] == []
    assert not dest.exists()


def record(dest: Path) -> None:
    """Record the data files from a live job (see data/stall/README.md)."""
    folder = Path(f"/tmp/stall-record-{uuid.uuid4().hex[:8]}")
    folder.mkdir()
    job_id = "stall-record"
    job = start_stalled_job(folder, job_id)
    try:
        ranks, agent, _ = stalled_stacks(job_id, dest, deadline=time.time() + 60)
    finally:
        stop_job(job, job_id)
    collected = {"ranks": ranks, "agent": agent}
    (dest / "collected.json").write_text(json.dumps(collected, indent=1) + "\n")


if __name__ == "__main__":
    record(Path(sys.argv[1]))
