#!/usr/bin/python
"""Ansible module: the cluster's torch jobs, one row each, on the controller. Read-only."""

from __future__ import annotations

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.listing import (
    job_rows,
    job_table,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.queue import (
    history_table,
    queue_table,
)

DOCUMENTATION = r"""
module: torch_job_table
short_description: List the cluster's torch jobs from the launcher's records and the nodes
description:
  - Reads each job's C(attempts.json) in I(runs_dir) (the launcher's record on the controller;
    an attempt is "running" from its start until its outcome replaces it) and what each node
    holds (torch_job_list), and makes one row a job (listing.job_rows).
  - Read-only; runs in check mode too.
options:
  runs_dir:
    description: The launcher's runs folder on the controller (train_runs_dir).
    type: path
    required: true
  nodes:
    description: Each node's torch_job_list result (its jobs), by node name.
    type: dict
    required: true
  job_id:
    description: Only this job (empty for all).
    type: str
    default: ""
  queue:
    description:
      - torch_job_queue's result on the master. Where Slurm answered (C(available)), the table
        goes on with Slurm's queue, every person's jobs (a job of this launcher with rank 0's
        last progress line), and I(queue_user)'s finished Slurm jobs.
    type: dict
    default: {}
  queue_user:
    description: Whose finished Slurm jobs the queue's history holds.
    type: str
    default: ""
"""

RETURN = r"""
jobs:
  description: One row a job (listing.JobRow) with its job_id, state, nodes, attempt, progress, ...
  type: list
  returned: always
table:
  description: The rows as a table.
  type: str
  returned: always
unanswered:
  description: The nodes that did not answer (their jobs are missing from the rows).
  type: list
  returned: always
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "runs_dir": {"type": "path", "required": True},
            "nodes": {"type": "dict", "required": True},
            "job_id": {"type": "str", "default": ""},
            "queue": {"type": "dict", "default": {}},
            "queue_user": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    records = {}
    for path in sorted(glob.glob(os.path.join(p["runs_dir"], "*", "attempts.json"))):
        job_id = os.path.basename(os.path.dirname(path))
        if p["job_id"] and job_id != p["job_id"]:
            continue
        try:
            with open(path) as handle:
                records[job_id] = json.load(handle)
        except (OSError, ValueError):
            continue
    unanswered = sorted(
        name
        for name, seen in p["nodes"].items()
        if not isinstance(seen, dict) or "jobs" not in seen
    )
    nodes = {name: seen["jobs"] for name, seen in p["nodes"].items() if name not in unanswered}
    rows = job_rows(records, nodes)
    table = job_table(rows) if rows else "No jobs."
    if unanswered:
        table += f"\n(no answer from {', '.join(unanswered)}: their jobs may be missing)"
    queue = p["queue"] or {}
    if queue.get("available"):
        progress = {row.job_id: row.progress for row in rows}
        table += "\n\nSlurm's queue, every person's jobs:\n" + queue_table(queue["queue"], progress)
        if p["queue_user"]:
            table += "\n\n" + history_table(queue.get("history") or [], p["queue_user"])
        for error in queue.get("errors") or []:
            table += f"\n({error})"
    module.exit_json(
        changed=False, jobs=[row.as_dict() for row in rows], table=table, unanswered=unanswered
    )


if __name__ == "__main__":
    main()
