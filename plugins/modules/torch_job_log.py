#!/usr/bin/python
"""Ansible module: a part of a torch job's log on a node, for playbooks/logs.yml. Read-only."""

from __future__ import annotations

import os
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.listing import (
    log_lines,
    unit_runs,
)

DOCUMENTATION = r"""
module: torch_job_log
short_description: Read a torch job's log on a node (one rank, or all of it)
description:
  - "Reads the job's log (I(base_dir)C(/jobs/<job_id>/node.log)): its last I(lines) lines of
    I(rank), or, from I(offset) on, what was written since (following a running job: it waits
    up to I(wait) seconds for new lines)."
  - Says whether the job's unit still runs on the node. Read-only; runs in check mode too.
options:
  job_id:
    description: The job.
    type: str
    required: true
  rank:
    description: The global rank whose lines are shown (without their prefix), or C(all).
    type: str
    default: "0"
  attempt:
    description: Only this attempt's part (0 for every attempt).
    type: int
    default: 0
  lines:
    description: With I(offset) -1, the last this many lines.
    type: int
    default: 100
  offset:
    description:
      - Where to read on from (a byte offset that a previous call returned); -1 for the last
        I(lines).
    type: int
    default: -1
  wait:
    description: With I(offset) set, the longest wait for new lines, in seconds.
    type: float
    default: 0
extends_documentation_fragment:
  - torch_cluster.cluster.node_base_dir
"""

RETURN = r"""
lines:
  description: The lines read.
  type: list
  returned: always
offset:
  description: Where the next read starts (after the last whole line read).
  type: int
  returned: always
running:
  description: Whether the job's unit still runs on this node.
  type: bool
  returned: always
"""


def unit_running(job_id: str) -> bool:
    argv = ["systemctl", "show", f"torch-job-{job_id}", "--property=ActiveState,SubState"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=8, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    states = dict(line.partition("=")[::2] for line in done.stdout.splitlines())
    return unit_runs(f"{states.get('ActiveState', '')}/{states.get('SubState', '')}")


# The most of a log's end read for its last lines (a log can grow to gigabytes).
TAIL_LIMIT = 8 * 1024 * 1024


def read_from(path: str, offset: int) -> tuple[str, int]:
    """The whole lines written from offset on (-1: from about TAIL_LIMIT before the end, on
    a line's start), and the offset after them."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        start = max(0, size - TAIL_LIMIT) if offset < 0 else 0 if size < offset else offset
        handle.seek(start)
        data = handle.read()
    if offset < 0 and start > 0:
        cut = data.find(b"\n") + 1
        data, start = data[cut:], start + cut
    whole = data[: data.rfind(b"\n") + 1]
    return whole.decode(errors="replace"), start + len(whole)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "default": "/var/lib/torch-cluster"},
            "job_id": {"type": "str", "required": True},
            "rank": {"type": "str", "default": "0"},
            "attempt": {"type": "int", "default": 0},
            "lines": {"type": "int", "default": 100},
            "offset": {"type": "int", "default": -1},
            "wait": {"type": "float", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["rank"] != "all" and not p["rank"].isdigit():
        module.fail_json(msg=f"rank must be a global rank (0, 1, ...) or all (got {p['rank']!r})")
    path = os.path.join(p["base_dir"], "jobs", p["job_id"], "node.log")
    if not os.path.exists(path):
        module.fail_json(msg=f"no log of job {p['job_id']} on this node ({path})")
    if p["offset"] < 0:
        text, offset = read_from(path, -1)
        shown = log_lines(text, p["rank"], p["attempt"])[-p["lines"] :] if p["lines"] > 0 else []
    else:
        deadline = time.monotonic() + p["wait"]
        while True:
            # New lines belong to the newest attempt: no attempt to pick among.
            text, offset = read_from(path, p["offset"])
            shown = log_lines(text, p["rank"])
            if shown or time.monotonic() >= deadline or not unit_running(p["job_id"]):
                break
            time.sleep(0.5)
    module.exit_json(changed=False, lines=shown, offset=offset, running=unit_running(p["job_id"]))


if __name__ == "__main__":
    main()
