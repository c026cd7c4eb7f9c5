"""The Slurm launcher's logic: the batch script, and a Slurm job's state in the launcher's words.

train.yml -e train_launcher=slurm submits one batch job per attempt. Its script starts one
torchrun per node with `srun --kill-on-bad-exit=1`, each with the node_rank, the environment and
the command that the default launcher would give that node (the script carries every node's, and
picks its own by SLURMD_NODENAME, which is the inventory hostname). The watch maps Slurm's job
states and srun's error lines to the same NodeState values as systemd's units, so that the
verdict, the record and the restart decisions are the default launcher's.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    FAILED,
    RUNNING,
    STOPPED,
    SUCCEEDED,
    TIMED_OUT,
    UNREACHABLE,
    NodeState,
)

JOB_NAME_PREFIX = "torch-"


def job_name(job_id: str) -> str:
    """The Slurm job name of a launcher job: `scancel --name` and `squeue --name` find it."""
    return f"{JOB_NAME_PREFIX}{job_id}"


def _assignments(env: Mapping[str, str]) -> list[str]:
    return [f"export {key}={shlex.quote(str(value))}" for key, value in env.items()]


def sbatch_script(
    *,
    job_id: str,
    attempt: int,
    nodes: Sequence[Mapping[str, Any]],
    job_dir: str,
    output_dir: str,
    log: str,
    partition: str = "",
    timeout_s: int = 0,
    gpus_per_node: int = 0,
    exclusive: bool = True,
    master_port: int = 0,
) -> str:
    """The batch script of one attempt.

    nodes: in rank order, each {"name", "rank", "env", "command"}, and optionally "fence": what
    the default launcher would run on that node. Each node's step appends its output to the
    node's log (`log`, a path on the node), like the default launcher's unit. With a fence (the
    command of job/fence.py, from torch_job_unit), the step starts torchrun in the background
    and the fence beside it with torchrun's PID: cut off from the watch for the fence's timeout,
    the node kills its part of the job itself, as the default launcher's fence unit does.

    exclusive: the job takes whole nodes. Otherwise it takes gpus_per_node GPUs of each (and
    the CPUs Slurm gives per GPU), other jobs may run beside it, and so each job's torchrun
    takes a master port of its own, master_port + 1 + the Slurm job id modulo PORT_SPREAD.
    With GPUs asked for, the processes per node are the GPUs Slurm gave (SLURM_GPUS_ON_NODE)."""
    if not nodes:
        raise ValueError("a job needs at least one node")
    names = [str(node["name"]) for node in nodes]
    directives = [
        f"--job-name={job_name(job_id)}",
        f"--nodes={len(nodes)}",
        f"--nodelist={','.join(names)}",
        "--ntasks-per-node=1",
        *(["--exclusive"] if exclusive else []),
        f"--chdir={output_dir}",
        f"--output={job_dir}/slurm-%j.out",
        "--open-mode=append",
        # A clean environment, as the default launcher's units get: each node's part sets its own.
        "--export=NONE",
    ]
    if partition:
        directives.append(f"--partition={partition}")
    if timeout_s > 0:
        directives.append(f"--time={max(1, math.ceil(timeout_s / 60))}")
    if gpus_per_node > 0:
        directives.append(f"--gres=gpu:{gpus_per_node}")

    cases = []
    for node in nodes:
        env = {**node["env"], "TORCH_JOB_NODE_RANK": str(node["rank"])}
        command = allocation_command(node["command"], shared=not exclusive, gpus=gpus_per_node)
        fence = [str(arg) for arg in node.get("fence") or []]
        body = [
            *_assignments(env),
            f"command=({shlex.join(command)})",
            f"fence=({shlex.join(fence)})",
        ]
        cases.append(
            f"  {shlex.quote(str(node['name']))})\n    " + "\n    ".join(body) + "\n    ;;"
        )
    step = "\n".join(
        [
            'case "${SLURMD_NODENAME:-}" in',
            *cases,
            "  *)",
            '    echo "torch-cluster: ${SLURMD_NODENAME:-this node} is not a node of job '
            f'{job_id}" >&2',
            "    exit 2",
            "    ;;",
            "esac",
            *_allocation_lines(exclusive, master_port, gpus_per_node),
            f"cd {shlex.quote(output_dir)} || exit 2",
            f"exec >> {shlex.quote(log)} 2>&1 || exit 2",
            f'echo "=== torch-cluster: job {job_id}, attempt {attempt}, Slurm job '
            '${SLURM_JOB_ID}, node ${SLURMD_NODENAME} (node_rank ${TORCH_JOB_NODE_RANK}) ==="',
            *_allocation_said(exclusive, gpus_per_node),
            *FENCED_START,
        ]
    )
    lines = [
        "#!/bin/bash",
        f"# torch-cluster: job {job_id}, attempt {attempt}, {len(nodes)} node(s) in rank order:",
        f"# {' '.join(names)}. One torchrun per node; a node that fails ends the job everywhere.",
        *[f"#SBATCH {directive}" for directive in directives],
        "",
        "# Each node's part: its node_rank, environment and torchrun command.",
        "read -r -d '' TORCH_CLUSTER_STEP <<'TORCH_CLUSTER_STEP_END'",
        step,
        "TORCH_CLUSTER_STEP_END",
        "",
        "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        f'echo "torch-cluster: job {job_id} attempt {attempt}: Slurm job $SLURM_JOB_ID on '
        '$SLURM_JOB_NODELIST"',
        "srun --export=ALL --kill-on-bad-exit=1 --nodes=${SLURM_JOB_NUM_NODES} "
        "--ntasks-per-node=1 --ntasks=${SLURM_JOB_NUM_NODES} --cpu-bind=none "
        'bash -c "$TORCH_CLUSTER_STEP" &',
        *SRUN_CANCELLED,
        "",
    ]
    return "\n".join(lines)


# The end of each node's step: torchrun alone, or torchrun with its fence beside it. The fence
# starts with a clean environment (no TORCH_JOB_ID: it is not one of the job's processes), and
# is given torchrun's PID and the Slurm job's id. Once torchrun ends, the fence ends too (within
# its poll), or, if it fenced, once Slurm took its cancel; then the step ends as torchrun did, by
# the same signal if one ended it, so that srun reports the node's end as it would without it.
FENCED_START = [
    'if [ "${#fence[@]}" -eq 0 ]; then exec "${command[@]}"; fi',
    '"${command[@]}" &',
    "torchrun_pid=$!",
    'env -i PATH="$PATH" "${fence[@]}" "$torchrun_pid" "${SLURM_JOB_ID:-}" < /dev/null &',
    "fence_pid=$!",
    'wait "$torchrun_pid"',
    "status=$?",
    'wait "$fence_pid"',
    'if [ "$status" -gt 128 ]; then kill -n "$((status - 128))" "$$"; fi',
    'exit "$status"',
]

# The batch shell waits for srun. Cancelled (SIGTERM), srun would go on waiting for every
# node's step, a lost node's too, until Slurm's KillWait (30 s) ends it, and the batch step
# would hold its node that long: the next attempt's batch job could not start there. Slurm's
# slurmd ends each node's step itself; srun is only its client, and ends at once.
SRUN_CANCELLED = [
    "srun_pid=$!",
    "trap 'kill -KILL \"$srun_pid\" 2> /dev/null; exit 143' TERM",
    'wait "$srun_pid"',
]

# Jobs that share a node take master ports this far apart at most (see sbatch_script).
PORT_SPREAD = 10000


def allocation_command(command: Sequence[Any], *, shared: bool, gpus: int) -> list[str]:
    """A node's torchrun command for Slurm: without the options that the allocation decides
    (the master port when nodes are shared, the processes when GPUs are asked for), which
    the step gives torchrun through its environment (PET_MASTER_PORT, PET_NPROC_PER_NODE)."""
    dropped = (["--master-port="] if shared else []) + (["--nproc-per-node="] if gpus > 0 else [])
    # torchrun's own options come before the script; the script's arguments are left alone.
    kept, in_torchrun = [], True
    for index, arg in enumerate(str(a) for a in command):
        if index > 0 and in_torchrun and not arg.startswith("--"):
            in_torchrun = False
        if in_torchrun and any(arg.startswith(option) for option in dropped):
            continue
        kept.append(arg)
    return kept


def _allocation_lines(exclusive: bool, master_port: int, gpus: int) -> list[str]:
    lines = []
    if not exclusive:
        lines.append(
            f"export PET_MASTER_PORT=$(( {master_port} + 1 + SLURM_JOB_ID % {PORT_SPREAD} ))"
        )
    if gpus > 0:
        lines.append(f'export PET_NPROC_PER_NODE="${{SLURM_GPUS_ON_NODE:-{gpus}}}"')
    return lines


def _allocation_said(exclusive: bool, gpus: int) -> list[str]:
    """The node log's line on what Slurm gave the node, after the job's header."""
    said = []
    if gpus > 0:
        said.append(
            "${PET_NPROC_PER_NODE} process(es), one per GPU Slurm gave "
            "(GPU ${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-?}} of the node, "
            "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-not set})"
        )
    if not exclusive:
        said.append("master port ${PET_MASTER_PORT} (the node may run other jobs)")
    return [f'echo "torch-cluster: {"; ".join(said)}"'] if said else []


_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z:/_]*)=(\S*)")


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol --oneliner show job ID` as a dict (the fields this launcher reads hold no
    spaces)."""
    return {key: value for key, value in _FIELD.findall(text.strip())}


