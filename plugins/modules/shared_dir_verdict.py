#!/usr/bin/python
"""Documentation of the shared_dir_verdict action plugin (nothing of it runs as a module)."""

DOCUMENTATION = r"""
module: shared_dir_verdict
short_description: Judge the proof that a folder is shared by every node
description:
  - Runs on the controller (an action plugin), from what every node reported in the
    shared_dir_proof module's write and read steps.
  - Names each node that could not write to the folder, could not read it, or saw other files
    there than the rest (a missing mount, with a local folder in its place). The largest group
    of nodes that see the same files is the shared folder; on a tie, the one whose nodes have
    the folder on a mount of its own, then the master's.
options:
  path:
    description: The folder.
    type: str
    required: true
  nodes:
    description: Every node's name, in rank order.
    type: list
    elements: str
    required: true
  writes:
    description: Each node's result of the write step, by name.
    type: dict
    required: true
  reads:
    description: Each node's result of the read step, by name.
    type: dict
    required: true
"""

RETURN = r"""
problems:
  description: "[{node, problem}] for each node that failed the proof, in the nodes' order."
  type: list
  returned: always
"""
