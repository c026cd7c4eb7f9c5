"""What the launcher decides about a training job, in plain Python.

The train role's modules (plugins/modules/torch_job_*.py) and its watch action
(plugins/action/torch_job_watch.py) hold no decisions of their own: they run
commands and hand what they saw to the functions here, which tests/unit tests
table by table. Everything here uses the standard library only and runs on the
nodes' system Python (3.9 on EL9) as well as on the controller.

A job is one transient systemd unit per node (torch-job-<id>), each running
torchrun; a job's *attempt* is one start of those units. The watcher maps each
node's unit to a NodeState, then the nodes' states to a verdict; after an
attempt the launcher decides whether to restart it, and builds the message the
user reads.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import shlex
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# --- Node-to-node SSH ---------------------------------------------------------
# The one place that says how a node reaches its peers (the trust that the
# ssh_trust role set up): never a prompt, never an unknown host key.
SSH_OPTIONS = (
    "-o", "BatchMode=yes",
    "-o", "StrictHostKeyChecking=yes",
    "-o", "ConnectTimeout=4",
    # A peer that stops answering drops the connection within about 6 s.
    "-o", "ServerAliveInterval=2",
    "-o", "ServerAliveCountMax=2",
)  # fmt: skip
# One connection per peer and local user, reused by later polls and rounds.
SSH_SHARED = (
    "-o", "ControlMaster=auto",
    "-o", "ControlPath=/tmp/torch-job-ssh-%i-%C",
    "-o", "ControlPersist=60",
)  # fmt: skip


def ssh_argv(address: str, argv: Sequence[str], shared: bool = True) -> list[str]:
    """The command that runs argv on the node at address (one shell word per argument)."""
    return ["ssh", *SSH_OPTIONS, *(SSH_SHARED if shared else ()), address, shlex.join(argv)]


# --- A node's unit -----------------------------------------------------------
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
TIMED_OUT = "timed out"
STOPPED = "stopped"
UNREACHABLE = "unreachable"

UNIT_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainCode",
    "ExecMainStatus",
    "ExecMainExitTimestamp",
)
# `systemctl show --timestamp=us+utc` (systemd 248 and later) prints times as
# "Thu 2026-12-03 07:54:44.460777 UTC".
SHOW_TIMESTAMPS = "--timestamp=us+utc"
_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) UTC")
# siginfo's si_code of the main process's end, as systemd reports it in ExecMainCode.
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = "1", "2", "3"


@dataclass(frozen=True)
class NodeState:
    """What one node's unit is doing, in the launcher's words."""

    state: str
    detail: str
    # When the unit's main process ended (seconds since the epoch by that node's clock; 0: not
    # yet, or not known).
    ended: float = 0.0

    @property
    def bad(self) -> bool:
        return self.state in (FAILED, TIMED_OUT, STOPPED, UNREACHABLE)

    def as_dict(self) -> dict[str, object]:
        return {"state": self.state, "detail": self.detail, "ended": self.ended}


def parse_properties(text: str) -> dict[str, str]:
    """`systemctl show --property=...` output as a dict."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch of a systemd timestamp in UTC; 0.0 when there is none."""
    found = _TIMESTAMP.search(text)
    if not found:
        return 0.0
    stamp = datetime.datetime.strptime(found.group(1).split(".")[0], "%Y-%m-%d %H:%M:%S")
    fraction = float("0." + found.group(1).split(".")[1]) if "." in found.group(1) else 0.0
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp() + fraction


def describe_exit(code: str, status: str) -> str:
    """How the unit's main process (torchrun) ended, from ExecMainCode and ExecMainStatus."""
    if code == _CLD_EXITED:
        return f"exit status {status}"
    if code in (_CLD_KILLED, _CLD_DUMPED):
        try:
            name = signal.Signals(int(status)).name
        except ValueError:
            name = f"signal {status}"
        return f"killed by {name}" + (", core dumped" if code == _CLD_DUMPED else "")
    return "still running" if code in ("", "0") else f"ended with code {code}, status {status}"


def unit_state(props: Mapping[str, str]) -> NodeState:
    """Map systemd's view of a job's unit (started with --remain-after-exit) to a NodeState."""
    load, active, sub = (
        props.get("LoadState", ""),
        props.get("ActiveState", ""),
        props.get("SubState", ""),
    )
    result = props.get("Result", "")
    ended = describe_exit(props.get("ExecMainCode", ""), props.get("ExecMainStatus", ""))
    if load == "not-found":
        state, detail = STOPPED, "the unit is gone: stopped and cleared, or never started"
    elif result == "timeout":
        state, detail = TIMED_OUT, f"{active}/{sub}: its time limit (train_timeout) ran out"
    elif active == "failed" or result not in ("success", ""):
        state, detail = FAILED, f"{active}/{sub}, result {result}: torchrun {ended}"
    elif active == "active" and sub == "exited":
        state = SUCCEEDED if ended == "exit status 0" else FAILED
        detail = f"torchrun {ended}" if state == SUCCEEDED else f"{active}/{sub}: torchrun {ended}"
    elif active in ("inactive", "deactivating"):
        state, detail = STOPPED, f"{active}/{sub}: stopped before it ended"
    else:
        state, detail = RUNNING, f"{active}/{sub}"
    ended_at = 0.0 if state == RUNNING else parse_timestamp(props.get("ExecMainExitTimestamp", ""))
    return NodeState(state, detail, ended_at)


