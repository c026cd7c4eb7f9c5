#!/usr/bin/python
"""Ansible module: prove passwordless SSH from this node to each of its peers, all at once."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.torch_job import ssh_argv

DOCUMENTATION = r"""
module: cluster_ssh_reach
short_description: Prove passwordless SSH from this node to every peer, in parallel
description:
  - Runs C(ssh ADDRESS true) to every peer at once, as the user the module runs as (use
    C(become_user)), with the options of plugins/module_utils/torch_job.py (BatchMode, strict
    host key checking), so that no password, prompt or unknown host key gets in the way.
  - Fails naming each peer that could not be reached and why. A cluster of N nodes needs one
    task per node, not N - 1.
options:
  peers:
    description: The peers to reach, name to address.
    type: dict
    required: true
"""

RETURN = r"""
reached:
  description: The peers reached.
  type: list
  returned: always
failures:
  description: One line per peer that could not be reached.
  type: list
  returned: always
"""


TIMEOUT_S = 30


def reach(name: str, address: str) -> str:
    """'' when the peer was reached, else why not."""
    try:
        done = subprocess.run(
            ssh_argv(address, ["true"], shared=False),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{name} ({address}): no answer within {TIMEOUT_S} s"
    if done.returncode != 0:
        return f"{name} ({address}): " + (
            " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        )
    return ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={"peers": {"type": "dict", "required": True}},
        supports_check_mode=True,
    )
    peers = module.params["peers"]
    if not peers:
        module.exit_json(changed=False, reached=[], failures=[])
    with ThreadPoolExecutor(max_workers=min(32, len(peers))) as pool:
        outcomes = dict(zip(peers, pool.map(lambda name: reach(name, peers[name]), peers)))
    failures = [why for why in outcomes.values() if why]
    reached = [name for name, why in outcomes.items() if not why]
    if failures:
        module.fail_json(
            msg="passwordless SSH failed to " + "; ".join(failures),
            reached=reached,
            failures=failures,
        )
    module.exit_json(changed=False, reached=reached, failures=[])


if __name__ == "__main__":
    main()
