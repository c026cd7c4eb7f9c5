#!/usr/bin/python
"""Ansible module: one watch round of a torchrun job, run on its master node."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import (
    newest_mtime_ns,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.ssh import on_node
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.fence import (
    heartbeat_path,
    touch_then,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.follow import FollowBuffer
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.gpu_use import (
    gpu_poll_script,
    parse_gpu_query,
    split_poll_output,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.liveness import (
    LOST_AFTER_S,
    Liveness,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.log_reader import (
    RankZeroLog,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.logs import (
    last_lines,
    progress_argument_spec,
    progress_matcher,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.slurm import (
    job_phase,
    node_states,
    parse_scontrol,
    with_lost_nodes,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.sync import INCOMING
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    RUNNING,
    SHOW_TIMESTAMPS,
    UNIT_PROPERTIES,
    UNREACHABLE,
    NodeState,
    parse_properties,
    unit_state,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.watch import (
    first_failure,
    watch_round,
)

DOCUMENTATION = r"""
module: torch_job_watch
short_description: Watch a torchrun job on every node for one round, from its master
description:
  - Asks systemd on every node of the job (this one directly, the others over SSH with the
    nodes' mutual trust) for the state of the job's unit, every I(poll) seconds, and returns as
    soon as the job has ended (a node failed, timed out, stopped or stopped answering, or every
    node succeeded), or after I(wait) seconds.
  - Reads rank 0's log (this node's) from I(offset) on, for the newest progress line.
  - The verdict comes from plugins/module_utils/job/watch.py. Its action plugin of the same
    name runs rounds until the job ends and shows the progress on the controller.
options:
  unit:
    description: The job's unit name, the same on every node.
    type: str
    required: true
  nodes:
    description: Every node of the job, inventory hostname to address, in rank order.
    type: dict
    required: true
  self_name:
    description: This node's name in I(nodes); it is asked directly, not over SSH.
    type: str
    required: true
  log:
    description: The job's log on this node (rank 0's output).
    type: path
    required: true
  offset:
    description: Where in the log this round's reading starts.
    type: int
    default: 0
  tail_lines:
    description: Lines of each failed node's log returned.
    type: int
    default: 30
  wait:
    description: Longest round, in seconds.
    type: float
    default: 25
  poll:
    description: Seconds between two polls of each node (each node has a thread of its own).
    type: float
    default: 1
  lost_after:
    description:
      - A node that has not answered for this many seconds is lost (train_lost_after), however
        many polls that was; a slow answer is an answer.
    type: float
    default: 6
  heard_ago:
    description: Seconds since each node's last answer when this round begins (the last round's).
    type: dict
    default: {}
  stall_timeout:
    description:
      - The job has stalled when every node's unit runs and rank 0 has written no line for
        this many seconds (0 never). Rank 0's log is read at every poll.
    type: float
    default: 0
  quiet_for:
    description: Seconds rank 0 had been quiet when this round begins (the last round's quiet_for).
    type: float
    default: 0
  stop_marker:
    description: File that playbooks/stop.yml leaves when it stops the job.
    type: path
    required: true
  follow:
    description:
      - Return rank 0's new lines (at most this many a round, the newest; the rest are
        counted), and end the round as soon as there are some and I(min_wait) has passed.
        0 returns none.
    type: int
    default: 0
  min_wait:
    description: With I(follow), the shortest round, in seconds.
    type: float
    default: 1
  gpus:
    description:
      - Also read each node's GPU use (C(nvidia-smi --query-gpu), where the node has it) in
        the round's first poll, in the same SSH round trip as its unit's state.
    type: bool
    default: false
  output_dir:
    description: The job's output folder on this node; empty not to look at it.
    type: path
    default: ""
  output_since:
    description: The newest modification time (ns) of its files before the attempt started
      (torch_job_unit's output_newest); -1 when unknown.
    type: int
    default: -1
  slurm_job_id:
    description:
      - The job runs in Slurm (train_launcher=slurm) as this Slurm job. Its state comes from
        C(scontrol) on this node instead of systemd on every node; once it ended, each node's
        from srun's lines in I(slurm_output). Every node is still polled, and one lost
        (I(lost_after)) is unreachable whatever Slurm says.
    type: str
    default: ""
  slurm_output:
    description: The batch job's output file on its batch host (C(%j) is the Slurm job id).
    type: str
    default: ""
extends_documentation_fragment:
  - torch_cluster.cluster.progress_lines
"""

RETURN = r"""
output_newest:
  description: The newest modification time (ns) of the output folder's files (0 for none, -1
    when it cannot be read).
  type: int
  returned: always