# --- The job: a verdict over its nodes -----------------------------------------
JOB_RUNNING = "running"
JOB_SUCCEEDED = "succeeded"
JOB_FAILED = "failed"
JOB_STOPPED = "stopped"  # by playbooks/stop.yml
JOB_TIMED_OUT = "timed out"
JOB_UNWATCHABLE = "unwatchable"  # the master could not be asked
# Rank 0 printed nothing for train_stall_timeout seconds while every unit ran.
JOB_STALLED = "stalled"


@dataclass(frozen=True)
class Verdict:
    job: str
    bad_nodes: tuple[str, ...] = ()


def judge(states: Mapping[str, NodeState], stop_requested: bool) -> Verdict:
    """The job's state from its nodes' (unreachable here means: decided unreachable).

    One bad node decides the job: torchrun on the others would wait for it until a
    collective times out. A time limit wins over everything (it stops every node); a
    requested stop over a failure (stopping the units makes them look failed)."""
    bad = tuple(name for name, node in states.items() if node.bad)
    if any(node.state == TIMED_OUT for node in states.values()):
        return Verdict(JOB_TIMED_OUT, bad)
    if bad:
        return Verdict(JOB_STOPPED if stop_requested else JOB_FAILED, bad)
    if states and all(node.state == SUCCEEDED for node in states.values()):
        return Verdict(JOB_SUCCEEDED)
    return Verdict(JOB_RUNNING)


@dataclass
class Round:
    """One watch round: polls until the job ends or `wait` seconds pass."""

    verdict: Verdict
    states: dict[str, NodeState]
    polls: int


def watch_round(
    poll_all: Callable[[], dict[str, NodeState]],
    stop_requested: Callable[[], bool],
    *,
    wait: float,
    poll: float,
    unreachable_polls: int = 2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stalled: Callable[[], bool] = lambda: False,
    news: Callable[[], bool] = lambda: False,
    min_wait: float = 0.0,
) -> Round:
    """Poll every node until the job ends, or `wait` seconds pass.

    A node that does not answer `unreachable_polls` polls in a row is taken for dead. A
    round does not end while a node has missed fewer polls than that: it is decided
    first, so that the count never restarts from zero in a new round. A job that runs on
    every node but `stalled()` holds for (rank 0 silent too long) ends the round as stalled.
    A running job's round also ends once `min_wait` seconds have passed and `news()` holds
    (rank 0's new lines to show, when the controller follows them)."""
    misses: dict[str, int] = {}
    begun = clock()
    deadline = begun + wait
    polls = 0
    while True:
        states = poll_all()
        polls += 1
        for name, node in states.items():
            misses[name] = misses.get(name, 0) + 1 if node.state == UNREACHABLE else 0
        decided = {
            name: node
            for name, node in states.items()
            if node.state != UNREACHABLE or misses[name] >= unreachable_polls
        }
        undecided = len(decided) < len(states)
        verdict = judge(
            decided, stop_requested() if any(n.bad for n in decided.values()) else False
        )
        if undecided and verdict.job == JOB_SUCCEEDED:
            verdict = Verdict(JOB_RUNNING)
        if verdict.job == JOB_RUNNING and not undecided and stalled():
            verdict = Verdict(JOB_STALLED)
        if verdict.job != JOB_RUNNING or (clock() >= deadline and not undecided):
            return Round(verdict, states, polls)
        if not undecided and clock() >= begun + min_wait and news():
            return Round(verdict, states, polls)
        sleep(poll)


def first_failure(states: Mapping[str, NodeState], bad: Sequence[str]) -> list[str]:
    """The bad nodes, the one whose unit ended first leading (the others mostly followed it:
    torchrun stops a node's workers when a peer's connection breaks). Nodes with no end
    time (unreachable, gone) come last, in their given order. The times come from each
    node's own clock, so the order is as good as the nodes' clock sync."""
    ended = [name for name in bad if states[name].ended > 0]
    rest = [name for name in bad if name not in ended]
    return sorted(ended, key=lambda name: states[name].ended) + rest


# --- Progress: rank 0's log ---------------------------------------------------
# torchrun tees each worker's output into the node's log with this prefix (the launcher sets
# it through TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE); torch adds its own "[rankN]:" to the
# traceback of an uncaught exception. Lines without a prefix are torchrun's own.
RANK_PREFIX_TEMPLATE = "[rank${rank}]: "
_RANK_LINE = re.compile(r"^\[rank(\d+)\]: ?(?:\[rank\d+\]: ?)?(.*)$")


def rank_line(line: str) -> tuple[int, str] | None:
    """(rank, the worker's own text) of a line a worker wrote, else None."""
    found = _RANK_LINE.match(line)
    return (int(found.group(1)), found.group(2)) if found else None


def progress_matcher(prefixes: Sequence[str], regex: str = "") -> Callable[[str], bool]:
    """A line counts as progress when it starts with one of the prefixes or matches regex."""
    pattern = re.compile(regex) if regex else None
    starts = tuple(prefixes)

    def matches(line: str) -> bool:
        return bool(starts and line.startswith(starts)) or bool(pattern and pattern.search(line))

    return matches


