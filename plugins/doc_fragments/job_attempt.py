"""Documentation fragment: the options that name an attempt of a job in its attempts file
(torch_job_started writes the attempt there, torch_job_record its outcome). Their argument spec is
job/attempts.py's attempt_argument_spec."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  path:
    description: The attempts file (the job's C(attempts.json) in its runs folder); attempt 1
      starts it anew.
    type: path
    required: true
  job_id:
    description: The job's id.
    type: str
    required: true
  attempt:
    description: This attempt's number, from 1.
    type: int
    required: true
  nodes:
    description: This attempt's nodes, in rank order (the first is the master).
    type: list
    elements: str
    required: true
  max_restarts:
    description: How many times the job may start again after a failure.
    type: int
    default: 0
"""
