"""What the user reads about a job: each attempt in one line, the nodes it lost and what took their
places, and the message of a job that succeeded, restarts, or ended otherwise. Standard library
only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempts import Attempt
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.failures import (
    RankFailure,
    failure_report,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.watch import (
    JOB_FAILED,
    JOB_STALLED,
    JOB_STOPPED,
    JOB_SUCCEEDED,
    JOB_TIMED_OUT,
    JOB_UNWATCHABLE,
)


def stall_report(stall: Mapping[str, Any]) -> list[str]:
    """The lines of the message on a stalled attempt: how long rank 0 was quiet, where the
    ranks were, and where their stacks are."""
    lines = [
        f"Rank 0 printed nothing for {stall.get('quiet_for', 0):.0f} s "
        f"(train_stall_timeout={stall.get('timeout', 0)}) while every node's unit ran."
    ]
    if stall.get("summary"):
        lines.append(f"Where the ranks were: {stall['summary']}")
    if stall.get("folder"):
        lines.append(
            f"Every rank's Python stacks (py-spy) and NCCL's flight recorder: {stall['folder']}/"
        )
    return lines


def describe_attempt(attempt: Attempt) -> str:
    """One line: how an attempt ended, the first failure first."""
    if attempt.outcome == JOB_SUCCEEDED:
        return f"attempt {attempt.number}: succeeded after {attempt.seconds:.0f} s"
    if attempt.outcome == JOB_UNWATCHABLE:
        return f"attempt {attempt.number}: the master could not be watched: {attempt.error}"
    if attempt.outcome == JOB_STALLED:
        where = attempt.stall.get("summary") or "no stacks could be collected"
        return f"attempt {attempt.number}: stalled after {attempt.seconds:.0f} s: {where}"
    first = attempt.first_failure
    if first:
        others = len(attempt.failures) - 1
        what = first.describe() + (f" (first of {others + 1} failures)" if others else "")
    else:
        what = attempt.error or attempt.outcome
    return f"attempt {attempt.number}: {attempt.outcome} after {attempt.seconds:.0f} s: {what}"


def node_changes(attempt: Attempt) -> list[str]:
    """Sentences on the nodes an attempt lost and what takes their places."""
    lines = [
        f"{name} left the job ({why})"
        + (
            f"; the spare {attempt.replaced[name]} takes its place"
            if name in attempt.replaced
            else ""
        )
        for name, why in attempt.left.items()
    ]
    if attempt.left and attempt.next_nodes:
        master = attempt.next_nodes[0]
        changed = " (a new master)" if attempt.nodes_used[:1] != [master] else ""
        lines.append(
            f"The next attempt runs on {', '.join(attempt.next_nodes)} "
            f"({len(attempt.next_nodes)} of {len(attempt.nodes_used)} node(s), master "
            f"{master}{changed}); {', '.join(attempt.left)} will not be used again in this job"
        )
    return lines


def success_message(job_id: str, attempts: Sequence[Attempt]) -> str:
    """A job that succeeded; after restarts, the last attempt's nodes and where it resumed."""
    if len(attempts) == 1:
        return f"Job {job_id} succeeded."
    last = attempts[-1]
    where = f" on {', '.join(last.nodes_used)}" if last.nodes_used else ""
    resumed = f", resumed from {last.resumed_from}" if last.resumed_from else ""
    return (
        f"Job {job_id} succeeded after {len(attempts) - 1} restart(s): attempt {last.number} "
        f"ran{where}{resumed}."
    )


def restart_message(job_id: str, attempt: Attempt, max_restarts: int) -> str:
    if attempt.left:
        changes = ". ".join(node_changes(attempt))
        return (
            f"Job {job_id}: {describe_attempt(attempt)}. {changes}. Restarting the job from the "
            f"newest checkpoint copy (restart {attempt.number} of {max_restarts})."
        )
    return (
        f"Job {job_id}: {describe_attempt(attempt)}. Every node answers and is clean: restarting "
        f"the whole job from its checkpoint (restart {attempt.number} of {max_restarts})."
    )


def unreachable_line(name: str, stop_hint: str, *, fenced: bool) -> str:
    """What happens to the processes of a node that stopped answering."""
    if fenced:
        return (
            f"{name} stopped answering: its processes could not be stopped from here; its fence "
            "kills them once nobody has watched them for train_fence_timeout. Once it answers "
            f"again, {stop_hint} checks that nothing of the job is left there."
        )
    return (
        f"{name} stopped answering: its processes could not be stopped. They end at the "
        f"trainer's collective timeout; to stop them at once, run {stop_hint} when {name} "
        "answers again."
    )


def final_message(
    job_id: str,
    attempts: Sequence[Attempt],
    *,
    run_dir: str,
    timeout: int,
    max_restarts: int,
    stop_hint: str,
) -> str:
    """What the user reads when a job did not succeed: how it ended, each attempt, why it
    was not restarted, the first failure with its traceback and what followed it, and where
    everything is."""
    last = attempts[-1]
    how = {
        JOB_STOPPED: "was stopped by playbooks/stop.yml",
        JOB_TIMED_OUT: f"timed out after {timeout} s",
        JOB_UNWATCHABLE: "could not be watched",
        JOB_STALLED: "stalled",
    }.get(last.outcome, "failed")
    answering = " that answers" if last.unreachable_nodes else ""
    lines = [f"Job {job_id} {how}; it is stopped on every node{answering}."]
    if len(attempts) > 1:
        lines.append(f"It was restarted {len(attempts) - 1} time(s); each attempt:")
        lines += [f"  {describe_attempt(a)}" for a in attempts]
    ended = last.outcome in (JOB_FAILED, JOB_STALLED) or (
        last.outcome == JOB_UNWATCHABLE and bool(last.left)  # a lost master
    )
    if ended and (max_restarts > 0 or last.left):
        again = " again" if len(attempts) > 1 else ""
        lines.append(f"Not restarted{again}: {last.not_restarted_because}.")
    if last.outcome == JOB_UNWATCHABLE:
        lines.append(f"The master could not be watched: {last.error}")
    if last.outcome == JOB_STALLED:
        lines += stall_report(last.stall)
    if last.outcome == JOB_FAILED:
        failures = [RankFailure(**failure) for failure in last.failures]
        lines += failure_report(failures, last.tails)
    for name in last.unreachable_nodes:
        lines.append(unreachable_line(name, stop_hint, fenced=last.fence_until > 0))
    lines += last.teardown_problems
    lines.append(f"Logs: {run_dir}/ (attempts.json, failure.json)")
    return "\n".join(lines)