@dataclass(frozen=True)
class LogScan:
    progress: str  # rank 0's newest progress line in the part read, or ""
    last_line: str  # rank 0's newest non-empty line in the part read, or ""
    offset: int  # where the next scan starts: after the last complete line read


def scan_log(
    path: str,
    offset: int,
    matches: Callable[[str], bool],
    chunk: int = 1 << 20,
    sink: Callable[[str], None] | None = None,
) -> LogScan:
    """Read rank 0's lines of the log from byte `offset` to its last complete line (without
    their rank prefix); each non-empty one also goes to `sink` (follow). A log that has
    shrunk below the offset (replaced) is read from its start."""
    progress = last = ""
    try:
        with open(path, "rb") as log:
            size = os.fstat(log.fileno()).st_size
            if size < offset:
                offset = 0
            log.seek(offset)
            pending = b""
            while True:
                data = log.read(chunk)
                if not data:
                    break
                lines = (pending + data).split(b"\n")
                pending = lines.pop()
                offset += len(data)
                for raw in lines:
                    worker = rank_line(raw.decode(errors="replace").rstrip("\r"))
                    if worker and worker[0] == 0 and worker[1].strip():
                        last = worker[1]
                        if sink:
                            sink(last)
                        if matches(last):
                            progress = last
            offset -= len(pending)
    except OSError:
        pass
    return LogScan(progress, last, offset)


class RankZeroLog:
    """Rank 0's part of the master's log, read a little at each poll: the newest progress
    line, the newest line, and how long rank 0 has been quiet (for the stall watchdog).
    `quiet_for`: how long it had been quiet already when this reading began."""

    def __init__(
        self,
        path: str,
        offset: int,
        matches: Callable[[str], bool],
        quiet_for: float = 0.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        sink: Callable[[str], None] | None = None,
    ) -> None:
        self.path, self.offset, self.matches, self.clock = path, offset, matches, clock
        self.progress = self.last_line = ""
        self.last_output = clock() - quiet_for
        self.sink = sink

    def read(self) -> None:
        scan = scan_log(self.path, self.offset, self.matches, sink=self.sink)
        self.offset = scan.offset
        if scan.last_line:
            self.last_line, self.last_output = scan.last_line, self.clock()
        if scan.progress:
            self.progress = scan.progress

    def quiet_for(self) -> float:
        return self.clock() - self.last_output

    def stalled(self, timeout: float) -> bool:
        """Read on; whether rank 0 has been quiet for `timeout` seconds (0: never)."""
        self.read()
        return timeout > 0 and self.quiet_for() >= timeout


def last_lines(text: str, lines: int) -> str:
    """The last lines the workers wrote in a log's text (torchrun's own lines left out), or its
    last lines when no worker wrote any (torchrun failed before it started them)."""
    everything = text.splitlines()
    workers = [line for line in everything if rank_line(line)]
    return "\n".join((workers or everything)[-lines:]) + "\n" if everything else ""


def merge_tails(watched: Mapping[str, str], stopped: Mapping[str, str]) -> dict[str, str]:
    """Each failed node's last lines: those its stop read from this attempt's part of its log
    (complete: torchrun had ended), else those the watcher read when it saw the node fail (a
    node that no longer answered the stop). The first failure, told by the ranks' own failure
    times, can be a node whose unit the watcher still saw running."""
    return {**watched, **{name: text for name, text in stopped.items() if text}}


# --- Failures: which rank failed first, and what followed --------------------------
# The launcher runs the script through this wrapper (written beside the job's log), so that
# an uncaught exception leaves torchrun an error file (torch's own `record`): torchrun then
# prints the exception's traceback in its summary, rank by rank. The script itself runs
# unchanged, as `python script.py ARGS` would run it. Once it has returned, the wrapper ends
# the process the way Python's shutdown starts it (the script's other threads joined, its
# atexit handlers run, its output flushed), then leaves without the native libraries'
# teardown: with gloo (torch 2.14) that teardown now and then aborts a process whose work is
# done, after destroy_process_group ("terminate called without an active exception", seen in
# 2 of about 100 jobs here), and torchrun would report a finished job as failed.
# multiprocessing's children end the same way (os._exit after their target returns).
RECORD_WRAPPER = '''"""Run a training script under torch's error recording (torch-cluster)."""
import atexit
import os
import runpy
import sys
import threading

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def finish() -> None:
    """End a process whose script has returned, as Python's shutdown would, without the
    native libraries' teardown."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    finish()
'''