QUEUED_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})


RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "RESIZING"})


def job_phase(fields: Mapping[str, str]) -> str:
    """queued, running, or the launcher's end state: succeeded, failed, stopped, timed out."""
    state = fields.get("JobState", "").split("+")[0]
    if state in QUEUED_STATES:
        return "queued"
    if state in RUNNING_STATES:
        return RUNNING
    if state == "COMPLETED":
        return SUCCEEDED
    if state == "TIMEOUT":
        return TIMED_OUT
    if state in ("CANCELLED", "PREEMPTED"):
        return STOPPED
    return FAILED


_SRUN_ERROR = re.compile(r"^srun: error: (\S+): tasks? ([0-9,-]+): (.+?)\s*$")


def srun_errors(text: str) -> list[tuple[str, str]]:
    """(node, what happened) for each srun error line about a task, in the order srun wrote
    them: the first is the node whose task ended first."""
    found: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = _SRUN_ERROR.match(line.strip())
        if match and match.group(1) not in [node for node, _ in found]:
            found.append((match.group(1), f"task {match.group(2)}: {match.group(3)}"))
    return found


def describe_queue(fields: Mapping[str, str]) -> str:
    """What a waiting job waits for, e.g. `PENDING (Resources)`."""
    state = fields.get("JobState", "?")
    reason = fields.get("Reason", "")
    return f"{state} ({reason})" if reason and reason != "None" else state


