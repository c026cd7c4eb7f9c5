"""Documentation fragment: the launcher's folder on a node, where each job has its folder
(torch_job_list, torch_job_log)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  base_dir:
    description: The launcher's folder on the node (train_node_base_dir).
    type: path
    default: /var/lib/torch-cluster
"""
