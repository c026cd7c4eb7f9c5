"""The launcher's inputs, checked on the controller before anything starts: one sentence per bad
input, naming only what is wrong. Standard library only: it runs on the nodes' system Python
(3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


# How a job is started (job/slurm.py for slurm), and what may be exported.
LAUNCHERS = ("systemd", "slurm")


EXPORTS = ("", "sbatch")


NPROC = re.compile(r"^(auto|[1-9][0-9]*)$")


def input_problems(inputs: Mapping[str, Any]) -> list[str]:
    """One sentence per bad job input, naming only what is wrong."""
    problems = []
    job_id = str(inputs.get("job_id", ""))
    if job_id and not JOB_ID.match(job_id):
        problems.append(
            f"job_id must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or "
            f"digit (got {job_id!r})"
        )
    nproc = str(inputs.get("nproc", "auto"))
    if not NPROC.match(nproc):
        problems.append(f"nproc must be a positive integer or auto (got {nproc!r})")
    numbers = (
        "train_timeout",
        "train_max_restarts",
        "train_startup_timeout",
        "train_min_nodes",
        "train_stall_timeout",
        "train_output_copy_interval",
        "train_code_spread_mb",
    )
    for name in numbers:
        if name not in inputs:
            continue
        value = str(inputs[name])
        if not value.isdigit():
            problems.append(f"{name} must be a whole number, 0 or more (got {value!r})")
    problems += watch_problems(inputs)
    user, trusted = inputs.get("train_user"), str(inputs.get("ssh_trust_user", ""))
    if trusted and user != trusted:
        problems.append(
            f"train_user ({user}) must be ssh_trust_user ({trusted}): the master watches the other "
            "nodes over SSH as that user. Set only ssh_trust_user; train_user follows it"
        )
    problems += confinement_problems(inputs)
    nodes = list(inputs.get("nodes", []))
    outside = [host for host in inputs.get("hosts", []) if host not in nodes]
    if outside:
        problems.append(f"{', '.join(outside)} not in train_nodes ({', '.join(nodes)})")
    for pattern in inputs.get("train_result_files", []):
        if os.path.isabs(pattern) or ".." in pattern.replace("\\", "/").split("/"):
            problems.append(
                f"train_result_files must be relative to the output folder and stay in it "
                f"(got {pattern!r})"
            )
    problems += launch_problems(inputs) + output_problems(inputs) + node_loss_problems(inputs)
    regex = str(inputs.get("train_progress_regex", ""))
    if regex:
        try:
            re.compile(regex)
        except re.error as err:
            problems.append(f"train_progress_regex is not a regular expression ({err}): {regex!r}")
    return problems


def one_or_more(inputs: Mapping[str, Any], name: str, unit: str = "", why: str = "") -> list[str]:
    """The input `name` (1 where unset) unless it is a whole number, 1 or more: the sentence,
    with what it counts (`unit`) and what it is for (`why`) where given."""
    value = str(inputs.get(name, "1"))
    if value.isdigit() and int(value) >= 1:
        return []
    counts = f" of {unit}" if unit else ""
    return [f"{name} must be a whole number{counts}, 1 or more (got {value!r}){why}"]


def watch_problems(inputs: Mapping[str, Any]) -> list[str]:
    """The watch's own inputs: how often it shows progress, how many lines it follows."""
    return [
        *one_or_more(inputs, "train_watch_interval", "seconds"),
        *one_or_more(inputs, "train_follow_max_lines", "lines"),
        *liveness_problems(inputs),
    ]


# The shortest train_lost_after: an SSH hiccup of 2 s on a loaded node is no loss.
LOST_AFTER_MIN = 3
# A fence must wait out the loss and one of the controller's rounds on the master (2 s) more,
# or it would stop a node that the watch still counts in.
FENCE_OVER_LOST = 3


def liveness_problems(inputs: Mapping[str, Any]) -> list[str]:
    """train_lost_after, train_fence_timeout and train_gpu_release_timeout, and how the first
    two go together."""
    problems = []
    lost = str(inputs.get("train_lost_after", LOST_AFTER_MIN))
    if not lost.isdigit() or int(lost) < LOST_AFTER_MIN:
        problems.append(
            f"train_lost_after must be a whole number of seconds, {LOST_AFTER_MIN} or more (got "
            f"{lost!r}): below that, an SSH hiccup of a loaded node would count as a lost node"
        )
    fence = str(inputs.get("train_fence_timeout", 0))
    if not fence.isdigit():
        problems.append(f"train_fence_timeout must be a whole number of seconds (got {fence!r})")
    elif lost.isdigit() and 0 < int(fence) < int(lost) + FENCE_OVER_LOST:
        problems.append(
            f"train_fence_timeout={fence} is too short for train_lost_after={lost}: a node would "
            f"stop its job while the watch still counts it in. Use 0 (no fence) or "
            f"{int(lost) + FENCE_OVER_LOST} or more"
        )
    release = str(inputs.get("train_gpu_release_timeout", 0))
    if not release.isdigit():
        problems.append(
            f"train_gpu_release_timeout must be a whole number of seconds (got {release!r})"
        )
    return problems


