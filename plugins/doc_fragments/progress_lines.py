"""Documentation fragment: which of rank 0's lines count as progress (torch_job_list,
torch_job_watch). Their argument spec is job/logs.py's progress_argument_spec."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  progress_prefixes:
    description: Rank 0's lines that start with one of these count as progress
      (train_progress_prefixes).
    type: list
    elements: str
    default: []
  progress_regex:
    description: Rank 0's lines that match this regular expression count as progress too
      (train_progress_regex).
    type: str
    default: ""
"""