# Failures that follow another rank's: its peers lose their connections, and torchrun stops
# a failed node's other workers with SIGTERM.
_CONSEQUENCE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|communicator was aborted"
    r"|DistNetworkError",
)
_SUMMARY_ENTRY = re.compile(r"^\[\d+\]:$")
_SUMMARY_FIELD = re.compile(r"^  (time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
_SUMMARY_RULE = re.compile(r"^(=+|-+)$")


@dataclass
class RankFailure:
    """One process of the job that failed: a worker (rank >= 0), or a node's torchrun
    (rank -1, when no worker's failure is known there)."""

    node: str
    rank: int
    local_rank: int
    exitcode: int
    time: float  # seconds since the epoch; 0.0 when unknown
    message: str  # "ValueError: boom", "killed by SIGKILL", "exit status 2"
    traceback: str = ""
    consequence: bool = False

    def describe(self) -> str:
        if self.rank < 0:
            return f"{self.node}: {self.message}"
        return f"{self.node}, rank {self.rank} (local rank {self.local_rank}): {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _summary_time(text: str) -> float:
    """torchrun's "2026-12-03_09:23:50", in the node's local time (this runs on the node)."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%d_%H:%M:%S"))
    except ValueError:
        return 0.0


def _failure_message(exitcode: int, traceback: str) -> str:
    """The exception ("ValueError: boom"), and how the process ended when a signal did it."""
    lines = [line.strip() for line in traceback.splitlines() if line.strip()]
    exception = lines[-1] if lines and lines[0].startswith("Traceback") else ""
    if exitcode >= 0:
        return exception or f"exit status {exitcode}"
    try:
        killed = f"killed by {signal.Signals(-exitcode).name}"
    except ValueError:
        killed = f"killed by signal {-exitcode}"
    return f"{exception}; then {killed}" if exception else killed


def parse_torchrun_failures(text: str, node: str) -> list[RankFailure]:
    """The failed workers in torchrun's summary of a failed run (ChildFailedError), as one
    node's log shows it: each with its rank, exit code, time, and, when the worker left an
    error file, its exception and traceback."""
    failures: list[RankFailure] = []
    fields: dict[str, str] | None = None
    key = ""

    def close() -> None:
        if fields and "rank" in fields:
            rank = re.match(r"(-?\d+) \(local_rank: (\d+)\)", fields["rank"])
            code = re.match(r"(-?\d+)", fields.get("exitcode", ""))
            if rank and code:
                exitcode = int(code.group(1))
                trace = fields.get("traceback", "").rstrip()
                message = _failure_message(exitcode, trace)
                # torchrun stops a failed node's other workers with SIGTERM.
                stopped = exitcode == -signal.SIGTERM
                failures.append(
                    RankFailure(
                        node=node,
                        rank=int(rank.group(1)),
                        local_rank=int(rank.group(2)),
                        exitcode=exitcode,
                        time=_summary_time(fields.get("time", "")),
                        message=message,
                        traceback=trace if trace.startswith("Traceback") else "",
                        consequence=stopped or bool(_CONSEQUENCE.search(message)),
                    )
                )

    for line in text.splitlines():
        if _SUMMARY_ENTRY.match(line):
            close()
            fields, key = {}, ""
        elif fields is not None:
            field_match = _SUMMARY_FIELD.match(line)
            if field_match:
                key = field_match.group(1)
                fields[key] = field_match.group(2)
            elif _SUMMARY_RULE.match(line.strip()) or not line.startswith("  "):
                close()
                fields = None
            elif key == "traceback":
                fields[key] += "\n" + line[2:]
    close()
    return failures


def order_failures(failures: Sequence[RankFailure]) -> list[RankFailure]:
    """The first failure first: a failure that is not a consequence of another's, earliest
    (each node's own clock), lowest rank; the consequences after it. A rank's failure
    reported on two nodes (it does not happen) would count once."""
    unique = {(f.node, f.rank, f.local_rank): f for f in failures}
    return sorted(unique.values(), key=lambda f: (f.consequence, f.time or float("inf"), f.rank))


# Frames of the launcher's wrapper and of runpy, which stand between torch's `record` and the
# script's own frames in a recorded traceback.
_LAUNCHER_FRAME = re.compile(
    r'^  File "(.*/elastic/multiprocessing/errors/__init__\.py'
    r'|.*/record_errors\.py|<frozen runpy>)"'
)


def script_traceback(traceback: str) -> list[str]:
    """A recorded traceback without the frames the launcher's wrapper adds."""
    kept: list[str] = []
    skipping = False
    for line in traceback.splitlines():
        if line.startswith("  File "):
            skipping = bool(_LAUNCHER_FRAME.match(line))
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return kept


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure_report(failures: Sequence[RankFailure], tails: Mapping[str, str]) -> list[str]:
    """The lines of the message: the first failure with its traceback (or, without one, the
    last lines of its node's log), then the others."""
    if not failures:
        return []
    first, *others = failures
    lines = [f"First failure: {first.describe()}"]
    if first.traceback:
        lines += ["    " + line for line in script_traceback(first.traceback)[-16:]]
    elif first.node in tails:
        lines.append(f"  Last lines of {first.node}'s log:")
        lines += ["    " + line for line in tails[first.node].rstrip("\n").splitlines()]
    if others:
        lines.append("Then, as consequences:" if all(f.consequence for f in others) else "Then:")
        lines += [f"  {_short(f.describe())}" for f in others]
    return lines


# --- NCCL's flight recorder ------------------------------------------------------
# What the dumps and pipes are called in the folder the launcher gives each job.
FLIGHT_RECORDER_STEM = "nccl_trace_rank_"


def flight_recorder_prefix(folder: str) -> str:
    """The prefix of the dump files and of the pipes in folder: <folder>/nccl_trace_rank_."""
    return os.path.join(folder, FLIGHT_RECORDER_STEM)


def flight_recorder_env(folder: str) -> dict[str, str]:
    """What the launcher sets on every job so that NCCL's flight recorder records, dumps into
    folder on a collective's timeout, and dumps on request through a pipe there (the folder
    must exist and be writable by the job's user). TORCH_NCCL_TRACE_BUFFER_SIZE is left at
    ProcessGroupNCCL's default (2000): setting it makes every rank warn that it is deprecated."""
    prefix = flight_recorder_prefix(folder)
    return {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_ENABLE_MONITORING": "1",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": prefix,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": prefix,
    }


# --- Staging: what the controller's files look like ------------------------------
def tree_digest(root: str, skip: Sequence[str] = ("__pycache__",), content: bool = True) -> str:
    """One sha256 over a folder's files, in sorted order: each file's relative path and its
    content (content=True), or its size and modification time (content=False: what rsync's
    quick check compares, for data too large to read at every launch). "" when root is no
    folder. Files under a folder named in `skip` do not count."""
    if not os.path.isdir(root):
        return ""
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [name for name in dirs if name not in skip]
        files += [os.path.join(folder, name) for name in names]
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: os.path.relpath(p, root)):
        digest.update(os.path.relpath(path, root).encode() + b"\0")
        if content:
            digest.update(_file_sha256(path))
        else:
            stat = os.stat(path)
            digest.update(f"{stat.st_size} {int(stat.st_mtime)}\0".encode())
    return digest.hexdigest()


def tree_size(root: str, skip: Sequence[str] = ("__pycache__",)) -> int:
    """The bytes of a folder's files, those under a folder named in `skip` left out (as
    tree_digest counts them); 0 when root is no folder."""
    total = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = [name for name in dirs if name not in skip]
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in names)
    return total


