#!/usr/bin/env python3
"""Launch overhead and teardown time of playbooks/train.yml, measured on a running sandbox.

    make sandbox && make bench-launch

1. Launch overhead: the time from a command to rank 0's first training step (its first
   progress line, with --log-interval 0), for
   - by hand: torchrun started over SSH on every node at once, the way the guide does it, with
     the code and data already on the nodes;
   - train.yml: the whole playbook (preflight, code and data staged and checked, units started).
2. Teardown: a long train.yml job; once it trains, node 1's workers are killed with SIGKILL.
   Reported: the time until the playbook has failed, and whether any process of the job is left.
3. Restart: the same with train_max_restarts=1. Reported: the time from the kill to rank 0's
   first training step of the restarted job, and whether the playbook then succeeded.
4. Lost node: a worker (the last node), then the master (the first), taken off the network
   (its link down, through podman) in a job with train_min_nodes one less and
   train_max_restarts=1. Reported: the seconds from the loss to its detection, from there to
   the restart, from there to rank 0's next training step on the nodes left, and the whole
   (needs 3 nodes: make sandbox SANDBOX_NODES=3).
5. Stall: one rank of molecule/sandbox/tests/scripts/stall_on_rank.py sleeps before an
   all_reduce, train_stall_timeout=20. Reported: the time from rank 0's last line to the
   playbook's report of the stall (stacks collected, job stopped).

Each figure is the median of --repeat runs. It drives the same commands a user types, from
the project's venv.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[2]
STATE = PROJECT / ".sandbox"
BASE = "/var/lib/torch-cluster"  # the train role's train_node_base_dir
FIRST_STEP = "progress epoch="
RESUMED = "continuing at epoch"
# Lists a job's processes on a node, or kills its workers.
JOB_PROCESSES = (PROJECT / "sandbox" / "job_processes.py").read_text()

# This repository as the collection it is (make collection-path).
sys.path.insert(0, str(PROJECT / ".cache" / "collections"))
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.digests import (  # noqa: E402
    tree_digest,
)


def inventory() -> tuple[dict, list[str]]:
    data = yaml.safe_load((STATE / "inventory.yml").read_text())
    hosts = data["all"]["children"]["gpu_nodes"]["hosts"]
    return data["all"]["vars"], list(hosts.items())


def ssh_command(address: str, command: list[str]) -> list[str]:
    return [
        "ssh",
        "-i", str(STATE / "id_ed25519"),
        "-o", f"UserKnownHostsFile={STATE / 'known_hosts'}",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes",
        f"root@{address}",
        "--",
        shlex.join(command),
    ]  # fmt: skip


def ssh(address: str, command: list[str], check: bool = True) -> str:
    done = subprocess.run(
        ssh_command(address, command), capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        sys.exit(f"ssh {address} {shlex.join(command)}: {done.stderr.strip()}")
    return done.stdout


class Output:
    """Drains a process's output in a thread, noting when a line first held `marker` (after
    a line that held `after`, when given)."""

    def __init__(self, process: subprocess.Popen[str], marker: str, after: str = "") -> None:
        self.process, self.marker, self.after = process, marker, after
        self.lines: list[str] = []
        self.seen = threading.Event()
        self.seen_at = 0.0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        armed = not self.after
        for line in self.process.stdout:
            self.lines.append(line)
            armed = armed or self.after in line
            if armed and self.marker in line and not self.seen.is_set():
                self.seen_at = time.monotonic()
                self.seen.set()

    def wait_seen(self, timeout: float) -> float:
        if not self.seen.wait(timeout):
            sys.exit(f"no {self.marker!r} within {timeout} s:\n{self.tail()}")
        return self.seen_at

    def tail(self, n: int = 15) -> str:
        return "".join(self.lines[-n:])


def follow(address: str, path: str) -> subprocess.Popen[str]:
    """tail -F a file on a node (which need not exist yet)."""
    command = ssh_command(address, ["tail", "-n", "0", "-s", "0.1", "-F", path])
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def playbook(name: str, extra: dict) -> list[str]:
    return [
        str(PROJECT / ".venv" / "bin" / "ansible-playbook"),
        "-i", str(STATE / "inventory.yml"),
        str(PROJECT / "playbooks" / name),
        "-e", json.dumps(extra),
    ]  # fmt: skip


ENV = os.environ | {
    "ANSIBLE_CONFIG": str(PROJECT / "ansible.cfg"),
    "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(STATE / "facts"),
    # The Makefile's, for a bench started without make (podman's ulimits for this machine).
    "CONTAINERS_CONF": os.environ.get(
        "CONTAINERS_CONF", str(PROJECT / "sandbox" / "containers.conf")
    ),
}


def by_hand(nodes: list[tuple[str, dict]], torchrun: str, port: int, tag: str) -> float:
    """torchrun on every node over SSH at once; seconds to rank 0's first step."""
    master = nodes[0][1]["ansible_host"]
    code = f"{BASE}/code/{tree_digest(str(PROJECT / 'train'))}"
    outputs = []
    start = time.monotonic()
    for rank, (_, host) in enumerate(nodes):
        command = [
            torchrun, f"--nnodes={len(nodes)}", f"--node-rank={rank}", "--nproc-per-node=1",
            f"--master-addr={master}", f"--master-port={port}", "--max-restarts=0",
            f"{code}/train_ddp.py", "--data-dir", f"{BASE}/data",
            "--output-dir", f"/tmp/bench-by-hand-{tag}", "--epochs", "1", "--log-interval", "0",
        ]  # fmt: skip
        process = subprocess.Popen(
            ssh_command(host["ansible_host"], command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        outputs.append(Output(process, FIRST_STEP))
    first_step = outputs[0].wait_seen(300)
    for (name, _), output in zip(nodes, outputs, strict=True):
        try:
            output.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            output.process.kill()
            sys.exit(f"torchrun by hand on {name} did not end:\n{output.tail()}")
        if output.process.returncode != 0:
            sys.exit(f"torchrun by hand on {name} failed:\n{output.tail()}")
    return first_step - start


def with_playbook(nodes: list[tuple[str, dict]], job_id: str, data: str) -> float:
    """train.yml; seconds from its start to rank 0's first step."""
    log = Output(follow(nodes[0][1]["ansible_host"], f"{BASE}/jobs/{job_id}/node.log"), FIRST_STEP)
    time.sleep(1)  # let tail start
    extra = {
        "job_id": job_id,
        "nproc": 1,
        "train_data_src": data,
        "train_runs_dir": "/tmp/bench-launch-runs",
        "train_extra_args": ["--epochs", "1", "--log-interval", "0"],
    }
    start = time.monotonic()
    run = subprocess.Popen(playbook("train.yml", extra), env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    output, _ = run.communicate(timeout=600)
    if run.returncode != 0:
        sys.exit(f"train.yml failed:\n{output[-3000:]}")
    first_step = log.wait_seen(30)
    log.process.kill()
    return first_step - start


def job_processes(address: str, job_id: str, action: str) -> list[str]:
    return ssh(address, ["python3", "-c", JOB_PROCESSES, job_id, action]).splitlines()


def start_long_job(
    nodes: list[tuple[str, dict]], job_id: str, data: str, **extra: object
) -> subprocess.Popen[str]:
    """A long train.yml job; returns once rank 0 trains."""
    log = Output(follow(nodes[0][1]["ansible_host"], f"{BASE}/jobs/{job_id}/node.log"), FIRST_STEP)
    extra = {
        "job_id": job_id,
        "nproc": 1,
        "train_data_src": data,
        "train_runs_dir": "/tmp/bench-launch-runs",
        "train_watch_interval": 5,
        "train_extra_args": ["--epochs", "400"],
        # The example trainer continues from its checkpoint with --resume (jobs/example.yml).
        "train_resume_args": ["--resume"],
        **extra,
    }
    run = subprocess.Popen(playbook("train.yml", extra), env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    log.wait_seen(300)
    log.process.kill()
    return run


def teardown(nodes: list[tuple[str, dict]], job_id: str, data: str) -> tuple[float, int]:
    """Kill the last node's workers in a long job; seconds until train.yml has failed, and
    the processes of the job left on the nodes."""
    run = start_long_job(nodes, job_id, data)
    job_processes(nodes[-1][1]["ansible_host"], job_id, "kill")
    killed = time.monotonic()
    output, _ = run.communicate(timeout=300)
    seconds = time.monotonic() - killed
    if run.returncode == 0:
        sys.exit(f"train.yml succeeded although a node's workers were killed:\n{output[-3000:]}")
    left = sum(len(job_processes(host["ansible_host"], job_id, "list")) for _, host in nodes)
    return seconds, left


def restart(nodes: list[tuple[str, dict]], job_id: str, data: str) -> float:
    """Kill the last node's workers in a long job with train_max_restarts=1; seconds from the
    kill to rank 0's first step of the restarted job."""
    master = nodes[0][1]["ansible_host"]
    run = start_long_job(
        nodes, job_id, data, train_max_restarts=1, train_extra_args=["--epochs", "100"]
    )
    resumed = Output(follow(master, f"{BASE}/jobs/{job_id}/node.log"), FIRST_STEP, RESUMED)
    time.sleep(1)  # let tail start
    job_processes(nodes[-1][1]["ansible_host"], job_id, "kill")
    killed = time.monotonic()
    seconds = resumed.wait_seen(300) - killed
    resumed.process.kill()
    output, _ = run.communicate(timeout=300)
    if run.returncode != 0:
        sys.exit(f"train.yml failed although it could restart:\n{output[-3000:]}")
    return seconds


def container(name: str, address: str) -> tuple[str, str]:
    """The podman container of the node at address, and the interface that carries it."""
    for candidate in subprocess.run(
        ["podman", "ps", "--format", "{{.Names}}"], capture_output=True, text=True, check=True
    ).stdout.split():
        links = subprocess.run(
            ["podman", "exec", candidate, "ip", "-j", "-4", "addr", "show"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        for link in json.loads(links or "[]"):
            if any(entry["local"] == address for entry in link.get("addr_info", [])):
                return candidate, link["ifname"]
    sys.exit(f"no container is {name} at {address}")


def lost_node(nodes: list[tuple[str, dict]], job_id: str, data: str, victim: int) -> dict:
    """Take one node (the last, a worker; or the first, the master) off the network in a long
    job that may go on without it. The seconds from the loss to its detection (the watch's
    end, attempts.json), from there to the restart (the next attempt's watch start), and from
    there to rank 0's next training step on the nodes left; and the whole."""
    victim_name, address = nodes[victim][0], nodes[victim][1]["ansible_host"]
    new_master = nodes[1 if victim == 0 else 0][1]["ansible_host"]
    name, device = container(victim_name, address)
    routes = json.loads(
        subprocess.run(
            ["podman", "exec", name, "ip", "-j", "-4", "route"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    # The sandbox's shared folder is served by node0: a lost master takes it along (see
    # docs/lost-nodes-and-stalls.md). Without it, the master's checkpoint is copied to the next
    # node every 3 s while the job runs.
    own_folder = {"train_shared_dir": "", "train_output_copy_interval": 3} if victim == 0 else {}
    run = start_long_job(
        nodes, job_id, data, train_max_restarts=1, train_min_nodes=len(nodes) - 1,
        train_extra_args=["--epochs", "2000"], **own_folder,
    )  # fmt: skip
    time.sleep(5 if victim == 0 else 0)  # a checkpoint, and a copy of it
    # Rank 0's first step of the next attempt (whether it resumed depends on the copies: this
    # trainer rewrites its checkpoint every few hundredths of a second here, too often to copy).
    log = follow(new_master, f"{BASE}/jobs/{job_id}/node.log")
    resumed = Output(log, FIRST_STEP, f"job {job_id}, attempt 2,")
    time.sleep(1)  # let tail start
    subprocess.run(["podman", "exec", name, "ip", "link", "set", device, "down"], check=True)
    lost, lost_at = time.monotonic(), time.time()
    try:
        back = resumed.wait_seen(300) - lost
    finally:
        resumed.process.kill()
        subprocess.run(["podman", "exec", name, "ip", "link", "set", device, "up"], check=True)
        for route in routes:
            if "gateway" in route:
                subprocess.run(["podman", "exec", name, "ip", "route", "replace", route["dst"],
                                "via", route["gateway"], "dev", device], check=True)  # fmt: skip
    # Measured: the job is stopped (on the node back on the network too), not run to its end.
    subprocess.run(playbook("stop.yml", {"job_id": job_id}), env=ENV, capture_output=True,
                   check=False)  # fmt: skip
    output, _ = run.communicate(timeout=300)
    if "left the job (stopped answering)" not in output:
        sys.exit(f"train.yml did not go on without {victim_name}:\n{output[-3000:]}")
    record = json.loads(Path(f"/tmp/bench-launch-runs/{job_id}/attempts.json").read_text())
    first, second = record["attempts"][:2]
    detected = first["started_at"] + first["seconds"] - lost_at
    restarted = second["started_at"] - lost_at
    return {
        "detection": detected,
        "restart": restarted - detected,
        "next line": back - restarted,
        "whole": back,
    }


def lost_nodes(nodes: list[tuple[str, dict]], tag: str, data: str, repeat: int) -> None:
    """lost_node for a worker and for the master, `repeat` times each; medians printed."""
    for victim, role in ((len(nodes) - 1, "worker"), (0, "master")):
        found: list[dict] = []
        for i in range(repeat):
            found.append(lost_node(nodes, f"{tag}-lost-{role}-{i}", data, victim))
            parts = ", ".join(f"{key} {value:.1f} s" for key, value in found[-1].items())
            print(f"lost {role} {i + 1}: {parts}", flush=True)
        medians = {key: statistics.median(run[key] for run in found) for key in found[0]}
        parts = ", ".join(f"{key} {value:.1f} s" for key, value in medians.items())
        print(f"lost {role}, link pulled (median of {repeat}): {parts}", flush=True)


def stall(nodes: list[tuple[str, dict]], job_id: str, data: str) -> float:
    """One rank sleeps outside the all_reduce the others wait in; seconds from rank 0's last
    line to train.yml's report of the stall."""
    master = nodes[0][1]["ansible_host"]
    extra = {
        "job_id": job_id,
        "train_data_src": data,
        "train_code_dir": str(PROJECT / "molecule" / "sandbox" / "tests" / "scripts"),
        "train_script": "stall_on_rank.py",
        "train_script_args": [str(len(nodes) - 1), "8"],
        "train_progress_regex": "^step ",
        "train_stall_timeout": 20,
        "train_watch_interval": 5,
    }
    last = Output(follow(master, f"{BASE}/jobs/{job_id}/node.log"), "[rank0]: step 2 ")
    run = subprocess.Popen(playbook("train.yml", extra), env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    report = Output(run, f"Job {job_id} stalled")
    quiet_from = last.wait_seen(300)
    seconds = report.wait_seen(300) - quiet_from
    last.process.kill()
    run.wait(timeout=120)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--launch-only", action="store_true", help="skip the faults and restarts")
    parser.add_argument(
        "--lost-only", action="store_true", help="the launch overhead and the lost nodes only"
    )
    args = parser.parse_args()
    group_vars, nodes = inventory()
    # `make data`'s digits, which inventory/sandbox/group_vars stages for every job.
    data = str(PROJECT / ".cache" / "data")
    tag = f"bench-{int(time.time())}"
    # One playbook run first: the code and data on every node, and torchrun's path.
    print(f"{len(nodes)} nodes, 1 process each; warming up (stages code and data) ...", flush=True)
    with_playbook(nodes, tag, data)
    torchrun = json.loads(
        ssh(nodes[0][1]["ansible_host"], ["cat", "/etc/ansible/facts.d/pytorch.fact"])
    )["torchrun"]
    port = int(group_vars.get("cluster_master_port", 10086))
    hand, play = [], []
    for i in range(args.repeat):
        hand.append(by_hand(nodes, torchrun, port, tag))
        play.append(with_playbook(nodes, f"{tag}-{i}", data))
        print(f"run {i + 1}: by hand {hand[-1]:.1f} s, train.yml {play[-1]:.1f} s", flush=True)
    print(
        f"launch to first step (median of {args.repeat}): by hand {statistics.median(hand):.1f} s, "
        f"train.yml {statistics.median(play):.1f} s, overhead "
        f"{statistics.median(play) - statistics.median(hand):.1f} s",
        flush=True,
    )
    if args.launch_only:
        return
    if args.lost_only:
        lost_nodes(nodes, tag, data, args.repeat)
        return
    down, again = [], []
    for i in range(args.repeat):
        seconds, left = teardown(nodes, f"{tag}-fault-{i}", data)
        down.append(seconds)
        print(f"fault {i + 1}: train.yml failed {seconds:.1f} s after the kill; "
              f"processes left: {left}", flush=True)  # fmt: skip
    for i in range(args.repeat):
        again.append(restart(nodes, f"{tag}-restart-{i}", data))
        print(f"restart {i + 1}: training again {again[-1]:.1f} s after the kill", flush=True)
    print(f"teardown after a killed node (median): {statistics.median(down):.1f} s")
    print(
        f"kill to training resumed, train_max_restarts=1 (median): {statistics.median(again):.1f} s"
    )
    if len(nodes) >= 3:
        lost_nodes(nodes, tag, data, args.repeat)
    stalls = []
    for i in range(args.repeat):
        stalls.append(stall(nodes, f"{tag}-stall-{i}", data))
        print(f"stall {i + 1}: reported {stalls[-1]:.1f} s after rank 0's last line "
              "(train_stall_timeout=20)", flush=True)  # fmt: skip
    print(
        f"stall to its report, train_stall_timeout=20 (median): {statistics.median(stalls):.1f} s"
    )


if __name__ == "__main__":
    main()
