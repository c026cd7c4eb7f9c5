"""Every rank's Python stack, dumped on a stalled job's node with py-spy and written beside the
job's log. Reading and writing only (job/stall.py judges). Standard library only: it runs on the
nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.processes import JobProcess
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.stall import (
    Frame,
    main_thread,
    parse_dump,
)


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
