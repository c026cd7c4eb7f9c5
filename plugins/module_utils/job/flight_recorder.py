"""NCCL's flight recorder on every job: what the launcher sets so that it records and dumps into
the job's folder, where its pipes and dumps are, and why it gave less than one dump per rank.
The settings, as torch 2.14.1 reads them (its headers
torch/include/torch/csrc/distributed/c10d/FlightRecorder.hpp, ProcessGroupNCCL.hpp and
Utils.hpp, and `strings` over torch/lib/libtorch_cpu.so and libtorch_cuda.so):
- TORCH_FR_BUFFER_SIZE: the entries the recorder keeps (default 2000). Its older name,
  TORCH_NCCL_TRACE_BUFFER_SIZE, still works but makes every rank warn that it is deprecated;
  ProcessGroupNCCL reads that older name alone, for its dump pipe, with 2000 as its default.
- TORCH_NCCL_DUMP_ON_TIMEOUT: dump when NCCL's watchdog times a collective out; its monitor
  thread (TORCH_NCCL_ENABLE_MONITORING) does the dumping.
- TORCH_FR_DUMP_TEMP_FILE (older: TORCH_NCCL_DEBUG_INFO_TEMP_FILE): each dump goes to this
  prefix followed by the rank (default ~/.cache/torch/comm_lib_trace_rank_<rank>).
- TORCH_NCCL_DEBUG_INFO_PIPE_FILE: each rank of an NCCL process group makes the named pipe
  <value><rank>.pipe (DumpPipe), and dumps when anything is written to it. gloo makes none.
  Standard library only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.processes import JobProcess
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.stall import ranks_text

# What the dumps and pipes are called in the folder the launcher gives each job.
FLIGHT_RECORDER_STEM = "nccl_trace_rank_"


def flight_recorder_prefix(folder: str) -> str:
    """The prefix of the dump files and of the pipes in folder: <folder>/nccl_trace_rank_."""
    return os.path.join(folder, FLIGHT_RECORDER_STEM)


def flight_recorder_env(folder: str) -> dict[str, str]:
    """What the launcher sets on every job so that NCCL's flight recorder records, dumps into
    folder on a collective's timeout, and dumps on request through a pipe there (the folder
    must exist and be writable by the job's user). TORCH_NCCL_TRACE_BUFFER_SIZE is left at
    ProcessGroupNCCL's default (2000): setting it makes every rank warn that it is deprecated."""
    prefix = flight_recorder_prefix(folder)
    return {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_ENABLE_MONITORING": "1",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": prefix,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": prefix,
    }


def flight_recorder_settings(workers: Sequence[JobProcess], prefix: str = "") -> tuple[str, str]:
    """The pipe prefix and the dump prefix: both `prefix` when given, else what the ranks'
    environment says. torch's default place for dumps (~/.cache/torch/comm_lib_trace_rank_)
    holds every job's of the user, so it is not looked at."""
    if prefix:
        return prefix, prefix
    env = workers[0].env if workers else {}
    pipe = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
    dumps = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "")
    return pipe, dumps


def flight_recorder_reason(
    pipe_prefix: str, asked: Sequence[int], unread: Sequence[int], late: Sequence[int]
) -> str:
    """Why the flight recorder gave less than one dump per rank asked; empty when it did."""
    if not pipe_prefix:
        return (
            "the job was started without TORCH_NCCL_DEBUG_INFO_PIPE_FILE: no dump could be "
            "asked for"
        )
    if not asked and not unread:
        return (
            f"no rank made a pipe {pipe_prefix}<rank>.pipe: the job uses gloo, which has no NCCL "
            "flight recorder (or its NCCL process group was not made yet)"
        )
    reasons = []
    if unread:
        reasons.append(f"nobody reads the pipe of {ranks_text(sorted(unread))} (an earlier run's)")
    if late:
        reasons.append(f"{ranks_text(sorted(late))} wrote no dump in time")
    return "; ".join(reasons)
