#!/usr/bin/python
"""Ansible module: the torch jobs that a node holds (its job folders and units). Read-only."""

from __future__ import annotations

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import read_tail
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.listing import scan_node_log
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.logs import (
    progress_argument_spec,
    progress_matcher,
)

DOCUMENTATION = r"""
module: torch_job_list
short_description: List the torch jobs a node holds, with their newest attempt and unit state
description:
  - "Reads each job folder under I(base_dir)C(/jobs): the newest attempt's header in its log
    (attempt, node_rank, start), and rank 0's newest line and progress line after it (on the
    node that ran node_rank 0)."
  - Asks systemd once for every job unit (C(torch-job-*)) and its C(ActiveState) and
    C(SubState).
  - Read-only; runs in check mode too.
options:
  job_id:
    description: Only this job (empty for all).
    type: str
    default: ""
extends_documentation_fragment:
  - torch_cluster.cluster.node_base_dir
  - torch_cluster.cluster.progress_lines
"""

RETURN = r"""
jobs:
  description: Each job (job_id, attempt, node_rank, started, unit, last_line, progress).
  type: list
  returned: always
"""

UNIT = re.compile(r"^\s*torch-job-(\S+)\.service\s+\S+\s+(\S+)\s+(\S+)")


def unit_states(module: AnsibleModule) -> dict[str, str]:
    """Every job unit's "ActiveState/SubState", by job id."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return {}
    argv = [systemctl, "list-units", "--all", "--plain", "--no-legend", "--no-pager", "torch-job-*"]
    status, out, _ = module.run_command(argv)
    if status != 0:
        return {}
    found = [match for match in map(UNIT.match, out.splitlines()) if match]
    return {match.group(1): f"{match.group(2)}/{match.group(3)}" for match in found}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "default": "/var/lib/torch-cluster"},
            "job_id": {"type": "str", "default": ""},
            **progress_argument_spec(),
        },
        supports_check_mode=True,
    )
    p = module.params
    folder = os.path.join(p["base_dir"], "jobs")
    try:
        ids = sorted(os.listdir(folder))
    except OSError:
        ids = []
    units = unit_states(module)
    is_progress = progress_matcher(p["progress_prefixes"], p["progress_regex"])
    jobs = []
    for job_id in sorted(set(ids) | set(units)):
        if p["job_id"] and job_id != p["job_id"]:
            continue
        text = read_tail(os.path.join(folder, job_id, "node.log"))
        job = scan_node_log(job_id, text, is_progress)
        job.unit = units.get(job_id, "")
        jobs.append(job.as_dict())
    module.exit_json(changed=False, jobs=jobs)


if __name__ == "__main__":
    main()
