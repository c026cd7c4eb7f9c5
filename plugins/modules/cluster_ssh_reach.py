#!/usr/bin/python
"""Ansible module: prove passwordless SSH from this node to each of its peers, all at once."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.peers import (
    unreached_peers,
)

DOCUMENTATION = r"""
module: cluster_ssh_reach
short_description: Prove passwordless SSH from this node to every peer, in parallel
description:
  - Runs C(ssh ADDRESS true) to every peer at once, as the user the module runs as (use
    C(become_user)), with the options of plugins/module_utils/common/ssh.py (BatchMode, strict
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


def main() -> None:
    module = AnsibleModule(
        argument_spec={"peers": {"type": "dict", "required": True}},
        supports_check_mode=True,
    )
    peers = module.params["peers"]
    failures = unreached_peers(peers, shared=False, timeout=30)
    reached = [name for name in peers if not any(why.startswith(f"{name} (") for why in failures)]
    if failures:
        module.fail_json(
            msg="passwordless SSH failed to " + "; ".join(failures),
            reached=reached,
            failures=failures,
        )
    module.exit_json(changed=False, reached=reached, failures=[])


if __name__ == "__main__":
    main()
