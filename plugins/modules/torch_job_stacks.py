#!/usr/bin/python
"""Ansible module: every rank's Python stack and NCCL flight recorder dump of a job on a node."""

from __future__ import annotations

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.fence import KeptHeard
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.flight_dumps import (
    copy_flight_recorder_files,
    request_flight_recorder_dumps,
    wait_for_dumps,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.flight_recorder import (
    flight_recorder_reason,
    flight_recorder_settings,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.processes import (
    job_processes_of,
    workers_and_agent,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.stacks import collect_stacks

DOCUMENTATION = r"""
module: torch_job_stacks
short_description: Collect a job's Python stacks and NCCL flight recorder dumps on a node
description:
  - Finds the processes of the job's unit (its cgroup, C(systemctl show -p ControlGroup), and
    the cgroups below it; else every process whose environment carries C(TORCH_JOB_ID)),
    takes each process with C(RANK) in its environment for a rank (the topmost one of each
    rank, whose own children inherit its C(RANK)) and their parent without C(RANK) for
    torchrun's agent.
  - Runs C(py-spy dump) (JSON, then text) on every rank and on the agent at once, and writes
    C(rankN.json), C(rankN.txt), C(agent.json) and C(agent.txt) into I(dest).
  - On NCCL, asks every rank for a flight recorder dump through its pipe
    (C(TORCH_NCCL_DEBUG_INFO_PIPE_FILE), C(<prefix><rank>.pipe)), waits for the dumps
    (C(<prefix><rank>)) and copies every dump under the prefix into I(dest), those written
    earlier on a collective's timeout too. A gloo job has no pipe, and no dump.
  - Needs root (py-spy attaches to the processes with ptrace). In check mode it only finds
    the processes.
options:
  unit:
    description: The job's systemd unit (C(torch-job-ID)); empty to find the processes by I(job_id).
    type: str
    default: ""
  job_id:
    description: The job's id, which its processes carry as C(TORCH_JOB_ID).
    type: str
    required: true
  dest:
    description: Folder on the node that gets the files (made when missing).
    type: path
    required: true
  py_spy:
    description: The py-spy executable;
      empty for the one next to each process's Python, else on PATH.
    type: path
    default: ""
  flight_recorder_prefix:
    description:
      - The prefix of the flight recorder's pipes and dumps that the launcher gave the job
        (torch_job_stall.flight_recorder_env); empty for what the ranks' environment says.
    type: str
    default: ""
  timeout:
    description: Seconds to wait for each py-spy dump, and for the flight recorder's dumps.
    type: int
    default: 20
"""

RETURN = r"""
ranks:
  description:
    - One per rank on the node, in rank order, with C(rank), C(local_rank), C(world_size),
      C(pid), C(frames) (the main thread's, innermost first, each with C(function), C(file),
      C(line), C(path) and C(code), the source line) and C(error) (why there are no frames).
  type: list
  returned: always
agent:
  description: torchrun's agent, with C(pid), C(command), C(frames) and C(error); null when none.
  type: dict
  returned: always
files:
  description: The files written into I(dest), the flight recorder's dumps included.
  type: list
  returned: always
flight_recorder:
  description:
    - C(files), the dumps copied, and C(reason), why there are fewer than one per rank asked
      (empty when there are not).
  type: dict
  returned: always
msg:
  description: What was found.
  type: str
  returned: always
"""


def control_group(module: AnsibleModule, unit: str) -> str:
    """The unit's cgroup; empty when systemd does not know it (or does not run)."""
    if not unit:
        return ""
    rc, out, _ = module.run_command(["systemctl", "show", "-p", "ControlGroup", "--value", unit])
    return out.strip() if rc == 0 else ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "default": ""},
            "job_id": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "py_spy": {"type": "path", "default": ""},
            "flight_recorder_prefix": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    params = module.params
    processes = job_processes_of(control_group(module, params["unit"]), params["job_id"])
    workers, agent = workers_and_agent(processes)
    found = f"{len(workers)} rank(s) and {'an' if agent else 'no'} agent of job {params['job_id']}"
    if module.check_mode or (not workers and agent is None):
        module.exit_json(
            changed=bool(workers or agent),
            ranks=[
                {
                    "rank": w.rank,
                    "local_rank": w.local_rank,
                    "world_size": w.world_size,
                    "pid": w.pid,
                    "frames": [],
                    "error": "",
                }
                for w in workers
            ],
            agent={"pid": agent.pid, "frames": [], "error": ""} if agent else None,
            files=[],
            flight_recorder={"files": [], "reason": ""},
            msg=found,
        )
    pipe_prefix, dump_prefix = flight_recorder_settings(workers, params["flight_recorder_prefix"])
    since = time.time()
    # The job's fence (train_fence_timeout) waits while its stacks are read.
    with KeptHeard(params["unit"]):
        # The ranks dump in a thread of their own while py-spy reads their stacks.
        asked, unread = request_flight_recorder_dumps(pipe_prefix) if pipe_prefix else ([], [])
        ranks, agent_record, files = collect_stacks(
            workers, agent, params["dest"], params["py_spy"], params["timeout"]
        )
        late = wait_for_dumps(dump_prefix, asked, since, params["timeout"]) if asked else []
        dumps = copy_flight_recorder_files(dump_prefix, params["dest"]) if dump_prefix else []
    module.exit_json(
        changed=bool(files or dumps),
        ranks=ranks,
        agent=agent_record,
        files=files + dumps,
        flight_recorder={
            "files": dumps,
            "reason": flight_recorder_reason(pipe_prefix, asked, unread, late),
        },
        msg=found,
    )


if __name__ == "__main__":
    main()