output_written:
  description: Whether a file of the output folder is newer than I(output_since), so the job
    wrote it during this attempt.
  type: bool
  returned: always
job:
  description: running, succeeded, failed, stopped (by stop.yml), timed out or stalled.
  type: str
  returned: always
nodes:
  description: Each node's state and detail.
  type: dict
  returned: always
failed_nodes:
  description: The nodes that failed, stopped or stopped answering, the first to end first.
  type: list
  returned: always
unreachable_nodes:
  description: The nodes that did not answer.
  type: list
  returned: always
tails:
  description: The last lines of each failed node's log, by node.
  type: dict
  returned: always
progress:
  description: The newest progress line read this round, or an empty string.
  type: str
  returned: always
last_line:
  description: The newest line of the log read this round.
  type: str
  returned: always
offset:
  description: Where the next round's reading starts.
  type: int
  returned: always
quiet_for:
  description: Seconds since rank 0's newest line (or since the attempt began).
  type: float
  returned: always
lines:
  description: With I(follow), rank 0's new lines this round (without the rank prefix).
  type: list
  returned: always
skipped_lines:
  description: With I(follow), rank 0's new lines left out this round (over the cap).
  type: int
  returned: always
gpus:
  description:
    - With I(gpus), each node's GPUs (index, utilization, memory_used, memory_total in MiB),
      by node; a node without GPUs has [].
  type: dict
  returned: always
heard_ago:
  description: Seconds since each node last answered, as the round ends.
  type: dict
  returned: always
slurm:
  description: The Slurm job's state, reason and batch host, when I(slurm_job_id) is set.
  type: dict
  returned: always
"""


# How often the round looks at what the pollers found, and at rank 0's log.
ROUND_POLL_S = 0.5
SLURM_POLL_S = 2.0
# Seconds a node gets to return a log's tail or a Slurm file.
TAIL_TIMEOUT = 8


def run(address: str | None, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """argv here (address None) or on the node at address. Its stdin is not the module's: a
    command left behind by a round that ended holds nothing of the controller's session."""
    return subprocess.run(
        on_node(address, argv),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=timeout,
        check=False,
    )


def poll_node(
    address: str | None, unit: str, timeout: float, gpus: bool = False
) -> tuple[NodeState, list]:
    """The node's unit state, after touching its fence's heartbeat (fence.py); with `gpus`,
    also its GPUs' use, read in the same round trip ([] on a node without nvidia-smi or GPUs)."""
    show = ["systemctl", "show", unit, f"--property={','.join(UNIT_PROPERTIES)}"]

    def ask(argv: list[str]) -> subprocess.CompletedProcess[str]:
        asked = ["sh", "-c", gpu_poll_script(argv)] if gpus else argv
        return run(address, touch_then(heartbeat_path(unit), asked), timeout)

    try:
        done = ask([*show, SHOW_TIMESTAMPS])
        if done.returncode != 0 and SHOW_TIMESTAMPS.split("=")[0] in done.stderr:
            done = ask(show)  # systemd before 248: times without the microseconds
    except subprocess.TimeoutExpired:
        return NodeState(UNREACHABLE, f"no answer within {timeout:g} s"), []
    if done.returncode != 0:
        why = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        return NodeState(UNREACHABLE, why[-300:]), []
    properties, rows = split_poll_output(done.stdout) if gpus else (done.stdout, "")
    return unit_state(parse_properties(properties)), parse_gpu_query(rows)