def _file_sha256(path: str) -> bytes:
    content = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            content.update(block)
    return content.digest()


def subtrees_digest(root: str, names: Sequence[str]) -> str:
    """tree_digest (size and time) of the named entries of root, together: the part of a
    node's data folder that came from the controller. "" when one of them is missing."""
    digest = hashlib.sha256()
    for name in sorted(names):
        path = os.path.join(root, name)
        if os.path.isdir(path):
            digest.update(f"{name}/\0{tree_digest(path, (), content=False)}\0".encode())
        elif os.path.isfile(path):
            stat = os.stat(path)
            digest.update(f"{name}\0{stat.st_size} {int(stat.st_mtime)}\0".encode())
        else:
            return ""
    return digest.hexdigest()


# --- Inputs ---------------------------------------------------------------------
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# How a job is started (plugins/module_utils/slurm_job.py for slurm), and what may be exported.
LAUNCHERS = ("systemd", "slurm")
EXPORTS = ("", "sbatch")
NPROC = re.compile(r"^(auto|[1-9][0-9]*)$")


def input_problems(inputs: Mapping[str, Any]) -> list[str]:
    """One sentence per bad job input, naming only what is wrong."""
    problems = []
    job_id = str(inputs.get("job_id", ""))
    if job_id and not JOB_ID.match(job_id):
        problems.append(
            f"job_id must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or "
            f"digit (got {job_id!r})"
        )
    nproc = str(inputs.get("nproc", "auto"))
    if not NPROC.match(nproc):
        problems.append(f"nproc must be a positive integer or auto (got {nproc!r})")
    numbers = (
        "train_timeout",
        "train_max_restarts",
        "train_startup_timeout",
        "train_min_nodes",
        "train_stall_timeout",
        "train_output_copy_interval",
        "train_code_spread_mb",
    )
    for name in numbers:
        if name not in inputs:
            continue
        value = str(inputs[name])
        if not value.isdigit():
            problems.append(f"{name} must be a whole number, 0 or more (got {value!r})")
    problems += watch_problems(inputs)
    user, trusted = inputs.get("train_user"), str(inputs.get("ssh_trust_user", ""))
    if trusted and user != trusted:
        problems.append(
            f"train_user ({user}) must be ssh_trust_user ({trusted}): the master watches the other "
            "nodes over SSH as that user. Set only ssh_trust_user; train_user follows it"
        )
    problems += confinement_problems(inputs)
    nodes = list(inputs.get("nodes", []))
    outside = [host for host in inputs.get("hosts", []) if host not in nodes]
    if outside:
        problems.append(f"{', '.join(outside)} not in train_nodes ({', '.join(nodes)})")
    for pattern in inputs.get("train_result_files", []):
        if os.path.isabs(pattern) or ".." in pattern.replace("\\", "/").split("/"):
            problems.append(
                f"train_result_files must be relative to the output folder and stay in it "
                f"(got {pattern!r})"
            )
    problems += launch_problems(inputs) + output_problems(inputs) + node_loss_problems(inputs)
    regex = str(inputs.get("train_progress_regex", ""))
    if regex:
        try:
            re.compile(regex)
        except re.error as err:
            problems.append(f"train_progress_regex is not a regular expression ({err}): {regex!r}")
    return problems


def watch_problems(inputs: Mapping[str, Any]) -> list[str]:
    """The watch's own inputs: how often it shows progress, how many lines it follows."""
    problems = []
    interval = str(inputs.get("train_watch_interval", "1"))
    if not interval.isdigit() or int(interval) < 1:
        problems.append(
            f"train_watch_interval must be a whole number of seconds, 1 or more (got {interval!r})"
        )
    lines = str(inputs.get("train_follow_max_lines", "1"))
    if not lines.isdigit() or int(lines) < 1:
        problems.append(
            f"train_follow_max_lines must be a whole number of lines, 1 or more (got {lines!r})"
        )
    return problems


