#!/usr/bin/python
"""Documentation of the torch_job_source action plugin (it runs on the controller only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: torch_job_source
short_description: Check a torchrun job's inputs, code and data on the controller
description:
  - An action plugin (plugins/action/torch_job_source.py) that runs on the controller and sends
    nothing to a node. Run it once per job (C(run_once)).
  - Fails naming each wrong input with its rule, a missing script or a missing data folder.
  - Returns the digests that the torch_job_preflight module compares with each node's copies.
options:
  code_dir:
    description: The training code on the controller.
    type: path
    required: true
  script:
    description: The script in I(code_dir) that torchrun starts.
    type: str
    required: true
  data_src:
    description: Folder on the controller staged into every node's data folder; empty for none.
    type: str
    default: ""
  inputs:
    description: The job's inputs to check (job_id, nproc, train_timeout, train_max_restarts, ...).
    type: dict
    default: {}
  flight_recorder_dir:
    description: The folder on the nodes that NCCL's flight recorder dumps into; empty for none.
    type: str
    default: ""
"""

RETURN = r"""
code_digest:
  description: sha256 over the code's paths and contents (__pycache__ left out).
  type: str
  returned: success
code_bytes:
  description: The code's size in bytes (__pycache__ left out), which decides whether it spreads.
  type: int
  returned: success
data_names:
  description: The entries of I(data_src).
  type: list
  returned: success
data_digest:
  description: sha256 over the data's paths, sizes and modification times.
  type: str
  returned: success
flight_recorder_env:
  description: What turns NCCL's flight recorder on (torch_job_stall.flight_recorder_env).
  type: dict
  returned: success
"""
