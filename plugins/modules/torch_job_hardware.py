#!/usr/bin/python
"""Ansible module: look for GPU hardware faults on a node where a job failed."""

from __future__ import annotations

import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.node_paths import (
    driver_gpus,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.gpu_faults import (
    SMI_QUERY,
    hardware_faults,
    parse_xids,
)

DOCUMENTATION = r"""
module: torch_job_hardware
short_description: Look for GPU hardware faults on a node where a torchrun job failed
description:
  - Compares the node's GPUs (the driver's count in I(gpu_dir)) with their count when the job
    started, asks C(nvidia-smi) for every GPU and its uncorrectable volatile ECC errors, and
    reads the kernel log since the attempt started (C(journalctl -k)) for XIDs other than the
    application's (13, 31, 43, 45).
  - A node without C(nvidia-smi) and without GPUs has no GPU faults. Read-only.
options:
  gpus_at_start:
    description: The node's GPU count when the job started (the launcher's node check).
    type: int
    required: true
  since:
    description: When the attempt started, in seconds since the epoch.
    type: float
    required: true
  gpu_dir:
    description: The driver's folder with one entry per GPU.
    type: path
    default: /proc/driver/nvidia/gpus
"""

RETURN = r"""
faults:
  description: One sentence per hardware fault found; empty when none.
  type: list
  returned: always
kernel_log:
  description: Why the kernel log could not be read, or "".
  type: str
  returned: always
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gpus_at_start": {"type": "int", "required": True},
            "since": {"type": "float", "required": True},
            "gpu_dir": {"type": "path", "default": "/proc/driver/nvidia/gpus"},
        },
        supports_check_mode=True,
    )
    p = module.params
    gpus_now = driver_gpus(p["gpu_dir"])
    smi_path = shutil.which("nvidia-smi")
    smi = None
    if smi_path:
        smi = module.run_command(
            [smi_path, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
        )
    kernel_log, why = "", ""
    journalctl = shutil.which("journalctl")
    if journalctl and (smi_path or p["gpus_at_start"]):
        status, kernel_log, err = module.run_command(
            [journalctl, "-k", "--no-pager", "-q", "-o", "cat", f"--since=@{int(p['since'])}"]
        )
        if status != 0:
            why, kernel_log = " ".join(err.split())[:200] or f"exit status {status}", ""
    faults = hardware_faults(p["gpus_at_start"], gpus_now, smi, parse_xids(kernel_log))
    module.exit_json(changed=False, faults=faults, kernel_log=why)


if __name__ == "__main__":
    main()