def confinement_problems(inputs: Mapping[str, Any]) -> list[str]:
    """root as the training user (unless allowed), and the paths a confined job may write to."""
    problems = []
    if inputs.get("train_user") == "root" and not inputs.get("allow_root", False):
        problems.append(
            "train_user is root: every job would run as root on every node, so one script, or "
            "one node taken over, would own the whole cluster. Use the unprivileged training user "
            "(ssh_trust_user, default torch, created by provision.yml), or set "
            "cluster_allow_root: true to accept that risk"
        )
    for path in inputs.get("train_writable_paths", []):
        if not os.path.isabs(str(path)):
            problems.append(f"train_writable_paths must hold absolute paths (got {path!r})")
    return problems


def output_problems(inputs: Mapping[str, Any]) -> list[str]:
    """Where the job's output folder is, and how many copies of it are kept."""
    problems = one_or_more(
        inputs,
        "train_output_copies",
        why=": without a shared folder, the master's output folder is copied to that many other "
        "nodes",
    )
    shared = str(inputs.get("train_shared_dir", "auto"))
    if shared not in ("auto", "") and not shared.startswith("/"):
        problems.append(
            f"train_shared_dir must be auto, empty, or an absolute path (got {shared!r})"
        )
    return problems


def node_loss_problems(inputs: Mapping[str, Any]) -> list[str]:
    """train_min_nodes and train_spare_group against the training group."""
    problems = []
    nodes = list(inputs.get("nodes", []))
    group = str(inputs.get("train_spare_group", ""))
    spare_hosts = inputs.get("spare_hosts")
    spares = [name for name in nodes if name in (spare_hosts or [])]
    if group and spare_hosts is None:
        problems.append(f"train_spare_group names {group!r}, which is not a group of the inventory")
    elif group:
        outside = [name for name in spare_hosts or [] if name not in nodes]
        if outside:
            problems.append(
                f"the spares {', '.join(outside)} of train_spare_group {group!r} are not in the "
                f"training group ({', '.join(nodes)}): a spare must be in it too, so that "
                "playbooks/provision.yml provisions it and every node trusts it"
            )
        if nodes and len(spares) == len(nodes):
            problems.append(
                f"every node of the training group is a spare (train_spare_group {group!r}): "
                "the job would start on none"
            )
    minimum = str(inputs.get("train_min_nodes", "0"))
    size = len(nodes) - len(spares)
    if minimum.isdigit() and int(minimum) > size:
        problems.append(
            f"train_min_nodes ({minimum}) is more than the {size} node(s) the job starts on"
        )
    return problems + one_or_more(inputs, "train_limit_nofile")


def launch_problems(inputs: Mapping[str, Any]) -> list[str]:
    """The launcher's name and the export's, checked."""
    problems = []
    launcher = str(inputs.get("train_launcher", "systemd"))
    if launcher not in LAUNCHERS:
        problems.append(
            f"train_launcher must be one of {', '.join(LAUNCHERS)} (got {launcher!r}): systemd "
            "starts torchrun on every node itself, slurm submits the job to the Slurm cluster "
            "that playbooks/slurm.yml sets up"
        )
    export = str(inputs.get("train_export", ""))
    if export not in EXPORTS:
        problems.append(
            f"train_export must be empty or sbatch (got {export!r}): sbatch writes the job's "
            "batch script to runs/<job_id>/job.sbatch and runs nothing"
        )
    return problems + gpu_request_problems(inputs, launcher == "slurm" or bool(export))


def gpu_request_problems(inputs: Mapping[str, Any], through_slurm: bool) -> list[str]:
    """train_gpus (-e gpus=N) and train_exclusive: numbers and words that mean something, GPUs
    asked of Slurm only, and an nproc that agrees with them."""
    problems = []
    gpus = str(inputs.get("train_gpus", "0"))
    exclusive = str(inputs.get("train_exclusive", "auto")).lower()
    if exclusive not in ("auto", "true", "false", "yes", "no"):
        problems.append(f"train_exclusive must be auto, true or false (got {exclusive!r})")
    if not gpus.isdigit():
        return [*problems, f"gpus (train_gpus) must be a whole number, 0 or more (got {gpus!r})"]
    if int(gpus) == 0:
        return problems
    if not through_slurm:
        problems.append(
            f"gpus={gpus} asks Slurm for GPUs: add -e train_launcher=slurm (playbooks/slurm.yml "
            "first). Without Slurm a job takes whole nodes; nproc sets its processes per node"
        )
    nproc = str(inputs.get("train_nproc", "auto"))
    if nproc not in ("auto", gpus):
        problems.append(
            f"nproc={nproc} and gpus={gpus} disagree: with gpus, each node runs one process per "
            "GPU Slurm gives it; leave nproc out"
        )
    return problems