def confinement_problems(inputs: Mapping[str, Any]) -> list[str]:
    """root as the training user (unless allowed), and the paths a confined job may write to."""
    problems = []
    if inputs.get("train_user") == "root" and not inputs.get("allow_root", False):
        problems.append(
            "train_user is root: every job would run as root on every node, so one script, or "
            "one node taken over, would own the whole cluster. Use the unprivileged training user "
            "(ssh_trust_user, default torch, created by provision.yml), or set "
            "cluster_allow_root: true to accept that risk"
        )
    for path in inputs.get("train_writable_paths", []):
        if not os.path.isabs(str(path)):
            problems.append(f"train_writable_paths must hold absolute paths (got {path!r})")
    return problems


def output_problems(inputs: Mapping[str, Any]) -> list[str]:
    """Where the job's output folder is, and how many copies of it are kept."""
    problems = []
    copies = str(inputs.get("train_output_copies", "1"))
    if not copies.isdigit() or int(copies) < 1:
        problems.append(
            f"train_output_copies must be a whole number, 1 or more (got {copies!r}): without a "
            "shared folder, the master's output folder is copied to that many other nodes"
        )
    shared = str(inputs.get("train_shared_dir", "auto"))
    if shared not in ("auto", "") and not shared.startswith("/"):
        problems.append(
            f"train_shared_dir must be auto, empty, or an absolute path (got {shared!r})"
        )
    return problems


def node_loss_problems(inputs: Mapping[str, Any]) -> list[str]:
    """train_min_nodes and train_spare_group against the training group."""
    problems = []
    nodes = list(inputs.get("nodes", []))
    group = str(inputs.get("train_spare_group", ""))
    spare_hosts = inputs.get("spare_hosts")
    spares = [name for name in nodes if name in (spare_hosts or [])]
    if group and spare_hosts is None:
        problems.append(f"train_spare_group names {group!r}, which is not a group of the inventory")
    elif group:
        outside = [name for name in spare_hosts or [] if name not in nodes]
        if outside:
            problems.append(
                f"the spares {', '.join(outside)} of train_spare_group {group!r} are not in the "
                f"training group ({', '.join(nodes)}): a spare must be in it too, so that "
                "playbooks/provision.yml provisions it and every node trusts it"
            )
        if nodes and len(spares) == len(nodes):
            problems.append(
                f"every node of the training group is a spare (train_spare_group {group!r}): "
                "the job would start on none"
            )
    minimum = str(inputs.get("train_min_nodes", "0"))
    size = len(nodes) - len(spares)
    if minimum.isdigit() and int(minimum) > size:
        problems.append(
            f"train_min_nodes ({minimum}) is more than the {size} node(s) the job starts on"
        )
    uses = (minimum.isdigit() and int(minimum) > 0) or bool(group)
    if uses and str(inputs.get("train_launcher", "systemd")) == "slurm":
        problems.append(
            "train_min_nodes and train_spare_group work with train_launcher=systemd: through "
            "Slurm, a job runs on the nodes Slurm gives it (see Slurm's --requeue)"
        )
    nofile = str(inputs.get("train_limit_nofile", "1"))
    if not nofile.isdigit() or int(nofile) < 1:
        problems.append(f"train_limit_nofile must be a whole number, 1 or more (got {nofile!r})")
    return problems


def launch_problems(inputs: Mapping[str, Any]) -> list[str]:
    """The launcher's name and the export's, checked."""
    problems = []
    launcher = str(inputs.get("train_launcher", "systemd"))
    if launcher not in LAUNCHERS:
        problems.append(
            f"train_launcher must be one of {', '.join(LAUNCHERS)} (got {launcher!r}): systemd "
            "starts torchrun on every node itself, slurm submits the job to the Slurm cluster "
            "that playbooks/slurm.yml sets up"
        )
    export = str(inputs.get("train_export", ""))
    if export not in EXPORTS:
        problems.append(
            f"train_export must be empty or sbatch (got {export!r}): sbatch writes the job's "
            "batch script to runs/<job_id>/job.sbatch and runs nothing"
        )
    return problems


