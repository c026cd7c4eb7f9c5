"""Why a job stalled: every rank's Python stack (py-spy) and torch's NCCL flight recorder,
collected on each node of the job, and the ranks whose stacks differ from the rest, named on
the controller.

Standard library only: the collection runs on the nodes' system Python (3.9 on EL9).

The flight recorder's settings, as torch 2.14.1 reads them (its headers
torch/include/torch/csrc/distributed/c10d/FlightRecorder.hpp, ProcessGroupNCCL.hpp and
Utils.hpp, and `strings` over torch/lib/libtorch_cpu.so and libtorch_cuda.so):
- TORCH_FR_BUFFER_SIZE: the entries the recorder keeps (default 2000). Its older name,
  TORCH_NCCL_TRACE_BUFFER_SIZE, still works but makes every rank warn that it is deprecated;
  ProcessGroupNCCL reads that older name alone, for its dump pipe, with 2000 as its default.
- TORCH_NCCL_DUMP_ON_TIMEOUT: dump when NCCL's watchdog times a collective out; its monitor
  thread (TORCH_NCCL_ENABLE_MONITORING) does the dumping.
- TORCH_FR_DUMP_TEMP_FILE (older: TORCH_NCCL_DEBUG_INFO_TEMP_FILE): each dump goes to this
  prefix followed by the rank (default ~/.cache/torch/comm_lib_trace_rank_<rank>).
- TORCH_NCCL_DEBUG_INFO_PIPE_FILE: each rank of an NCCL process group makes the named pipe
  <value><rank>.pipe (DumpPipe), and dumps when anything is written to it. gloo makes none.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Union

# From the repository (ansible.cfg's module_utils path), else from the installed
# torch_cluster.cluster collection.
# flight_recorder_env and flight_recorder_prefix live in torch_job, which the launcher's
# controller-side plugins load by path; they are imported here for the node's side.
try:
    from ansible.module_utils.torch_job import (
        FLIGHT_RECORDER_STEM,
        flight_recorder_env,
        flight_recorder_prefix,
    )
    from ansible.module_utils.torch_job_node import job_processes
except ImportError:
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.torch_job import (  # noqa: F401
        FLIGHT_RECORDER_STEM,
        flight_recorder_env,
        flight_recorder_prefix,
    )
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.torch_job_node import (
        job_processes,
    )

# ---------------------------------------------------------------------------------------------
# Stacks


@dataclass(frozen=True)
class Frame:
    """One frame of a Python stack. `file` is py-spy's short name (package-relative for an
    installed package, e.g. torch/distributed/distributed_c10d.py), `path` the full one, `code`
    the source line where the node could read it."""

    function: str
    file: str
    line: int
    path: str = ""
    code: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Frame:
        return cls(
            function=str(data["function"]),
            file=str(data["file"]),
            line=int(data["line"]),
            path=str(data.get("path") or ""),
            code=str(data.get("code") or ""),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"

    def describe(self) -> str:
        """`time.sleep(60) at stall.py:17 in main`, or without its code `stall.py:17 in main`."""
        place = f"{self.where} in {self.function}"
        return f"{self.code} at {place}" if self.code else place


FrameLike = Union[Frame, Mapping[str, Any]]


@dataclass(frozen=True)
class Thread:
    """One thread of a `py-spy dump --json`: its frames innermost first."""

    name: str
    os_thread_id: int | None
    frames: list[Frame]


def parse_dump(text: str) -> list[Thread]:
    """The threads of `py-spy dump --json --pid N` (py-spy 0.4: a list of threads, each with
    its frames innermost first, each frame with name, filename, short_filename and line)."""
    threads = []
    for entry in json.loads(text):
        frames = [
            Frame(
                function=raw["name"],
                file=raw.get("short_filename") or raw["filename"],
                line=int(raw.get("line") or 0),
                path=raw["filename"],
            )
            for raw in entry.get("frames") or []
        ]
        threads.append(
            Thread(
                name=entry.get("thread_name") or "",
                os_thread_id=entry.get("os_thread_id"),
                frames=frames,
            )
        )
    return threads


def main_thread(threads: Sequence[Thread], pid: int) -> Thread | None:
    """The process's main thread: named MainThread, else the one whose OS id is the pid."""
    for thread in threads:
        if thread.name == "MainThread":
            return thread
    for thread in threads:
        if thread.os_thread_id == pid:
            return thread
    return threads[0] if threads else None


