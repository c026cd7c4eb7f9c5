#!/usr/bin/python
"""Ansible module: install the node-local health check that Slurm runs on this node."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common import node_paths
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import (
    read_text,
    replace_text,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.node_paths import (
    GPU_DIR,
    SHARED_FACT,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health import (
    findings,
    gpu_faults,
    limits,
    node_health,
    node_health_run,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage import mounts
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.mounts import (
    resolve_shared_dir,
)

DOCUMENTATION = r"""
module: slurm_health_program
short_description: Install the node health check that Slurm runs (HealthCheckProgram, prolog)
description:
  - Writes the check's Python files (plugins/module_utils/health/node_health_run.py and what it
    imports) under I(lib_dir), its settings to I(config), and two commands for slurm.conf,
    I(program) (HealthCheckProgram) and I(prolog) (Prolog), run by slurmd as root with the
    node's Python.
  - The check drains the node in Slurm with the problem as its reason, which starts with
    C(torch-cluster health), and takes back the nodes it drained once they pass.
  - C(state=absent) removes all of it. Idempotent; works in check mode.
options:
  state:
    description: Whether the check is installed.
    type: str
    choices: [present, absent]
    default: present
  node_name:
    description: This node's name in Slurm (its inventory hostname).
    type: str
    required: true
  gpus:
    description: The GPUs Slurm was told this node has (GRES gpu); fewer is a problem.
    type: int
    default: 0
  gpu_dir:
    description: The driver's folder with one entry per GPU.
    type: path
    default: /proc/driver/nvidia/gpus
  shared_dir:
    description:
      - The jobs' shared folder, which must be mounted. C(auto) is the shared_storage role's
        mount on this node (its local fact), where provision.yml made one; empty is none.
    type: str
    default: auto
  shared_fact:
    description: The shared_storage role's local fact, read by I(shared_dir=auto).
    type: path
    default: /etc/ansible/facts.d/shared_storage.fact
  min_limits:
    description: The least memlock and nofile limits that slurmd must give its jobs (C(memlock),
      C(nofile); empty for no minimum).
    type: dict
    default: {}
  lib_dir:
    description: Where the check's Python files go.
    type: path
    default: /usr/local/lib/torch-cluster
  program:
    description: The command slurm.conf's HealthCheckProgram names.
    type: path
    default: /usr/local/sbin/torch-cluster-health
  prolog:
    description: The command slurm.conf's Prolog names (the check, failing on a problem).
    type: path
    default: /usr/local/sbin/torch-cluster-health-prolog
  config:
    description: The check's settings (JSON).
    type: path
    default: /etc/torch-cluster/health.json
  slurmd_pid_file:
    description: slurmd's PID file; the check reads slurmd's limits (which its jobs inherit)
      from that process, so that a run by hand (C(--once)) judges them too.
    type: path
    default: /run/slurmd.pid
  state_file:
    description: Where the check keeps the hardware XIDs it saw (a node-local folder that a
      reboot empties).
    type: path
    default: /run/torch-cluster/health/state.json
"""

RETURN = r"""
files:
  description: The files written (or that would be).
  type: list
  returned: always
shared_dir:
  description: The shared folder the check looks at ('' for none).
  type: str
  returned: always
"""

# The check and everything it imports, as they lie in the collection.
MODULES = (node_health_run, node_health, gpu_faults, limits, findings, mounts, node_paths)


def _entry(python: str, lib_dir: str, *args: str) -> str:
    call = (
        f"import sys; sys.path.insert(0, {json.dumps(lib_dir)}); "
        f"from {node_health_run.__name__} import main; sys.exit(main(sys.argv[1:]))"
    )
    return (
        "#!/bin/sh\n"
        "# torch-cluster's node health check, run by slurmd (slurm.conf); written by the slurm\n"
        "# role (plugins/modules/slurm_health_program.py). --once prints what it finds.\n"
        "# slurmd may run it without a PATH (the prolog): the system's folders come last.\n"
        'PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
        "export PATH\n"
        f"exec {python} -I -c '{call}' {' '.join(args)} \"$@\"\n"
    )


def wanted_files(params: dict, shared_dir: str, python: str) -> dict[str, tuple[str, int]]:
    """path -> (text, mode) of everything the check needs."""
    files: dict[str, tuple[str, int]] = {}
    for module in MODULES:
        parts = module.__name__.split(".")
        for depth in range(1, len(parts)):
            init = os.path.join(params["lib_dir"], *parts[:depth], "__init__.py")
            files[init] = ("", 0o644)
        files[os.path.join(params["lib_dir"], *parts) + ".py"] = (inspect.getsource(module), 0o644)
    config = {
        "node": params["node_name"],
        "gpus": params["gpus"],
        "gpu_dir": params["gpu_dir"],
        "shared_dir": shared_dir,
        "min_limits": {key: str(value) for key, value in params["min_limits"].items() if value},
        "state_file": params["state_file"],
        "slurmd_pid_file": params["slurmd_pid_file"],
    }
    files[params["config"]] = (json.dumps(config, indent=2, sort_keys=True) + "\n", 0o644)
    files[params["program"]] = (_entry(python, params["lib_dir"]), 0o755)
    files[params["prolog"]] = (_entry(python, params["lib_dir"], "--prolog"), 0o755)
    return files


def _same(path: str, text: str, mode: int) -> bool:
    if not os.path.isfile(path) or os.stat(path).st_mode & 0o777 != mode:
        return False
    return read_text(path) == text


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "node_name": {"type": "str", "required": True},
            "gpus": {"type": "int", "default": 0},
            "gpu_dir": {"type": "path", "default": GPU_DIR},
            "shared_dir": {"type": "str", "default": "auto"},
            "shared_fact": {"type": "path", "default": SHARED_FACT},
            "min_limits": {"type": "dict", "default": {}},
            "lib_dir": {"type": "path", "default": "/usr/local/lib/torch-cluster"},
            "program": {"type": "path", "default": "/usr/local/sbin/torch-cluster-health"},
            "prolog": {"type": "path", "default": "/usr/local/sbin/torch-cluster-health-prolog"},
            "config": {"type": "path", "default": "/etc/torch-cluster/health.json"},
            "state_file": {"type": "path", "default": "/run/torch-cluster/health/state.json"},
            "slurmd_pid_file": {"type": "path", "default": "/run/slurmd.pid"},
        },
        supports_check_mode=True,
    )
    p = module.params
    shared_dir = resolve_shared_dir(p["shared_dir"], p["shared_fact"])
    files = wanted_files(p, shared_dir, sys.executable)
    if p["state"] == "absent":
        gone = [p["config"], p["program"], p["prolog"], p["state_file"]]
        present = [path for path in gone if os.path.lexists(path)]
        tree = os.path.join(p["lib_dir"], "ansible_collections")
        if os.path.isdir(tree):
            present.append(tree)
        if present and not module.check_mode:
            for path in present:
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
        module.exit_json(changed=bool(present), files=present, shared_dir=shared_dir)
    changed = [path for path, (text, mode) in files.items() if not _same(path, text, mode)]
    if changed and not module.check_mode:
        for path in changed:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            text, mode = files[path]
            replace_text(path, text, mode=mode)
    module.exit_json(changed=bool(changed), files=changed, shared_dir=shared_dir)


if __name__ == "__main__":
    main()