# --- After an attempt: restart or report -------------------------------------------
@dataclass
class Attempt:
    """One start of the job's units, and how it ended."""

    number: int
    outcome: str  # a JOB_* verdict
    nodes: dict[str, dict[str, object]] = field(default_factory=dict)  # name -> NodeState dict
    failed_nodes: list[str] = field(default_factory=list)  # first failure first
    unreachable_nodes: list[str] = field(default_factory=list)
    training_started: bool = False
    started_at: float = 0.0  # seconds since the epoch, by the controller's clock
    seconds: float = 0.0
    tails: dict[str, str] = field(default_factory=dict)
    error: str = ""  # why the master could not be watched, or a node's unit not started
    teardown_problems: list[str] = field(default_factory=list)
    # Every failed process (RankFailure.as_dict()), the first failure first.
    failures: list[dict[str, Any]] = field(default_factory=list)
    restarted: bool = False
    not_restarted_because: str = ""
    # Without a shared folder: what keeping the output folders in step cost before and after
    # the attempt (torch_job_sync's seconds, bytes, files, transfers, by phase).
    sync: dict[str, Any] = field(default_factory=dict)
    # The attempt's nodes in rank order; the nodes it lost (name -> why), the spares that took
    # their places (lost -> spare), and the next attempt's nodes (when it restarts).
    nodes_used: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, str] = field(default_factory=dict)
    next_nodes: list[str] = field(default_factory=list)
    # Where its rank 0 found the job's files (its checkpoint) at the start.
    resumed_from: str = ""
    # A stalled attempt: where each rank was (torch_job_stall.stall_outliers) and the stacks.
    stall: dict[str, Any] = field(default_factory=dict)
    # Copies of the master's output folder made while it ran (no shared folder).
    copies_during: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)

    @property
    def first_failure(self) -> RankFailure | None:
        return RankFailure(**self.failures[0]) if self.failures else None


