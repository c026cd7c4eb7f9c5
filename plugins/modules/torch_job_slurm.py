#!/usr/bin/python
"""Ansible module: a torchrun job's batch script, submitted to Slurm or cancelled there."""

from __future__ import annotations

import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import (
    read_text,
    replace_text,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.slurm import (
    ACTIVE_STATES,
    blocking_jobs,
    controller_nodes,
    job_name,
    jobs_to_wait_for,
    parse_squeue_states,
    preflight_problems,
    sbatch_script,
)

DOCUMENTATION = r"""
module: torch_job_slurm
short_description: Submit a torchrun job to Slurm, cancel it, or check that Slurm can run it
description:
  - Runs on the training master, which is Slurm's controller after playbooks/slurm.yml.
  - C(state=checked) reports why Slurm cannot run the job (not installed, controller down,
    nodes it does not know); changes nothing.
  - C(state=exported) writes the batch script (plugins/module_utils/job/slurm.py) to I(script).
  - C(state=submitted) writes it and submits it with C(sbatch) (as the task's user), unless a
    job of the same name is queued or running already (one still completing, held by a node
    an earlier attempt lost, is no obstacle).
  - C(state=absent) cancels every queued or running Slurm job of the launcher job
    (C(scancel --name)), and waits until Slurm has ended them.
options:
  state:
    description: What to do.
    type: str
    choices: [checked, exported, submitted, absent]
    required: true
  job_id:
    description: The launcher's job id; the Slurm job is named C(torch-<job_id>).
    type: str
    required: true
  attempt:
    description: The attempt the script starts.
    type: int
    default: 1
  nodes:
    description:
      - In rank order, each node's C(name) (inventory hostname, which is its Slurm node name),
        C(rank), C(env) and C(command), what the default launcher would run there.
    type: list
    elements: dict
    default: []
  script:
    description: Where the batch script is written.
    type: path
  job_dir:
    description: The job's folder on the nodes (Slurm's output file goes there).
    type: path
  output_dir:
    description: The job's output folder on the nodes (the working folder).
    type: path
  log:
    description: Each node's log, which its part of the job appends to.
    type: path
  partition:
    description: The Slurm partition; empty for the default one.
    type: str
    default: ""
  timeout:
    description: The job's time limit in seconds (0 for none); Slurm's is in whole minutes.
    type: int
    default: 0
  gpus_per_node:
    description: GRES gpu count asked for on each node (0 to ask for none).
    type: int
    default: 0
  exclusive:
    description:
      - The job takes whole nodes. false, it takes I(gpus_per_node) GPUs of each node and
        other jobs may run beside it; its torchrun then takes a master port of its own, from
        I(master_port) and the Slurm job id.
    type: bool
    default: true
  master_port:
    description: The cluster's master port, from which a job that shares its nodes counts.
    type: int
    default: 0
  wait:
    description: With I(state=absent), seconds to wait for the cancelled jobs to end.
    type: float
    default: 60
  slurm_job_id:
    description:
      - With I(state=absent), the attempt's own Slurm job. The cancel then does not wait for an
        earlier attempt's job still completing (on a node that attempt lost).
    type: str
    default: ""
  addresses:
    description:
      - With I(state=checked), each node's cluster address by name (train_nodes). The nodes
        that run Slurm's controller are found by it.
    type: dict
    default: {}
  lost_nodes:
    description:
      - With I(state=absent), the nodes the watch lost. Slurm keeps the job completing until
        they answer again or it marks them down, so the wait ends once the job runs nowhere.
    type: list
    elements: str
    default: []
"""

RETURN = r"""
slurm_job_id:
  description: The Slurm job id (submitted).
  type: str
  returned: when state is submitted
script_text:
  description: The batch script.
  type: str
  returned: when state is exported or submitted
cancelled:
  description: Slurm job ids cancelled (absent).
  type: list
  returned: when state is absent
problems:
  description: Why Slurm cannot run the job (checked).
  type: list
  returned: when state is checked
controllers:
  description: The names of I(nodes) that run Slurm's controller (checked), found by their
    I(addresses); a job cannot go on without them after a loss.
  type: list
  returned: when state is checked
"""


def active_jobs(module: AnsibleModule, name: str) -> list[tuple[str, str]]:
    """(Slurm job id, squeue state) of the jobs of this name that hold nodes (queued, running
    or ending)."""
    rc, out, err = module.run_command(
        ["squeue", "--noheader", f"--name={name}", "--format=%i %t",
         f"--states={','.join(ACTIVE_STATES)}"]
    )  # fmt: skip
    if rc != 0:
        module.fail_json(msg=f"squeue failed: {(err or out).strip()}")
    return parse_squeue_states(out)


def check(module: AnsibleModule) -> None:
    params = module.params
    wanted = [str(node["name"]) for node in params["nodes"]]
    if not shutil.which("scontrol"):
        module.exit_json(changed=False, problems=preflight_problems([], wanted, "", False))
    _, ping, ping_err = module.run_command(["scontrol", "ping"])
    _, out, _ = module.run_command(["sinfo", "--noheader", "--Node", "--format=%N"])
    problems = preflight_problems(sorted(set(out.split())), wanted, ping + ping_err, True)
    _, config, _ = module.run_command(["scontrol", "show", "config"])
    controllers = controller_nodes(config, wanted, params["addresses"])
    module.exit_json(changed=False, problems=problems, controllers=controllers)


def write_script(module: AnsibleModule) -> tuple[str, bool]:
    params = module.params
    for required in ("script", "job_dir", "output_dir", "log"):
        if not params[required]:
            module.fail_json(msg=f"state={params['state']} needs {required}")
    try:
        text = sbatch_script(
            job_id=params["job_id"],
            attempt=params["attempt"],
            nodes=params["nodes"],
            job_dir=params["job_dir"],
            output_dir=params["output_dir"],
            log=params["log"],
            partition=params["partition"],
            timeout_s=params["timeout"],
            gpus_per_node=params["gpus_per_node"],
            exclusive=params["exclusive"],
            master_port=params["master_port"],
        )
    except (KeyError, ValueError) as err:
        module.fail_json(msg=f"cannot write the batch script: {err}")
    path = params["script"]
    if read_text(path) == text:
        return text, False
    if not module.check_mode:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        replace_text(path, text, mode=0o755)
    return text, True


def submit(module: AnsibleModule) -> None:
    params = module.params
    name = job_name(params["job_id"])
    running = [] if module.check_mode else blocking_jobs(active_jobs(module, name))
    if running:
        module.fail_json(
            msg=f"Slurm job(s) {', '.join(running)} of job {params['job_id']} are queued or "
            "running already: wait for them, or stop them with playbooks/stop.yml"
        )
    text, changed = write_script(module)
    if params["state"] == "exported" or module.check_mode:
        module.exit_json(changed=changed, script_text=text, slurm_job_id="")
    rc, out, err = module.run_command(["sbatch", "--parsable", params["script"]])
    if rc != 0:
        module.fail_json(msg=f"sbatch refused the job: {(err or out).strip()}", script_text=text)
    module.exit_json(changed=True, script_text=text, slurm_job_id=out.strip().split(";")[0])


def cancel(module: AnsibleModule) -> None:
    params = module.params
    if not shutil.which("squeue"):
        module.exit_json(changed=False, cancelled=[], msg="Slurm is not installed here")
    name = job_name(params["job_id"])
    ids = [job for job, _ in active_jobs(module, name)]
    if not ids or module.check_mode:
        module.exit_json(changed=bool(ids), cancelled=ids)
    rc, out, err = module.run_command(["scancel", f"--name={name}"])
    if rc != 0:
        module.fail_json(msg=f"scancel failed: {(err or out).strip()}")
    deadline = time.monotonic() + params["wait"]
    lost, own = params["lost_nodes"], params["slurm_job_id"]
    left = jobs_to_wait_for(active_jobs(module, name), lost, own)
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = jobs_to_wait_for(active_jobs(module, name), lost, own)
    if left:
        module.fail_json(
            msg=f"Slurm job(s) {', '.join(left)} still ran {params['wait']:.0f} s after scancel",
            cancelled=ids,
        )
    module.exit_json(changed=True, cancelled=ids)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {
                "type": "str",
                "required": True,
                "choices": ["checked", "exported", "submitted", "absent"],
            },
            "job_id": {"type": "str", "required": True},
            "attempt": {"type": "int", "default": 1},
            "nodes": {"type": "list", "elements": "dict", "default": []},
            "script": {"type": "path"},
            "job_dir": {"type": "path"},
            "output_dir": {"type": "path"},
            "log": {"type": "path"},
            "partition": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 0},
            "gpus_per_node": {"type": "int", "default": 0},
            "exclusive": {"type": "bool", "default": True},
            "master_port": {"type": "int", "default": 0},
            "wait": {"type": "float", "default": 60},
            "lost_nodes": {"type": "list", "elements": "str", "default": []},
            "addresses": {"type": "dict", "default": {}},
            "slurm_job_id": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    state = module.params["state"]
    if state == "checked":
        check(module)
    elif state == "absent":
        cancel(module)
    else:
        submit(module)


if __name__ == "__main__":
    main()
