"""Where a node's modules find what the roles and the NVIDIA driver left there, and how they read
it: the pytorch role's fact (the training environment), the shared_storage role's fact (its mount)
and the driver's list of GPUs. The options that name them are documented once, in the doc fragment
torch_cluster.cluster.node_paths. Standard library only: it runs on the nodes' system Python (3.9
on EL9).
"""

from __future__ import annotations

import json
import os
from typing import Any

ENVIRONMENT_FACT = "/etc/ansible/facts.d/pytorch.fact"
SHARED_FACT = "/etc/ansible/facts.d/shared_storage.fact"
GPU_DIR = "/proc/driver/nvidia/gpus"


def node_paths_argument_spec() -> dict[str, dict[str, Any]]:
    """The options that name those paths (cluster_health_probe, torch_job_preflight)."""
    return {
        "environment_fact": {"type": "path", "default": ENVIRONMENT_FACT},
        "gpu_dir": {"type": "path", "default": GPU_DIR},
        "shared_fact": {"type": "path", "default": SHARED_FACT},
    }


def driver_gpus(gpu_dir: str = GPU_DIR) -> int:
    """The GPUs the NVIDIA driver lists (one folder each); 0 without the driver."""
    if not os.path.isdir(gpu_dir):
        return 0
    return len([entry for entry in os.scandir(gpu_dir) if entry.is_dir()])


def local_fact(path: str, key: str) -> str:
    """One value of a role's local fact (a JSON object), as text; '' where the fact, or the
    value, is missing or cannot be read."""
    try:
        with open(path) as handle:
            return str(json.load(handle).get(key, ""))
    except (OSError, ValueError, AttributeError):
        return ""
