#!/usr/bin/python
"""Ansible module: record how an attempt of a torchrun job ended, and decide what comes next."""

from __future__ import annotations

import datetime
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import (
    read_json,
    write_json,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempts import (
    Attempt,
    attempt_argument_spec,
    teardown_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.failures import (
    job_failures,
    merge_tails,
    nodes_by_failure,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.fence import fence_until
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.lost_nodes import (
    excluded_nodes,
    lost_nodes,
    plan_nodes,
    resumed_from,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.messages import (
    final_message,
    restart_message,
    success_message,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.restarts import (
    decide_restart,
    time_left,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.slurm import (
    SLURM_CONTROLLER,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.stall import stall_outliers
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.watch import (
    JOB_FAILED,
    JOB_STALLED,
    JOB_SUCCEEDED,
)

DOCUMENTATION = r"""
module: torch_job_record
short_description: Record an attempt of a torchrun job on the controller and decide on a restart
description:
  - Runs on the controller after each attempt (the job's units started, watched and stopped).
    Adds the attempt to I(path) (the job's C(attempts.json) in its runs folder), decides
    whether the job starts again from its checkpoint, and returns the message for the user.
  - After a failure, orders every failed process (from torchrun's summaries, which each
    node's stop returned, and the nodes' states) so that the first failure leads, and writes
    them to C(failure.json) beside I(path).
  - A job restarts when it failed or stalled after training had started, it has restarts left,
    and every node that is still in the job answered the stop and is clean (no process of the
    job left, the master port free). It never restarts after a requested stop or its time
    limit.
  - A node that stopped answering, or failed on hardware (I(hardware)), leaves the job. A
    spare of I(spares) takes its place, else the job goes on with the nodes left when they
    number at least I(min_nodes) (lost_nodes.plan_nodes). The next attempt's nodes are returned
    in I(next_nodes); a node that left is not used again.
options:
  startup_timeout:
    description: Seconds from the start in which a failure without progress is a start-up failure.
    type: int
    default: 300
  timeout:
    description: The job's time limit in seconds (0 for none), for the message.
    type: int
    default: 0
  watch:
    description: What the torch_job_watch action returned.
    type: dict
    required: true
  teardown:
    description: Each node's result of the stop (torch_job_unit state=absent), by name.
    type: dict
    required: true
  run_dir:
    description: The job's runs folder on the controller, for the message.
    type: str
    required: true
  stop_hint:
    description: The command that stops the job, for the message.
    type: str
    required: true
  sync:
    description: What keeping the output folders in step cost (torch_job_sync), by phase.
    type: dict
    default: {}
  spares:
    description: The spare nodes (train_spare_group), in inventory order.
    type: list
    elements: str
    default: []
  min_nodes:
    description: The fewest nodes the job may go on with after losing some (0 for all of them).
    type: int
    default: 0
  slurm_controllers:
    description: The job's nodes that run Slurm's controller (train_launcher=slurm). A job that
      loses one does not restart, since no batch job starts without it.
    type: list
    elements: str
    default: []
  job_size:
    description: The number of nodes the job started with.
    type: int
    required: true
  hardware:
    description: The hardware faults found on each failed node that still answered, by name.
    type: dict
    default: {}
  stall:
    description:
      - A stalled attempt's stacks (each node's torch_job_stacks result, by name) under
        C(nodes), with C(timeout), C(quiet_for) and C(folder) (where they are on the controller).
    type: dict
    default: {}
  shared_dir:
    description: The job's shared folder ("" for none), for where the attempt resumed from.
    type: str
    default: ""
  resumed:
    description: Whether this attempt continued from the job's files (a restart, or train_resume).
    type: bool
    default: false
  fence_timeout:
    description:
      - train_fence_timeout. The nodes the attempt lost fence themselves this long after they
        were last heard from (I(watch)'s C(heard)); C(fence_until) says when that is done.
    type: float
    default: 0
extends_documentation_fragment:
  - torch_cluster.cluster.job_attempt
"""

RETURN = r"""
fence_until:
  description: When (seconds since the epoch) every node the attempt lost has fenced itself;
    the next attempt starts no earlier. 0 when there is nothing to wait for.
  type: float
  returned: always
outcome:
  description: How the attempt ended (succeeded, failed, stopped, timed out, unwatchable).
  type: str
  returned: always
restart:
  description: Whether the job starts again.
  type: bool
  returned: always
message:
  description: What the user reads (the restart, or the whole story of a job that did not succeed).
  type: str
  returned: always
runtime_left:
  description: Seconds left of the job's time limit, for the next attempt's units (0 for no limit).
  type: int
  returned: always
next_nodes:
  description: The next attempt's nodes in rank order, or this attempt's when it does not restart.
  type: list
  returned: always
attempts:
  description: Every attempt of this run, as recorded.
  type: list
  returned: always
"""


def stall_record(stall: dict) -> dict:
    """A stalled attempt's record: how long rank 0 was quiet, where the stacks are, and which
    ranks were elsewhere than the rest (stall.stall_outliers over every node's
    stacks). Written to summary.json beside the stacks too."""
    frames: dict[int, list | None] = {}
    errors: dict[int, str] = {}
    unanswered = []
    for name, result in (stall.get("nodes") or {}).items():
        if not isinstance(result, dict) or result.get("skipped") or "ranks" not in result:
            unanswered.append(name)
            continue
        for rank in result["ranks"]:
            frames[int(rank["rank"])] = rank.get("frames") or None
            if rank.get("error"):
                errors[int(rank["rank"])] = f"{name}: {rank['error']}"
    report = stall_outliers(frames, errors).as_dict()
    if unanswered:
        report["summary"] += f"; no stacks from {', '.join(unanswered)}"
    record = {
        "timeout": int(stall.get("timeout") or 0),
        "quiet_for": round(float(stall.get("quiet_for") or 0), 1),
        "folder": str(stall.get("folder") or ""),
        **report,
    }
    if record["folder"]:
        write_json(os.path.join(record["folder"], "summary.json"), record)
    return record


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **attempt_argument_spec(),
            "startup_timeout": {"type": "int", "default": 300},
            "timeout": {"type": "int", "default": 0},
            "watch": {"type": "dict", "required": True},
            "teardown": {"type": "dict", "required": True},
            "run_dir": {"type": "str", "required": True},
            "stop_hint": {"type": "str", "required": True},
            "sync": {"type": "dict", "default": {}},
            "spares": {"type": "list", "elements": "str", "default": []},
            "min_nodes": {"type": "int", "default": 0},
            "slurm_controllers": {"type": "list", "elements": "str", "default": []},
            "job_size": {"type": "int", "required": True},
            "hardware": {"type": "dict", "default": {}},
            "stall": {"type": "dict", "default": {}},
            "shared_dir": {"type": "str", "default": ""},
            "resumed": {"type": "bool", "default": False},
            "fence_timeout": {"type": "float", "default": 0},
        },
        supports_check_mode=False,
    )
    params = module.params
    watch = params["watch"]
    unreachable, problems = teardown_problems(params["teardown"])
    attempt = Attempt(
        number=params["attempt"],
        outcome=watch.get("job", "unwatchable"),
        nodes=watch.get("nodes", {}),
        failed_nodes=list(watch.get("failed_nodes", [])),
        unreachable_nodes=sorted(set(watch.get("unreachable_nodes", [])) | set(unreachable)),
        training_started=bool(watch.get("training_started")),
        started_at=float(watch.get("started_at", time.time())),
        seconds=float(watch.get("seconds", 0)),
        tails=merge_tails(
            watch.get("tails", {}),
            {name: str(result.get("tail") or "") for name, result in params["teardown"].items()},
        ),
        error=watch.get("error", "") or watch.get("msg", ""),
        teardown_problems=problems,
        sync=params["sync"],
        nodes_used=list(params["nodes"]),
        copies_during=list(watch.get("copies_during") or []),
        heard=dict(watch.get("heard") or {}),
    )
    attempt.fence_until = fence_until(
        attempt.heard, attempt.unreachable_nodes, params["fence_timeout"]
    )
    if params["resumed"] and params["nodes"]:
        attempt.resumed_from = resumed_from(
            params["sync"].get("before") or {}, params["nodes"][0], params["shared_dir"]
        )
    if attempt.outcome == JOB_STALLED:
        attempt.stall = stall_record(params["stall"])
    reported = {name: result.get("failures") or [] for name, result in params["teardown"].items()}
    failures = job_failures(attempt.nodes, reported)
    attempt.failures = [f.as_dict() for f in failures]
    attempt.failed_nodes = nodes_by_failure(attempt.failed_nodes, failures)
    if attempt.outcome == JOB_SUCCEEDED and problems:
        attempt.outcome = "failed"  # a job that leaves processes behind did not end cleanly
    failure_file = os.path.join(os.path.dirname(params["path"]), "failure.json")
    if params["attempt"] == 1 and os.path.exists(failure_file):
        os.remove(failure_file)  # an earlier run's
    previous = []
    if params["attempt"] > 1 and os.path.exists(params["path"]):
        with open(params["path"]) as handle:
            previous = json.load(handle).get("attempts", [])
    attempts = [Attempt(**entry) for entry in previous if entry["number"] < attempt.number]
    attempts.append(attempt)

    # The time limit holds for the whole job, counted from the first attempt's start.
    seconds_left = time_left(params["timeout"], attempts[0].started_at, time.time())
    lost = lost_nodes(attempt.nodes_used, attempt.unreachable_nodes, params["hardware"])
    plan = plan_nodes(
        attempt.nodes_used,
        lost,
        spares=params["spares"],
        excluded=excluded_nodes([a.as_dict() for a in attempts[:-1]]),
        job_size=params["job_size"],
        min_nodes=params["min_nodes"],
        indispensable={name: SLURM_CONTROLLER for name in params["slurm_controllers"]},
    )
    attempt.left, attempt.replaced = plan.left, plan.replaced
    why_not = decide_restart(
        attempt,
        params["max_restarts"],
        params["startup_timeout"],
        seconds_left,
        lost_why_not=plan.why_not if lost else None,
    )
    attempt.restarted = why_not is None
    attempt.not_restarted_because = why_not or ""
    attempt.next_nodes = plan.nodes if attempt.restarted else list(attempt.nodes_used)
    # The launcher and the world size that torch_job_started wrote at the attempt's start.
    started = read_json(params["path"])
    kept = {key: started[key] for key in ("launcher", "world_size") if key in started}
    record = {
        "job_id": params["job_id"],
        **kept,
        "max_restarts": params["max_restarts"],
        "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "attempts": [a.as_dict() for a in attempts],
    }
    write_json(params["path"], record)
    if attempt.outcome == JOB_FAILED:
        write_json(
            failure_file,
            {
                "job_id": params["job_id"],
                "attempt": attempt.number,
                "first_failure": attempt.failures[0] if attempt.failures else None,
                "consequences": attempt.failures[1:],
            },
        )

    if attempt.restarted:
        message = restart_message(params["job_id"], attempt, params["max_restarts"])
    elif attempt.outcome == JOB_SUCCEEDED:
        message = success_message(params["job_id"], attempts)
    else:
        message = final_message(
            params["job_id"],
            attempts,
            run_dir=params["run_dir"],
            timeout=params["timeout"],
            max_restarts=params["max_restarts"],
            stop_hint=params["stop_hint"],
        )
    module.exit_json(
        changed=True,
        outcome=attempt.outcome,
        restart=attempt.restarted,
        # The next attempt's time limit: what is left of train_timeout (0 for none).
        runtime_left=max(seconds_left, 0),
        message=message,
        next_nodes=attempt.next_nodes,
        # The next attempt starts no earlier (the lost nodes' fences; seconds since the epoch).
        fence_until=attempt.fence_until,
        attempts=[a.as_dict() for a in attempts],
    )


if __name__ == "__main__":
    main()