class NodePollers:
    """One thread per node asks it every `poll` seconds until the round ends, each on its own:
    a node that hangs delays nobody else's poll, nor the heartbeat that keeps its fence away.
    Answers go to `liveness`, which decides who is lost (train_lost_after)."""

    def __init__(self, addresses: dict[str, str | None], params: dict, liveness: Liveness) -> None:
        self.addresses, self.liveness = addresses, liveness
        self.unit, self.poll, self.want_gpus = params["unit"], params["poll"], params["gpus"]
        # A poll that takes longer than this is given up (the node is lost before that).
        self.timeout = params["lost_after"] + 2
        self.gpus: dict[str, list] = {}
        self._done = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(name,), daemon=True) for name in addresses
        ]

    def __enter__(self) -> NodePollers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()

    def _loop(self, name: str) -> None:
        while not self._done.is_set():
            began = time.monotonic()
            # The GPUs once a round: their first reading (nvidia-smi has its own cost).
            read_gpus = self.want_gpus and name not in self.gpus
            state, rows = poll_node(self.addresses[name], self.unit, self.timeout, read_gpus)
            if state.state != UNREACHABLE:
                if read_gpus:
                    self.gpus[name] = [row.__dict__ for row in rows]
                self.liveness.answered(name, state)
            self._done.wait(max(0.0, self.poll - (time.monotonic() - began)))


def tail(address: str | None, log: str, lines: int) -> str:
    """The last lines the node's workers wrote (torchrun's own lines left out), or the
    log's last lines when no worker wrote any (torchrun failed before it started them)."""
    try:
        done = run(address, ["tail", "-n", str(max(20 * lines, 400)), log], TAIL_TIMEOUT)
    except subprocess.TimeoutExpired:
        return "(the node did not answer)"
    if done.returncode != 0:
        return f"(no log: {done.stderr.strip()})"
    return last_lines(done.stdout, lines)


