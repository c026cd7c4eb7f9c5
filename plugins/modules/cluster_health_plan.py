#!/usr/bin/python
"""Ansible module: check the health check's inputs and plan its run, on the controller."""

from __future__ import annotations

import datetime
import random

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.collectives import (
    round_robin,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.inputs import (
    check_input_problems,
)

DOCUMENTATION = r"""
module: cluster_health_plan
short_description: Check the health check's inputs and plan its pair rounds
description:
  - Fails, naming each bad input with its rule, before anything runs on a node.
  - Returns the run's id, a high port for the reachability test, and the rounds of disjoint
    node pairs for the collectives (as node ranks, "0-1,2-3;0-2,1-3;...").
options:
  nodes:
    description: The nodes, in rank order.
    type: list
    elements: str
    required: true
  inputs:
    description:
      - The check's inputs, by their variable names (check_fraction_of_baseline,
        check_fraction_of_median, check_message_sizes, check_min_free_gib,
        check_shared_write_mib, check_min_memlock, check_min_nofile).
    type: dict
    required: true
"""

RETURN = r"""
check_id:
  description: The run's id (check-<UTC time>).
  type: str
  returned: success
probe_port:
  description: A port from 40000 to 59999 for the reachability test.
  type: int
  returned: success
rounds:
  description: The pair rounds, as the collectives script takes them.
  type: str
  returned: success
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "list", "elements": "str", "required": True},
            "inputs": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    problems = check_input_problems(module.params["inputs"])
    if problems:
        module.fail_json(msg="; ".join(problems) + ".", problems=problems)
    names = module.params["nodes"]
    index = {name: i for i, name in enumerate(names)}
    rounds = ";".join(
        ",".join(f"{index[a]}-{index[b]}" for a, b in pairs) for pairs in round_robin(names)
    )
    now = datetime.datetime.now(datetime.timezone.utc)
    module.exit_json(
        changed=False,
        check_id=now.strftime("check-%Y%m%d-%H%M%S"),
        probe_port=random.randint(40000, 59999),
        rounds=rounds,
    )


if __name__ == "__main__":
    main()