# The launcher's wrapper (torch_job.RECORD_WRAPPER, run as record_errors.py), torch's `record`
# that it applies, and runpy stand outside every rank's script: never shown.
_LAUNCHER_FILES = re.compile(
    r"(^|/)(record_errors\.py|runpy\.py|elastic/multiprocessing/errors/__init__\.py)$"
    r"|^<frozen runpy>$"
)
# Installed packages and the standard library, as opposed to the job's own code.
_LIBRARY = re.compile(r"^<|/(site|dist)-packages/|/lib(64)?/python\d")
_COLLECTIVE = "torch/distributed/"


def shown_frames(frames: Sequence[FrameLike]) -> list[Frame]:
    """The frames of a stack without the launcher's."""
    parsed = [f if isinstance(f, Frame) else Frame.from_dict(f) for f in frames]
    return [f for f in parsed if not _LAUNCHER_FILES.search(f.path or f.file)]


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the job's own code (not of a package nor the standard library)."""
    return next((f for f in frames if not _LIBRARY.search(f.path or f.file)), None)


def in_collective(frames: Sequence[Frame]) -> bool:
    return any(_COLLECTIVE in (f.path or f.file) for f in frames)


def describe_stack(frames: Sequence[Frame]) -> str:
    """Where a stack is: its innermost frame, and the job's own frame that led there."""
    innermost, own = frames[0], user_frame(frames)
    if own is None or own == innermost:
        return innermost.describe()
    return f"{innermost.function} ({innermost.where}) from {own.describe()}"


def rank_list(ranks: Sequence[int]) -> str:
    """`0-2, 5` for ranks 0, 1, 2 and 5."""
    spans: list[list[int]] = []
    for rank in sorted(ranks):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"


# How many of the common stack's innermost frames a report keeps.
COMMON_FRAMES = 5


@dataclass
class StallReport:
    """The ranks outside the group that the others are in, and where each one is.

    waiting: the largest group of ranks with the same stack (on a tie, the group inside
    torch.distributed, then the one with the lowest rank); common_frames: that stack's
    innermost frames; outlier_frames: each outlier's innermost frame of the job's own code (its
    innermost frame when it has none); no_stack: ranks without a stack, and why."""

    outliers: list[int]
    waiting: list[int]
    common_frames: list[Frame]
    outlier_frames: dict[int, Frame]
    no_stack: dict[int, str]
    summary: str
    in_collective: bool = False
    groups: list[list[int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "outliers": self.outliers,
            "waiting": self.waiting,
            "in_collective": self.in_collective,
            "common_frames": [f.as_dict() for f in self.common_frames],
            "outlier_frames": [
                {"rank": rank, **frame.as_dict()} for rank, frame in self.outlier_frames.items()
            ],
            "no_stack": [{"rank": rank, "error": why} for rank, why in self.no_stack.items()],
            "groups": self.groups,
            "summary": self.summary,
        }


def stall_outliers(
    ranks: Mapping[int, Sequence[FrameLike] | None], errors: Mapping[int, str] | None = None
) -> StallReport:
    """Group the ranks by their main thread's stack (frames innermost first, the launcher's
    left out) and name the ranks outside the group the others wait in. A rank whose stack is
    None or empty has none (`errors` may say why)."""
    errors = errors or {}
    stacks: dict[int, list[Frame]] = {}
    no_stack: dict[int, str] = {}
    for rank in sorted(ranks):
        frames = shown_frames(ranks[rank] or [])
        if frames:
            stacks[rank] = frames
        else:
            no_stack[rank] = errors.get(rank) or (
                "no Python frames" if ranks[rank] else "no stack was read"
            )
    groups: dict[tuple, list[int]] = {}
    for rank, frames in stacks.items():
        groups.setdefault(tuple((f.function, f.file, f.line) for f in frames), []).append(rank)
    missing = "; ".join(f"rank {rank}: {why}" for rank, why in no_stack.items())
    if not groups:
        summary = f"no rank's stack could be read ({missing})" if missing else "no ranks"
        return StallReport([], [], [], {}, no_stack, summary)

    def weight(members: list[int]) -> tuple[int, bool, int]:
        return (len(members), in_collective(stacks[members[0]]), -members[0])

    ordered = sorted(groups.values(), key=weight, reverse=True)
    waiting, others = ordered[0], sorted(ordered[1:], key=lambda members: members[0])
    common = stacks[waiting[0]]
    collective = in_collective(common)
    verb = "wait in" if collective else "are at"
    if not others:
        every = f"every rank ({rank_list(waiting)})"
        summary = (
            f"{every} waits in {describe_stack(common)}: look at the collective itself or "
            "the network (the NCCL flight recorder, NCCL_DEBUG=INFO)"
            if collective
            else f"{every} is at {describe_stack(common)}: none is elsewhere"
        )
    else:
        elsewhere = "; ".join(
            f"{_ranks(members)} {'is' if len(members) == 1 else 'are'} elsewhere "
            f"({describe_stack(stacks[members[0]])})"
            for members in others
        )
        summary = f"{elsewhere} while {_ranks(waiting)} {verb} {describe_stack(common)}"
    if missing:
        summary += f"; no stack from {missing}"
    outliers = sorted(rank for members in others for rank in members)
    return StallReport(
        outliers=outliers,
        waiting=waiting,
        common_frames=common[:COMMON_FRAMES],
        outlier_frames={rank: user_frame(stacks[rank]) or stacks[rank][0] for rank in outliers},
        no_stack=no_stack,
        summary=summary,
        in_collective=collective,
        groups=[waiting, *others],
    )


# ---------------------------------------------------------------------------------------------
# On a node: the job's processes


@dataclass
class JobProcess:
    """A process of the job, as /proc shows it. `env` may hold secrets: never returned."""

    pid: int
    ppid: int
    argv: list[str]
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict, repr=False)

    def _number(self, name: str) -> int | None:
        value = self.env.get(name, "")
        return int(value) if value.isdigit() else None

    @property
    def rank(self) -> int | None:
        return self._number("RANK")

    @property
    def local_rank(self) -> int | None:
        return self._number("LOCAL_RANK")

    @property
    def world_size(self) -> int | None:
        return self._number("WORLD_SIZE")