def node_states(
    fields: Mapping[str, str], batch_output: str, names: Sequence[str]
) -> dict[str, NodeState]:
    """Each node's state in the launcher's words, from the job's state and srun's lines.

    While the job waits or runs every node runs (a waiting job's detail says for what). Once
    it ended: the nodes whose tasks srun reported failed come first, in srun's order; with
    --kill-on-bad-exit the others were ended by Slurm, and are stopped; a job cancelled or out
    of time ends every node the same way."""
    phase = job_phase(fields)
    state = fields.get("JobState", "?")
    exit_code = fields.get("ExitCode", "")
    if phase == "queued":
        return {
            name: NodeState(RUNNING, f"queued in Slurm: {describe_queue(fields)}") for name in names
        }
    if phase == RUNNING:
        return {name: NodeState(RUNNING, f"Slurm job {state}") for name in names}
    if phase == SUCCEEDED:
        return {
            name: NodeState(SUCCEEDED, "torchrun exit status 0 (Slurm: COMPLETED)")
            for name in names
        }
    if phase == TIMED_OUT:
        return {
            name: NodeState(TIMED_OUT, "Slurm ended the job at its time limit (train_timeout)")
            for name in names
        }
    if phase == STOPPED:
        # scancel (playbooks/stop.yml, or by hand) or preemption: every part was ended.
        return {name: NodeState(STOPPED, f"Slurm job {state}: cancelled") for name in names}
    errors = [(node, what) for node, what in srun_errors(batch_output) if node in names]
    states: dict[str, NodeState] = {}
    # Order matters to the verdict (first_failure keeps the given order when there are no
    # end times): srun's first error names the node that failed first.
    for index, (node, what) in enumerate(errors):
        if index == 0:
            states[node] = NodeState(
                FAILED, f"torchrun {what} (Slurm job {state}, exit code {exit_code})"
            )
        else:
            # --kill-on-bad-exit: Slurm ended the other nodes' parts after the first failure.
            states[node] = NodeState(
                STOPPED, f"ended by Slurm after {errors[0][0]} failed (torchrun {what})"
            )
    failed_first = list(states)
    for name in names:
        if name in states:
            continue
        if errors:
            states[name] = NodeState(STOPPED, f"ended by Slurm after {errors[0][0]} failed")
        else:
            reason = fields.get("Reason", "")
            detail = f"Slurm job {state}, exit code {exit_code}"
            states[name] = NodeState(
                FAILED, detail + (f", {reason}" if reason not in ("", "None") else "")
            )
    order = failed_first + [name for name in names if name not in failed_first]
    return {name: states[name] for name in order}


# squeue's states of a job that still holds nodes: pending, configuring, running, suspended,
# completing.
ACTIVE_STATES = ("PD", "CF", "R", "S", "CG")


