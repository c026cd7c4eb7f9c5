#!/usr/bin/python
"""Documentation of the torch_build action plugin (it runs on the controller only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: torch_build
short_description: Check that a torch release has the chosen CUDA build
description:
  - An action plugin (plugins/action/torch_build.py) that runs on the controller and sends nothing
    to a node.
  - Fails, naming the builds the release ships, when I(variant) is not one of them (cu128 with
    torch 2.12 and later, for example), or is not a variant at all. Releases newer than its table
    pass (PyTorch's index decides).
options:
  torch_version:
    description: The pinned torch version.
    type: str
    required: true
  variant:
    description: The CUDA build (cu130, cu126, ... or cpu).
    type: str
    required: true
"""

RETURN = r"""
cuda_version:
  description: The CUDA version of the build (13.0 for cu130), empty for cpu.
  type: str
  returned: success
torch_nccl:
  description: The NCCL version the build bundles, where PyTorch's table records it.
  type: str
  returned: success
variants:
  description: The builds the release ships, where known.
  type: list
  returned: success
"""