# Where systemd's cgroup tree is: cgroup v2, then the hybrid and v1 layouts.
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")


def cgroup_pids(control_group: str, roots: Sequence[str] = CGROUP_ROOTS) -> list[int]:
    """Every process in the cgroup (systemctl's ControlGroup, like
    /system.slice/torch-job-x.service) and in the cgroups below it."""
    relative = control_group.strip("/")
    if not relative:
        return []
    for root in roots:
        top = os.path.join(root, relative)
        if not os.path.isfile(os.path.join(top, "cgroup.procs")):
            continue
        pids: set[int] = set()
        for folder, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(folder, "cgroup.procs")) as handle:
                        pids.update(int(pid) for pid in handle.read().split())
                except OSError:  # removed meanwhile
                    continue
        return sorted(pids)
    return []


def environment_pids(job_id: str) -> list[int]:
    """Every process whose environment carries TORCH_JOB_ID=job_id."""
    return sorted(int(line.split()[0]) for line in job_processes(job_id))


def read_process(pid: int) -> JobProcess | None:
    """The process's parent, argv, folder and environment; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            # The command name in parentheses may hold spaces: the fields follow its ')'.
            ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except (OSError, IndexError, ValueError):
        return None
    env = {}
    for entry in entries:
        key, sep, value = entry.decode(errors="replace").partition("=")
        if sep:
            env[key] = value
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    return JobProcess(pid=pid, ppid=ppid, argv=argv, cwd=cwd, env=env)


def workers_and_agent(
    processes: Sequence[JobProcess],
) -> tuple[list[JobProcess], JobProcess | None]:
    """The rank processes, in rank order, and torchrun's agent (their parent, which has no
    RANK). A rank's own children (DataLoader workers, compile workers) inherit its RANK:
    only the topmost process of each rank counts."""
    by_pid = {p.pid: p for p in processes}
    workers: dict[int, JobProcess] = {}
    for process in sorted(processes, key=lambda p: p.pid):
        rank = process.rank
        parent = by_pid.get(process.ppid)
        if rank is None or (parent is not None and parent.rank == rank):
            continue
        workers.setdefault(rank, process)
    parents = {w.ppid for w in workers.values()}
    agent = next((p for p in processes if p.pid in parents and p.rank is None), None)
    return [workers[rank] for rank in sorted(workers)], agent


def job_processes_of(control_group: str, job_id: str) -> list[JobProcess]:
    """The job's processes: its unit's cgroup, else those that carry its TORCH_JOB_ID."""
    pids = cgroup_pids(control_group) if control_group else []
    if not pids and job_id:
        pids = environment_pids(job_id)
    found = (read_process(pid) for pid in pids if pid != os.getpid())
    return [p for p in found if p is not None]


# ---------------------------------------------------------------------------------------------
# On a node: py-spy


def find_py_spy(process: JobProcess) -> str:
    """py-spy next to the process's Python (the training environment's bin), else on the
    process's PATH, else on ours; empty when none is found."""
    folders = []
    if process.argv and os.path.isabs(process.argv[0]):
        folders.append(os.path.dirname(process.argv[0]))
    folders += [f for f in process.env.get("PATH", "").split(os.pathsep) if f]
    for folder in folders:
        candidate = os.path.join(folder, "py-spy")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("py-spy") or ""


