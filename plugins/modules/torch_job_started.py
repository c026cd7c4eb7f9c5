#!/usr/bin/python
"""Ansible module: record on the controller that an attempt of a torchrun job has started."""

from __future__ import annotations

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import (
    read_json,
    write_json,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempts import (
    attempt_argument_spec,
)

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
  launcher:
    description: How the job runs (systemd or slurm).
    type: str
    default: systemd
  world_size:
    description: The attempt's processes in all.
    type: int
    default: 0
extends_documentation_fragment:
  - torch_cluster.cluster.job_attempt
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
            **attempt_argument_spec(),
            "launcher": {"type": "str", "default": "systemd"},
            "world_size": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    previous = read_json(p["path"]).get("attempts", []) if p["attempt"] > 1 else []
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
