"""Documentation fragment: where a node's modules find what the roles and the NVIDIA driver left
there (cluster_health_probe, torch_job_preflight). Their argument spec is common/node_paths.py's
node_paths_argument_spec."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  environment_fact:
    description: The pytorch role's local fact (JSON), which names the training environment (its
      Python and torchrun).
    type: path
    default: /etc/ansible/facts.d/pytorch.fact
  gpu_dir:
    description: Where the NVIDIA driver lists the node's GPUs, one folder each.
    type: path
    default: /proc/driver/nvidia/gpus
  shared_fact:
    description: The shared_storage role's local fact (JSON), which names its mount.
    type: path
    default: /etc/ansible/facts.d/shared_storage.fact
"""
