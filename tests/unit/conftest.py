"""The launcher's logic (plugins/module_utils), imported as the modules import it."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

# The modules import ansible.module_utils.NAME; here the same files are plain modules, and
# those that import each other find one another under Ansible's names too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))
for name in (
    "check_floors",
    "torch_job",
    "cluster_net",
    "shared_storage",
    "cluster_health",
    "torch_builds",
    "slurm_job",
    "job_sync",
    "dnf_repos",
    "job_view",
    "job_list",
    "gpu_faults",
    "gpu_health",
    "net_path",
    "cluster_fabric",
):
    sys.modules[f"ansible.module_utils.{name}"] = importlib.import_module(name)
