#!/usr/bin/python
"""Documentation of the torch_job_plan action plugin (it runs on the controller only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: torch_job_plan
short_description: Plan a torchrun job's attempt, its nodes in rank order and where its files go
description:
  - An action plugin (plugins/action/torch_job_plan.py) that runs on the controller and sends
    nothing to a node. Run it once per plan (C(run_once)); its result, registered, is every
    node's.
  - The attempt's nodes are the training group without its spares (the first attempt), or the
    nodes that torch_job_record named for the next one (I(next_nodes)). A node's node_rank is
    its index among them; the first is the master.
  - With the nodes' preflight results (I(checks)), also names the job's nodes whose code or data
    differ from the controller's, whether the code goes from node to node, the world size and
    the GPUs each node offers Slurm.
  - The decisions are plugins/module_utils/job/attempt_plan.py's.
options:
  nodes:
    description: The training group, node name to cluster address, in rank order (train_nodes).
    type: dict
    required: true
  spares:
    description: The hosts of the spare group (train_spare_group); empty for none.
    type: list
    elements: str
    default: []
  attempt:
    description: The attempt's number, from 1.
    type: int
    default: 1
  next_nodes:
    description: The attempt's nodes in rank order, as torch_job_record named them; left out for
      the first attempt.
    type: list
    elements: str
  checks:
    description: Each node's torch_job_preflight result (code_current, data_current, nproc,
      gpus), by name; empty before the nodes are checked.
    type: dict
    default: {}
  hosts:
    description: The play's hosts that still run (ansible_play_hosts).
    type: list
    elements: str
    default: []
  code_bytes:
    description: The size of the code on the controller (torch_job_source's code_bytes).
    type: int
    default: 0
  code_spread_mb:
    description: Code of this size or more goes from node to node (train_code_spread_mb).
    type: int
    default: 32
  resume:
    description: The job continues from its checkpoint (train_resume); every attempt after the
      first does.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Plan the first attempt
  torch_job_plan:
    nodes: {node0: 10.0.0.1, node1: 10.0.0.2, node2: 10.0.0.3}
    spares: [node2]
  run_once: true
  register: __train_plan
"""

RETURN = r"""
attempt:
  description: The attempt's number.
  type: int
  returned: success
names:
  description: The attempt's nodes in rank order; the first is the master.
  type: list
  returned: success
master:
  description: The attempt's master (node_rank 0).
  type: str
  returned: success
master_address:
  description: The master's cluster address (torchrun's --master-addr).
  type: str
  returned: success
ranks:
  description: Each of the attempt's nodes' node_rank, by name.
  type: dict
  returned: success
addresses:
  description: The attempt's nodes' cluster addresses, by name, in rank order.
  type: dict
  returned: success
start_names:
  description: The nodes the job starts on (the training group without the spares).
  type: list
  returned: success
spares:
  description: The spares, in inventory order.
  type: list
  returned: success
code_hosts:
  description: The job's nodes, in rank order, whose code differs from the controller's.
  type: list
  returned: success
code_spreads:
  description: Whether the code goes to the first of I(code_hosts) and from node to node.
  type: bool
  returned: success
data_hosts:
  description: The job's nodes, in rank order, whose data differs from the controller's.
  type: list
  returned: success
world_size:
  description: The ranks over the attempt's nodes (0 before the nodes are checked).
  type: int
  returned: success
gpus_per_node:
  description: The GPUs each of the attempt's nodes has, when they all have as many; else 0.
  type: int
  returned: success
resumes:
  description: Whether the attempt continues from the checkpoint (train_resume_args).
  type: bool
  returned: success
"""
