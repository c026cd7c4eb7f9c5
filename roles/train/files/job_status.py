"""Watch one training job on every node, from the master; print its state as JSON.

Run by the launcher on the master node, once per round. It asks systemd on
every node (this one directly, the others over SSH with the nodes' mutual
trust) for the state of the job's unit, and returns as soon as the job has
failed or finished, or after --wait seconds with the latest progress line.

Only the standard library: it runs on the system Python of any node.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus")
SSH = (
    "ssh",
    "-o", "BatchMode=yes",
    "-o", "StrictHostKeyChecking=yes",
    "-o", "ConnectTimeout=4",
    # A peer that stops answering drops the shared connection within about 6 s.
    "-o", "ServerAliveInterval=2",
    "-o", "ServerAliveCountMax=2",
    # One connection per peer for the whole round, not one per poll.
    "-o", "ControlMaster=auto",
    "-o", "ControlPath=/tmp/torch-job-ssh-%C",
    "-o", "ControlPersist=60",
)  # fmt: skip
Completed = subprocess.CompletedProcess[str]
# Left in the job's folder by playbooks/stop.yml.
STOP_REQUESTED = "stop-requested"
# A peer that does not answer this many polls in a row is taken for dead: with
# polls every 2 s and ANSWER_TIMEOUT, that is decided within about 20 s.
UNREACHABLE_POLLS = 2
ANSWER_TIMEOUT = 8


def remote(address: str | None, argv: list[str], timeout: float = ANSWER_TIMEOUT) -> Completed:
    """Run argv here (address None) or on the node at address."""
    command = argv if address is None else [*SSH, address, "--", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def unit_state(address: str | None, unit: str) -> dict:
    """The unit's state: running, succeeded, failed, stopped or unreachable."""
    try:
        done = remote(address, ["systemctl", "show", unit, f"--property={','.join(PROPERTIES)}"])
    except subprocess.TimeoutExpired:
        return {"state": "unreachable", "detail": f"no answer within {ANSWER_TIMEOUT} s"}
    if done.returncode != 0:
        why = done.stderr.strip() or f"exit status {done.returncode}"
        return {"state": "unreachable", "detail": why[-300:]}
    props = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    active, sub, result = props.get("ActiveState"), props.get("SubState"), props.get("Result")
    detail = f"{active}/{sub}, result {result}, exit status {props.get('ExecMainStatus')}"
    if props.get("LoadState") == "not-found" or active == "inactive":
        state = "stopped"
    elif active == "failed" or result not in ("success", None):
        state = "failed"
    elif active == "active" and sub == "exited":
        state = "succeeded" if props.get("ExecMainStatus") == "0" else "failed"
    else:
        state = "running"
    return {"state": state, "detail": detail}


def last_progress(log: Path, prefixes: tuple[str, ...], start: int) -> str:
    """The newest line of rank 0's log, after byte start, that starts with one of the prefixes."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(start, log.stat().st_size - 64 * 1024))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line.startswith(prefixes)), "")


def tail(address: str | None, log: str, lines: int) -> str:
    try:
        done = remote(address, ["tail", "-n", str(lines), log])
    except subprocess.TimeoutExpired:
        return "(the node did not answer)"
    return done.stdout if done.returncode == 0 else f"(no log: {done.stderr.strip()})"


def watch(config: dict, wait: float, poll: float) -> dict:
    """Poll every node until the job fails or succeeds, or wait seconds pass."""
    nodes: dict[str, str | None] = dict(config["nodes"])
    nodes[config["self"]] = None
    misses = dict.fromkeys(nodes, 0)
    deadline = time.monotonic() + wait
    with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
        while True:
            states = dict(
                zip(
                    nodes,
                    pool.map(lambda a: unit_state(a, config["unit"]), nodes.values()),
                    strict=True,
                )
            )
            for name, state in states.items():
                misses[name] = misses[name] + 1 if state["state"] == "unreachable" else 0
            bad = [
                name
                for name, state in states.items()
                if state["state"] in ("failed", "stopped") or misses[name] >= UNREACHABLE_POLLS
            ]
            done = all(state["state"] == "succeeded" for state in states.values())
            # A round does not end while a node has missed a poll: that node is decided
            # first (a new round would start counting its misses again).
            undecided = any(misses.values())
            if bad or done or (time.monotonic() >= deadline and not undecided):
                break
            time.sleep(poll)
        # A node that does not answer has no log to show: asking would only add a timeout.
        unreachable = [name for name in bad if states[name]["state"] == "unreachable"]
        readable = [name for name in bad if name not in unreachable]
        logs = pool.map(
            lambda name: tail(nodes[name], config["log"], config["tail_lines"]), readable
        )
        tails = dict(zip(readable, logs, strict=True))
    return {
        "job": "failed" if bad else "succeeded" if done else "running",
        "nodes": states,
        "failed_nodes": bad,
        "unreachable_nodes": unreachable,
        "stop_requested": (Path(config["log"]).parent / STOP_REQUESTED).exists(),
        "tails": tails,
        "progress": last_progress(
            Path(config["log"]), tuple(config["progress_prefixes"]), config["log_start"]
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="JSON written by the launcher")
    parser.add_argument("--wait", type=float, default=25, help="longest round, in seconds")
    parser.add_argument("--poll", type=float, default=2, help="seconds between polls")
    args = parser.parse_args()
    config = json.loads(args.config.read_text())
    print(json.dumps(watch(config, args.wait, args.poll)))


if __name__ == "__main__":
    main()