@dataclass
class StackDump:
    """What py-spy said about one process: its JSON and text dumps, or why it could not."""

    pid: int
    json_text: str = ""
    text: str = ""
    frames: list[Frame] = field(default_factory=list)
    error: str = ""


def _run_py_spy(argv: list[str], timeout: float) -> tuple[str, str]:
    """py-spy's output, or the reason it gave none."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return "", f"py-spy gave no dump within {timeout:.0f} s"
    except OSError as error:
        return "", f"cannot run {argv[0]}: {error.strerror}"
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        return "", lines[-1].strip() if lines else f"py-spy exited with {done.returncode}"
    return done.stdout, ""


def _source_line(path: str, line: int, cwd: str, cache: dict[str, list[str]]) -> str:
    if path.startswith("<") or line <= 0:
        return ""
    full = path if os.path.isabs(path) else os.path.join(cwd, path)
    if full not in cache:
        try:
            with open(full, errors="replace") as handle:
                cache[full] = handle.read().splitlines()
        except OSError:
            cache[full] = []
    lines = cache[full]
    return lines[line - 1].strip() if line <= len(lines) else ""


def dump_stacks(py_spy: str, process: JobProcess, timeout: float) -> StackDump:
    """The process's threads in py-spy's JSON and text dumps, and its main thread's frames
    with their source lines."""
    dump = StackDump(pid=process.pid)
    if not py_spy:
        dump.error = "py-spy not found next to the process's Python nor on PATH"
        return dump
    dump.json_text, dump.error = _run_py_spy(
        [py_spy, "dump", "--json", "--pid", str(process.pid)], timeout
    )
    if dump.error:
        return dump
    dump.text, _ = _run_py_spy([py_spy, "dump", "--pid", str(process.pid)], timeout)
    try:
        thread = main_thread(parse_dump(dump.json_text), process.pid)
    except (ValueError, KeyError, TypeError) as error:
        dump.error = f"py-spy's JSON could not be read: {error}"
        return dump
    cache: dict[str, list[str]] = {}
    dump.frames = [
        Frame(f.function, f.file, f.line, f.path, _source_line(f.path, f.line, process.cwd, cache))
        for f in (thread.frames if thread else [])
    ]
    if not dump.frames:
        dump.error = "py-spy found no Python frames in the main thread"
    return dump


def _write(path: str, content: str) -> None:
    with open(path, "w") as handle:
        handle.write(content)
    os.chmod(path, 0o644)


def collect_stacks(
    workers: Sequence[JobProcess],
    agent: JobProcess | None,
    dest: str,
    py_spy: str = "",
    timeout: float = 20,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[str]]:
    """Dump every worker's and the agent's stacks at once into dest (rank<N>.json and .txt,
    agent.json and .txt); each rank's record, the agent's, and the files written."""
    os.makedirs(dest, mode=0o755, exist_ok=True)
    targets: list[tuple[str, JobProcess]] = [(f"rank{w.rank}", w) for w in workers]
    if agent is not None:
        targets.append(("agent", agent))
    if not targets:
        return [], None, []

    def dump(target: tuple[str, JobProcess]) -> StackDump:
        return dump_stacks(py_spy or find_py_spy(target[1]), target[1], timeout)

    with ThreadPoolExecutor(max_workers=min(32, len(targets))) as pool:
        dumps = list(pool.map(dump, targets))
    files, ranks, agent_record = [], [], None
    for (name, process), result in zip(targets, dumps):
        if result.json_text:
            files.append(os.path.join(dest, f"{name}.json"))
            _write(files[-1], result.json_text)
        files.append(os.path.join(dest, f"{name}.txt"))
        _write(files[-1], result.text or f"py-spy dump --pid {process.pid}: {result.error}\n")
        record = {
            "pid": process.pid,
            "frames": [f.as_dict() for f in result.frames],
            "error": result.error,
        }
        if name == "agent":
            agent_record = {**record, "command": " ".join(process.argv)[:300]}
        else:
            ranks.append(
                {
                    "rank": process.rank,
                    "local_rank": process.local_rank,
                    "world_size": process.world_size,
                    **record,
                }
            )
    return ranks, agent_record, files


# ---------------------------------------------------------------------------------------------
# On a node: the NCCL flight recorder


def request_flight_recorder_dumps(pipe_prefix: str) -> tuple[list[int], list[int]]:
    """Write to every rank's pipe (<pipe_prefix><rank>.pipe): the ranks asked, and the ranks
    whose pipe nobody reads (left by an earlier run)."""
    asked, unread = [], []
    for pipe in sorted(glob.glob(glob.escape(pipe_prefix) + "*.pipe")):
        rank = pipe[len(pipe_prefix) : -len(".pipe")]
        try:
            if not rank.isdigit() or not stat.S_ISFIFO(os.stat(pipe).st_mode):
                continue
            # Non-blocking: the rank keeps its end open for reading; without it, ENXIO.
            handle = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ENXIO:
                unread.append(int(rank))
            continue
        try:
            os.write(handle, b"dump\n")
            asked.append(int(rank))
        except OSError:
            unread.append(int(rank))
        finally:
            os.close(handle)
    return asked, unread


def flight_recorder_files(dump_prefix: str) -> dict[str, os.stat_result]:
    """The dump files (not the pipes) under the prefix, with their stat."""
    found = {}
    for path in glob.glob(glob.escape(dump_prefix) + "*"):
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found[path] = info
    return found


def wait_for_dumps(
    dump_prefix: str,
    ranks: Sequence[int],
    since: float,
    timeout: float,
    sleep: float = 0.5,
) -> list[int]:
    """Wait until each rank's dump (<prefix><rank>, or <prefix><rank>_<time>) is newer than
    since and stops growing; the ranks whose dump did not come within timeout."""
    deadline = time.time() + timeout
    sizes: dict[str, int] = {}
    while True:
        files = flight_recorder_files(dump_prefix)
        fresh = {p: i.st_size for p, i in files.items() if i.st_mtime >= since}
        settled = {p for p, size in fresh.items() if sizes.get(p) == size and size > 0}
        sizes = fresh
        pending = [
            rank
            for rank in ranks
            if not any(
                p == f"{dump_prefix}{rank}" or p.startswith(f"{dump_prefix}{rank}_")
                for p in settled
            )
        ]
        if not pending or time.time() >= deadline:
            return pending
        time.sleep(sleep)


def copy_flight_recorder_files(dump_prefix: str, dest: str) -> list[str]:
    os.makedirs(dest, mode=0o755, exist_ok=True)
    copied = []
    for path in sorted(flight_recorder_files(dump_prefix)):
        target = os.path.join(dest, os.path.basename(path))
        shutil.copyfile(path, target)
        os.chmod(target, 0o644)
        copied.append(target)
    return copied


def flight_recorder_settings(workers: Sequence[JobProcess], prefix: str = "") -> tuple[str, str]:
    """The pipe prefix and the dump prefix: both `prefix` when given, else what the ranks'
    environment says. torch's default place for dumps (~/.cache/torch/comm_lib_trace_rank_)
    holds every job's of the user, so it is not looked at."""
    if prefix:
        return prefix, prefix
    env = workers[0].env if workers else {}
    pipe = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
    dumps = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "")
    return pipe, dumps


def flight_recorder_reason(
    pipe_prefix: str, asked: Sequence[int], unread: Sequence[int], late: Sequence[int]
) -> str:
    """Why the flight recorder gave less than one dump per rank asked; empty when it did."""
    if not pipe_prefix:
        return (
            "the job was started without TORCH_NCCL_DEBUG_INFO_PIPE_FILE: no dump could be "
            "asked for"
        )
    if not asked and not unread:
        return (
            f"no rank made a pipe {pipe_prefix}<rank>.pipe: the job uses gloo, which has no NCCL "
            "flight recorder (or its NCCL process group was not made yet)"
        )
    reasons = []
    if unread:
        reasons.append(f"nobody reads the pipe of {_ranks(sorted(unread))} (an earlier run's)")
    if late:
        reasons.append(f"{_ranks(sorted(late))} wrote no dump in time")
    return "; ".join(reasons)
