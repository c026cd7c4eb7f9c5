"""Whether a job starts again after an attempt: the first rule that says no, in order (success,
stop.yml, the time limit, no restarts left, lost nodes, unclean nodes, a failure at start-up),
and the time left of the job's limit. Standard library only: it runs on the nodes' system Python
(3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempts import Attempt
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.watch import (
    JOB_STOPPED,
    JOB_SUCCEEDED,
    JOB_TIMED_OUT,
    JOB_UNWATCHABLE,
)


def time_left(timeout: int, started_at: float, now: float) -> int:
    """Whole seconds left of the job's time limit (train_timeout, counted from the first
    attempt's start), for the next attempt's units; -1 when the job has no limit."""
    if timeout <= 0:
        return -1
    return max(0, int(timeout - (now - started_at)))


def training_started(
    progress_seen: bool, output_written: bool, seconds: float, startup_timeout: float
) -> bool:
    """Whether an attempt got past its start-up, judged by what every script has: rank 0
    printed a progress line (train_progress_prefixes, train_progress_regex), or the job wrote a
    file in its output folder since the attempt began (a checkpoint, a snapshot), or it ran for
    train_startup_timeout seconds. A failure before that (a bad argument, a missing file, an
    import error) would fail a restart the same way."""
    return progress_seen or output_written or seconds >= startup_timeout


def decide_restart(
    attempt: Attempt,
    max_restarts: int,
    startup_timeout: int,
    seconds_left: int = -1,
    lost_why_not: str | None = None,
) -> str | None:
    """None when the job should start again, else why not: the first rule that holds.

    `lost_why_not`: for an attempt that lost nodes (attempt.left), why the job cannot go on
    without them ("" when it can, lost_nodes.plan_nodes); None: it cannot, for the default
    reason."""
    lost = bool(attempt.left or attempt.unreachable_nodes)
    if lost_why_not is None:
        lost_why_not = (
            f"{', '.join(attempt.left or attempt.unreachable_nodes)} stopped answering: the job "
            "does not restart on fewer nodes"
        )
    master_lost = attempt.outcome == JOB_UNWATCHABLE and bool(attempt.unreachable_nodes)
    rules = (
        (attempt.outcome == JOB_SUCCEEDED, "it succeeded"),
        (attempt.outcome == JOB_STOPPED, "it was stopped by playbooks/stop.yml"),
        (attempt.outcome == JOB_TIMED_OUT, "its time limit (train_timeout) ran out"),
        (
            attempt.outcome == JOB_UNWATCHABLE and not master_lost,
            "the master could not be watched",
        ),
        (max_restarts == 0, "train_max_restarts is 0"),
        (lost and bool(lost_why_not), lost_why_not),
        (
            bool(attempt.teardown_problems),
            "the nodes are not clean after the stop: " + "; ".join(attempt.teardown_problems),
        ),
        (
            not attempt.training_started and not lost,
            "it failed at start-up (before rank 0 printed a progress line or the job wrote a "
            f"file in its output folder, within train_startup_timeout={startup_timeout} s): a "
            "restart would fail the same way",
        ),
        (
            attempt.number > max_restarts,
            f"it has restarted {max_restarts} time(s) already (train_max_restarts={max_restarts})",
        ),
        (seconds_left == 0, "no time is left of its time limit (train_timeout)"),
    )
    return next((why for holds, why in rules if holds), None)
