#!/usr/bin/python
"""Ansible module: record on the controller that an attempt of a torchrun job has started."""

from __future__ import annotations

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import write_json

DOCUMENTATION = r"""
module: torch_job_started
short_description: Record that an attempt of a torchrun job has started
description:
  - Writes the attempt into I(path) (the job's C(attempts.json) in its runs folder) as
    C(running), after the attempts before it, with the job's launcher and world size, so that
    playbooks/jobs.yml reads a running job from the same record as an ended one. When the
    attempt ends, torch_job_record replaces the entry with its outcome.
  - Attempt 1 starts the file anew.
options:
  path:
    description: The attempts file.
    type: path
    required: true
  job_id:
    description: The job's id.
    type: str
    required: true
  attempt:
    description: This attempt's number, from 1.
    type: int
    required: true
  nodes:
    description: This attempt's nodes, in rank order (the first is the master).
    type: list
    elements: str
    required: true
  launcher:
    description: How the job runs (systemd or slurm).
    type: str
    default: systemd
  world_size:
    description: The attempt's processes in all.
    type: int
    default: 0
  max_restarts:
    description: How many times the job may start again after a failure.
    type: int
    default: 0
"""

RETURN = r"""
path:
  description: The attempts file written.
  type: str
  returned: always
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "job_id": {"type": "str", "required": True},
            "attempt": {"type": "int", "required": True},
            "nodes": {"type": "list", "elements": "str", "required": True},
            "launcher": {"type": "str", "default": "systemd"},
            "world_size": {"type": "int", "default": 0},
            "max_restarts": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    previous = []
    if p["attempt"] > 1 and os.path.exists(p["path"]):
        try:
            with open(p["path"]) as handle:
                previous = json.load(handle).get("attempts", [])
        except (OSError, ValueError):
            previous = []
    attempts = [entry for entry in previous if int(entry.get("number", 0)) < p["attempt"]]
    attempts.append(
        {
            "number": p["attempt"],
            "outcome": "running",
            "nodes_used": p["nodes"],
            "started_at": time.time(),
        }
    )
    record = {
        "job_id": p["job_id"],
        "launcher": p["launcher"],
        "world_size": p["world_size"],
        "max_restarts": p["max_restarts"],
        "attempts": attempts,
    }
    if not module.check_mode:
        write_json(p["path"], record)
    module.exit_json(changed=True, path=p["path"])


if __name__ == "__main__":
    main()