def job_failures(
    nodes: Mapping[str, Mapping[str, Any]], reported: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[RankFailure]:
    """Every failure of an attempt, the first first: the workers' (from each node's torchrun
    summary), and the node's own (its unit's state) for a node that failed, timed out or
    stopped answering with no worker's failure known there."""
    failures = [RankFailure(**failure) for found in reported.values() for failure in found]
    known = {failure.node for failure in failures}
    for name, node in nodes.items():
        if name not in known and node.get("state") in (FAILED, UNREACHABLE):
            detail = f"{node['state']} ({node.get('detail', '')})"
            ended = float(node.get("ended") or 0.0)
            failures.append(RankFailure(name, -1, -1, 0, ended, detail))
    return order_failures(failures)


def teardown_problems(teardown: Mapping[str, Mapping[str, object]]) -> tuple[list[str], list[str]]:
    """(unreachable nodes, other problems) from every node's stop result (torch_job_unit
    state=absent, or Ansible's own result for a node it could not reach or skipped)."""
    unreachable, problems = [], []
    for name, result in teardown.items():
        if result.get("unreachable"):
            unreachable.append(name)
        elif result.get("skipped"):
            unreachable.append(name)  # the watch had found it unreachable
        elif result.get("failed"):
            problems.append(
                f"{name}: the job could not be stopped: {result.get('msg', 'no reason given')}"
            )
        else:
            left = list(result.get("leftovers") or [])
            if left:
                problems.append(f"{name}: processes of the job are left: " + "; ".join(left[:5]))
            if result.get("port_users"):
                problems.append(
                    f"{name}: the master port is in use by {', '.join(result['port_users'])}"  # type: ignore[arg-type]
                )
    return unreachable, problems


def time_left(timeout: int, started_at: float, now: float) -> int:
    """Whole seconds left of the job's time limit (train_timeout, counted from the first
    attempt's start), for the next attempt's units; -1 when the job has no limit."""
    if timeout <= 0:
        return -1
    return max(0, int(timeout - (now - started_at)))


def decide_restart(
    attempt: Attempt,
    max_restarts: int,
    startup_timeout: int,
    seconds_left: int = -1,
    lost_why_not: str | None = None,
) -> str | None:
    """None when the job should start again, else why not: the first rule that holds.

    `lost_why_not`: for an attempt that lost nodes (attempt.left), why the job cannot go on
    without them ("" when it can, job_nodes.plan_nodes); None: it cannot, for the default
    reason."""
    lost = bool(attempt.left or attempt.unreachable_nodes)
    if lost_why_not is None:
        lost_why_not = (
            f"{', '.join(attempt.left or attempt.unreachable_nodes)} stopped answering: the job "
            "does not restart on fewer nodes"
        )
    master_lost = attempt.outcome == JOB_UNWATCHABLE and bool(attempt.unreachable_nodes)
    rules = (
        (attempt.outcome == JOB_SUCCEEDED, "it succeeded"),
        (attempt.outcome == JOB_STOPPED, "it was stopped by playbooks/stop.yml"),
        (attempt.outcome == JOB_TIMED_OUT, "its time limit (train_timeout) ran out"),
        (
            attempt.outcome == JOB_UNWATCHABLE and not master_lost,
            "the master could not be watched",
        ),
        (max_restarts == 0, "train_max_restarts is 0"),
        (lost and bool(lost_why_not), lost_why_not),
        (
            bool(attempt.teardown_problems),
            "the nodes are not clean after the stop: " + "; ".join(attempt.teardown_problems),
        ),
        (
            not attempt.training_started and not lost,
            "it failed at start-up (before rank 0 printed a progress line, within "
            f"train_startup_timeout={startup_timeout} s): a restart would fail the same way",
        ),
        (
            attempt.number > max_restarts,
            f"it has restarted {max_restarts} time(s) already (train_max_restarts={max_restarts})",
        ),
        (seconds_left == 0, "no time is left of its time limit (train_timeout)"),
    )
    return next((why for holds, why in rules if holds), None)


def stall_report(stall: Mapping[str, Any]) -> list[str]:
    """The lines of the message on a stalled attempt: how long rank 0 was quiet, where the
    ranks were, and where their stacks are."""
    lines = [
        f"Rank 0 printed nothing for {stall.get('quiet_for', 0):.0f} s "
        f"(train_stall_timeout={stall.get('timeout', 0)}) while every node's unit ran."
    ]
    if stall.get("summary"):
        lines.append(f"Where the ranks were: {stall['summary']}")
    if stall.get("folder"):
        lines.append(
            f"Every rank's Python stacks (py-spy) and NCCL's flight recorder: {stall['folder']}/"
        )
    return lines


def describe_attempt(attempt: Attempt) -> str:
    """One line: how an attempt ended, the first failure first."""
    if attempt.outcome == JOB_SUCCEEDED:
        return f"attempt {attempt.number}: succeeded after {attempt.seconds:.0f} s"
    if attempt.outcome == JOB_UNWATCHABLE:
        return f"attempt {attempt.number}: the master could not be watched: {attempt.error}"
    if attempt.outcome == JOB_STALLED:
        where = attempt.stall.get("summary") or "no stacks could be collected"
        return f"attempt {attempt.number}: stalled after {attempt.seconds:.0f} s: {where}"
    first = attempt.first_failure
    if first:
        others = len(attempt.failures) - 1
        what = first.describe() + (f" (first of {others + 1} failures)" if others else "")
    else:
        what = attempt.error or attempt.outcome
    return f"attempt {attempt.number}: {attempt.outcome} after {attempt.seconds:.0f} s: {what}"


def node_changes(attempt: Attempt) -> list[str]:
    """Sentences on the nodes an attempt lost and what takes their places."""
    lines = [
        f"{name} left the job ({why})"
        + (
            f"; the spare {attempt.replaced[name]} takes its place"
            if name in attempt.replaced
            else ""
        )
        for name, why in attempt.left.items()
    ]
    if attempt.left and attempt.next_nodes:
        master = attempt.next_nodes[0]
        changed = " (a new master)" if attempt.nodes_used[:1] != [master] else ""
        lines.append(
            f"The next attempt runs on {', '.join(attempt.next_nodes)} "
            f"({len(attempt.next_nodes)} of {len(attempt.nodes_used)} node(s), master "
            f"{master}{changed}); {', '.join(attempt.left)} will not be used again in this job"
        )
    return lines


def success_message(job_id: str, attempts: Sequence[Attempt]) -> str:
    """A job that succeeded; after restarts, the last attempt's nodes and where it resumed."""
    if len(attempts) == 1:
        return f"Job {job_id} succeeded."
    last = attempts[-1]
    where = f" on {', '.join(last.nodes_used)}" if last.nodes_used else ""
    resumed = f", resumed from {last.resumed_from}" if last.resumed_from else ""
    return (
        f"Job {job_id} succeeded after {len(attempts) - 1} restart(s): attempt {last.number} "
        f"ran{where}{resumed}."
    )


def restart_message(job_id: str, attempt: Attempt, max_restarts: int) -> str:
    if attempt.left:
        changes = ". ".join(node_changes(attempt))
        return (
            f"Job {job_id}: {describe_attempt(attempt)}. {changes}. Restarting the job from the "
            f"newest checkpoint copy (restart {attempt.number} of {max_restarts})."
        )
    return (
        f"Job {job_id}: {describe_attempt(attempt)}. Every node answers and is clean: restarting "
        f"the whole job from its checkpoint (restart {attempt.number} of {max_restarts})."
    )


def final_message(
    job_id: str,
    attempts: Sequence[Attempt],
    *,
    run_dir: str,
    timeout: int,
    max_restarts: int,
    stop_hint: str,
) -> str:
    """What the user reads when a job did not succeed: how it ended, each attempt, why it
    was not restarted, the first failure with its traceback and what followed it, and where
    everything is."""
    last = attempts[-1]
    how = {
        JOB_STOPPED: "was stopped by playbooks/stop.yml",
        JOB_TIMED_OUT: f"timed out after {timeout} s",
        JOB_UNWATCHABLE: "could not be watched",
        JOB_STALLED: "stalled",
    }.get(last.outcome, "failed")
    answering = " that answers" if last.unreachable_nodes else ""
    lines = [f"Job {job_id} {how}; it is stopped on every node{answering}."]
    if len(attempts) > 1:
        lines.append(f"It was restarted {len(attempts) - 1} time(s); each attempt:")
        lines += [f"  {describe_attempt(a)}" for a in attempts]
    if last.outcome in (JOB_FAILED, JOB_STALLED) and (max_restarts > 0 or last.left):
        again = " again" if len(attempts) > 1 else ""
        lines.append(f"Not restarted{again}: {last.not_restarted_because}.")
    if last.outcome == JOB_UNWATCHABLE:
        lines.append(f"The master could not be watched: {last.error}")
    if last.outcome == JOB_STALLED:
        lines += stall_report(last.stall)
    if last.outcome == JOB_FAILED:
        failures = [RankFailure(**failure) for failure in last.failures]
        lines += failure_report(failures, last.tails)
    for name in last.unreachable_nodes:
        lines.append(
            f"{name} stopped answering: its processes could not be stopped. They end at the "
            f"trainer's collective timeout; to stop them at once, run {stop_hint} when {name} "
            "answers again."
        )
    lines += last.teardown_problems
    lines.append(f"Logs: {run_dir}/ (attempts.json, failure.json)")
    return "\n".join(lines)
