#!/usr/bin/python
"""Ansible module: Slurm's queue, every person's jobs, and one person's finished ones. Read-only."""

from __future__ import annotations

import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.queue import (
    SACCT_FORMAT,
    SQUEUE_FORMAT,
    parse_sacct,
    parse_squeue,
)

DOCUMENTATION = r"""
module: torch_job_queue
short_description: Read Slurm's queue (every person's jobs) and one person's finished jobs
description:
  - Runs on a node with Slurm's commands (the master, after playbooks/slurm.yml). Lists every
    queued and running job of every user (C(squeue --all)), and the finished jobs of
    I(user) over the last I(days) days (C(sacct)). Where Slurm is not installed it reports
    C(available=false) and reads nothing.
  - Read-only; runs in check mode too.
options:
  user:
    description: Whose finished jobs to read from sacct; empty for none.
    type: str
    default: ""
  days:
    description: How many days back sacct looks.
    type: int
    default: 7
"""

RETURN = r"""
available:
  description: Whether squeue is installed here.
  type: bool
  returned: always
queue:
  description: Each queued or running job (job/queue.py SQUEUE_FIELDS), as squeue orders them.
  type: list
  returned: always
history:
  description: The user's jobs from sacct (job/queue.py SACCT_FIELDS).
  type: list
  returned: always
errors:
  description: What squeue or sacct said when they failed.
  type: list
  returned: always
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "user": {"type": "str", "default": ""},
            "days": {"type": "int", "default": 7},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not shutil.which("squeue"):
        module.exit_json(changed=False, available=False, queue=[], history=[], errors=[])
    errors = []
    rc, out, err = module.run_command(
        ["squeue", "--all", "--noheader", f"--format={SQUEUE_FORMAT}"]
    )
    queue = parse_squeue(out) if rc == 0 else []
    if rc != 0:
        errors.append(f"squeue: {' '.join(err.split()) or f'exit status {rc}'}")
    history = []
    if p["user"] and shutil.which("sacct"):
        rc, out, err = module.run_command(
            ["sacct", f"--user={p['user']}", f"--starttime=now-{p['days']}days", "--noheader",
             "--parsable2", "--allocations", f"--format={SACCT_FORMAT}"]
        )  # fmt: skip
        history = parse_sacct(out) if rc == 0 else []
        if rc != 0:
            errors.append(f"sacct: {' '.join(err.split()) or f'exit status {rc}'}")
    module.exit_json(changed=False, available=True, queue=queue, history=history, errors=errors)


if __name__ == "__main__":
    main()