def slurm_poller(params: dict, addresses: dict[str, str | None], names: list[str]):
    """poll_all for a Slurm job, and the latest scontrol fields it read."""
    seen: dict[str, str] = {}

    def batch_output(host: str) -> str:
        path = params["slurm_output"].replace("%j", params["slurm_job_id"])
        if not path:
            return ""
        try:
            done = run(addresses.get(host), ["cat", path], TAIL_TIMEOUT)
        except subprocess.TimeoutExpired:
            return ""
        return done.stdout if done.returncode == 0 else ""

    def poll_all() -> dict[str, NodeState]:
        argv = ["scontrol", "--oneliner", "show", "job", params["slurm_job_id"]]
        try:
            done = run(None, argv, TAIL_TIMEOUT)
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess(argv, 1, "", "scontrol did not answer")
        if done.returncode != 0:
            why = " ".join((done.stderr or done.stdout).split())
            if "Invalid job id" in why:
                fields = {"JobState": "UNKNOWN", "Reason": "Slurm no longer knows the job"}
            else:
                # slurmctld restarting: the job goes on; the next poll asks again.
                seen.update(JobState="RUNNING", Reason=f"scontrol: {why}")
                return {name: NodeState(RUNNING, f"scontrol: {why}") for name in names}
        else:
            fields = parse_scontrol(done.stdout)
        seen.clear()
        seen.update(fields)
        output = ""
        if job_phase(fields) not in ("queued", "running"):
            output = batch_output(fields.get("BatchHost", params["self_name"]))
        return node_states(fields, output, names)

    return poll_all, seen


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "nodes": {"type": "dict", "required": True},
            "self_name": {"type": "str", "required": True},
            "log": {"type": "path", "required": True},
            "offset": {"type": "int", "default": 0},
            **progress_argument_spec(),
            "tail_lines": {"type": "int", "default": 30},
            "wait": {"type": "float", "default": 25},
            "poll": {"type": "float", "default": 1},
            "lost_after": {"type": "float", "default": LOST_AFTER_S},
            "heard_ago": {"type": "dict", "default": {}},
            "stall_timeout": {"type": "float", "default": 0},
            "quiet_for": {"type": "float", "default": 0},
            "stop_marker": {"type": "path", "required": True},
            "slurm_job_id": {"type": "str", "default": ""},
            "slurm_output": {"type": "str", "default": ""},
            "follow": {"type": "int", "default": 0},
            "min_wait": {"type": "float", "default": 1},
            "gpus": {"type": "bool", "default": False},
            "output_dir": {"type": "path", "default": ""},
            "output_since": {"type": "int", "default": -1},
        },
        supports_check_mode=True,
    )
    params = module.params
    addresses: dict[str, str | None] = dict(params["nodes"])
    if params["self_name"] not in addresses:
        module.fail_json(msg=f"{params['self_name']} is not one of the job's nodes")
    addresses[params["self_name"]] = None
    names = list(addresses)

    liveness = Liveness(names, params["lost_after"], params["heard_ago"])
    follow = FollowBuffer.empty(params["follow"])
    rank0 = RankZeroLog(
        params["log"],
        params["offset"],
        progress_matcher(params["progress_prefixes"], params["progress_regex"]),
        params["quiet_for"],
        sink=follow.add if params["follow"] > 0 else None,
    )

    def news() -> bool:
        rank0.read()
        return bool(follow.lines or follow.skipped)

    slurm: dict[str, str] = {}
    # Every node is polled in both modes: through Slurm too, a node that stops answering is
    # lost after train_lost_after (Slurm itself would wait for its SlurmdTimeout).
    pollers = NodePollers(addresses, params, liveness)
    poll_all = liveness.states
    if params["slurm_job_id"]:
        slurm_states, slurm = slurm_poller(params, addresses, names)

        def poll_all() -> dict[str, NodeState]:
            return with_lost_nodes(slurm_states(), liveness.states())

    with pollers:
        seen = watch_round(
            poll_all,
            lambda: os.path.exists(params["stop_marker"]),
            wait=params["wait"],
            # scontrol is Slurm's controller's load: every SLURM_POLL_S at most.
            poll=SLURM_POLL_S if params["slurm_job_id"] else ROUND_POLL_S,
            # Loss is decided by time (liveness), not by a count of polls.
            unreachable_polls=1,
            # A Slurm job still waiting in the queue has not begun to stall.
            stalled=lambda: rank0.stalled(params["stall_timeout"]) and job_phase(slurm) != "queued",
            news=news if params["follow"] > 0 else lambda: False,
            min_wait=params["min_wait"],
            settled=liveness.settled,
        )
    bad = first_failure(seen.states, seen.verdict.bad_nodes)
    unreachable = [name for name in bad if seen.states[name].state == UNREACHABLE]
    # A node that does not answer has no log to show: asking would only add a timeout.
    readable = [name for name in bad if name not in unreachable]
    with ThreadPoolExecutor(max_workers=min(32, max(1, len(readable)))) as pool:
        logs = pool.map(
            lambda name: tail(addresses[name], params["log"], params["tail_lines"]), readable
        )
        tails = dict(zip(readable, logs))

    rank0.read()
    newest = newest_mtime_ns(params["output_dir"], skip=(INCOMING,)) if params["output_dir"] else 0
    since = params["output_since"]
    module.exit_json(
        changed=False,
        output_newest=-1 if newest is None else newest,
        output_written=bool(newest) and since >= 0 and newest > since,
        job=seen.verdict.job,
        nodes={name: state.as_dict() for name, state in seen.states.items()},
        failed_nodes=bad,
        unreachable_nodes=unreachable,
        stop_requested=os.path.exists(params["stop_marker"]),
        tails=tails,
        progress=rank0.progress,
        last_line=rank0.last_line,
        offset=rank0.offset,
        quiet_for=round(rank0.quiet_for(), 1),
        polls=seen.polls,
        lines=follow.lines,
        skipped_lines=follow.skipped,
        gpus=pollers.gpus,
        heard_ago=liveness.heard_ago(),
        slurm={
            key: slurm.get(field, "")
            for key, field in (("state", "JobState"), ("reason", "Reason"), ("host", "BatchHost"))
        },
    )


if __name__ == "__main__":
    main()