COMPLETING = "CG"


def cancel_wait_states(lost_nodes: Sequence[str]) -> tuple[str, ...]:
    """The squeue states that a cancel waits out. With a node lost, Slurm keeps the job
    COMPLETING until that node answers again or is marked down (SlurmdTimeout, minutes), so the
    wait ends once the job runs nowhere: what it left on the nodes that answer is checked next,
    on each of them (torch_job_unit state=absent)."""
    return tuple(state for state in ACTIVE_STATES if not (lost_nodes and state == COMPLETING))


def parse_squeue_states(text: str) -> list[tuple[str, str]]:
    """`squeue --format='%i %t'` as (job id, state) pairs."""
    return [(fields[0], fields[1]) for fields in (line.split() for line in text.splitlines())
            if len(fields) >= 2]  # fmt: skip


def blocking_jobs(jobs: Sequence[tuple[str, str]]) -> list[str]:
    """The jobs of a name that a new submission of it must not run beside: queued or running.
    A completing one has ended; it may wait for a lost node for minutes (SlurmdTimeout), and the
    next attempt, on the other nodes, need not wait with it."""
    return [job for job, state in jobs if state != COMPLETING]


def jobs_to_wait_for(
    jobs: Sequence[tuple[str, str]], lost_nodes: Sequence[str], own_job: str = ""
) -> list[str]:
    """The cancelled jobs that the cancel still waits for: any queued or running; a completing
    one unless its attempt lost a node (cancel_wait_states). Given the attempt's own Slurm job,
    an earlier attempt's completing job is not waited for: its own cancel waited for it, as
    far as its lost nodes let it."""
    waited = cancel_wait_states(lost_nodes)
    return [
        job
        for job, state in jobs
        if state in waited and (state != COMPLETING or not own_job or job == own_job)
    ]


def with_lost_nodes(
    slurm: Mapping[str, NodeState], polled: Mapping[str, NodeState]
) -> dict[str, NodeState]:
    """Slurm's view of each node, except that a node the watch has lost (polled unreachable:
    not heard from for train_lost_after, liveness.Liveness.states) is unreachable whatever Slurm
    says. slurmctld notices a silent node only after its SlurmdTimeout (minutes), and until then
    torchrun on the other nodes waits for it in a collective."""
    lost = {name for name, state in polled.items() if state.state == UNREACHABLE}
    # The lost nodes first: they are the job's first failure.
    order = [name for name in slurm if name in lost] + [name for name in slurm if name not in lost]
    return {name: polled[name] if name in lost else slurm[name] for name in order}


# What a node named by controller_nodes does, in the record's words (lost_nodes.plan_nodes).
SLURM_CONTROLLER = "runs Slurm's controller (slurmctld)"
_CONTROLLER = re.compile(r"^SlurmctldHost\[\d+\]\s*=\s*([^(\s]+)(?:\(([^)]*)\))?", re.M)


def controller_nodes(
    show_config: str, names: Sequence[str], addresses: Mapping[str, str]
) -> list[str]:
    """The job's nodes (`names`, with their cluster `addresses`) that run Slurm's controller,
    from `scontrol show config`'s SlurmctldHost lines (`host(address)`, as slurm.yml writes
    them): by address, else by name. A job cannot go on without them: no batch job starts
    while slurmctld is away."""
    hosts = _CONTROLLER.findall(show_config)
    return [
        name
        for name in names
        if any(addresses.get(name) == addr or name == host for host, addr in hosts if host)
    ]


def preflight_problems(
    slurm_nodes: Sequence[str], wanted: Sequence[str], scontrol_ping: str, has_scontrol: bool
) -> list[str]:
    """Why the training group cannot run through Slurm here: Slurm missing, its controller
    down, or nodes of the group that Slurm does not know."""
    if not has_scontrol:
        return [
            "Slurm is not installed on the master (no scontrol): run playbooks/slurm.yml first, "
            "or leave train_launcher at systemd"
        ]
    problems = []
    if "UP" not in scontrol_ping:
        problems.append(
            "Slurm's controller does not answer "
            f"({' '.join(scontrol_ping.split()) or 'no answer'}): "
            "run playbooks/slurm.yml, or start slurmctld on the master"
        )
    missing = [name for name in wanted if name not in slurm_nodes]
    if missing and not problems:
        problems.append(
            f"Slurm does not know {', '.join(missing)} "
            f"(its nodes: {', '.join(slurm_nodes) or 'none'}): "
            "run playbooks/slurm.yml on this training group"
        )
    return problems
