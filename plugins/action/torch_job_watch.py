"""Action plugin: watch a torchrun job until it ends, showing its progress on the controller.

Runs the torch_job_watch module on the job's master (the task's host, usually through
delegate_to) round after round. Each round returns when the job ends or after `interval`
seconds; the newest progress line is shown between rounds. The watch is bounded by time
(the job's own time limit plus a grace period), never by a count of rounds: a job
without a time limit is watched as long as it runs.
"""

from __future__ import annotations

import contextlib
import csv
import os
import threading
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.follow import follow_lines
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.gpu_use import (
    GPU_CSV_FIELDS,
    GpuUse,
    gpu_csv_rows,
    gpu_summary,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.restarts import (
    training_started,
)

display = Display()

# After its time limit, a job's units get this long to stop before the watch gives up on them.
TIMEOUT_GRACE_S = 60
# The longest round on the master: the controller hears from the master (and the master's
# heartbeat is touched) at least this often; the status line still comes every `interval`.
ROUND_S = 2.0
# A round the master did not return within its wait plus train_lost_after: the master is lost.
# A failed call (no route, refused) is tried again every RETRY_S until then.
RETRY_S = 0.5
# The longest copy of the master's files while the job runs, in one call (a copy cut short
# goes on in the next call): rounds, and so the heartbeats of every node, never wait longer.
COPY_SLICE_S = 3
# Arguments of the action itself; the rest go to the module.
OWN_ARGS = (
    "job_id", "interval", "timeout", "startup_timeout", "started", "copies", "follow",
    "follow_max_lines", "run_dir", "fence_timeout",
)  # fmt: skip
# Following rank 0's lines: the longest round (the lines reach the controller at least this
# often), the poll of the log and the units within it, and the shortest round.
FOLLOW_WAIT_S, FOLLOW_POLL_S, FOLLOW_MIN_WAIT_S = 2.0, 1.0, 1.0
# What comes before each followed line of rank 0 on the controller.
FOLLOW_PREFIX = "[rank0] "
# What the module's last round returned that the watch's result leaves out.
DROPPED = ("invocation", "changed")
# Slurm job states of a job that waits to run.
QUEUED = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def _unstarted(started_units: dict) -> dict:
    """The watch's result when a node's unit did not start (the job cannot run), or {}."""
    unstarted = {
        name: result.get("msg") or "no answer"
        for name, result in started_units.items()
        if result.get("failed") or result.get("unreachable") or "log_start" not in result
    }
    if not unstarted:
        return {}
    # A node that did not answer is lost (a replacement or fewer nodes may still run the job).
    lost = [name for name in unstarted if started_units[name].get("unreachable")]
    nodes = {
        name: {
            "state": "unreachable" if name in lost else "failed",
            "detail": f"its unit did not start: {why}",
            "ended": 0,
        }
        for name, why in unstarted.items()
    }
    return {
        "job": "failed",
        "nodes": nodes,
        "failed_nodes": list(unstarted),
        "unreachable_nodes": lost,
        "tails": {},
        "training_started": False,
        "started_at": time.time(),
        "seconds": 0.0,
        "progress": "",
        "error": "",
    }


def _unwatchable(master: str, seen: dict) -> dict:
    """The watch's result when the master could not be asked (it stopped answering, or the
    module failed there)."""
    return {
        "heard_ago": {},
        "job": "unwatchable",
        "nodes": {master: {"state": "unreachable", "detail": seen.get("msg", "")}},
        "failed_nodes": [master],
        "unreachable_nodes": [master] if seen.get("unreachable") else [],
        "tails": {},
        "error": seen.get("msg", "the master did not answer"),
    }


def _shown(seen: dict, running: str) -> str:
    """The line shown between rounds: the job's progress, or what it waits for in Slurm."""
    slurm = seen.get("slurm") or {}
    if slurm.get("state", "") not in QUEUED:
        return running
    reason = f" ({slurm['reason']})" if slurm.get("reason") not in ("", "None") else ""
    return f"queued in Slurm: {slurm['state']}{reason}"


class _QueueClock:
    """The time a Slurm job has waited in the queue, round by round."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._last = time.monotonic()

    def tick(self, seen: dict) -> None:
        now = time.monotonic()
        if (seen.get("slurm") or {}).get("state", "") in QUEUED:
            self.seconds += now - self._last
        self._last = now

    @staticmethod
    def quiet(seen: dict) -> float:
        """How long rank 0 has been quiet: nothing while the job waits in the queue (it cannot
        print before Slurm starts it), so that the wait never counts as a stall."""
        if (seen.get("slurm") or {}).get("state", "") in QUEUED:
            return 0.0
        return float(seen.get("quiet_for") or 0)


class _Copier:
    """Without a shared folder: every `interval` seconds while the job runs, the master's
    settled output files go to other nodes (torch_job_sync phase=during), so that losing the
    master loses no more than one interval of checkpoints. A copy runs at most COPY_SLICE_S
    seconds a call; one cut short goes on after the next round. Each copy's figures are kept."""

    KEPT = ("seconds", "bytes", "files", "holders", "problems", "msg", "incomplete")

    def __init__(self, copies: dict) -> None:
        self.args = {key: copies[key] for key in ("folder", "nodes", "copies") if key in copies}
        self.interval = float(copies.get("interval") or 0)
        self.next = time.monotonic() + self.interval
        self.done: list[dict] = []

    def due(self) -> bool:
        return bool(self.interval) and time.monotonic() >= self.next

    def module_args(self) -> dict:
        return {**self.args, "phase": "during", "max_seconds": COPY_SLICE_S}

    def record(self, done: dict) -> None:
        kept = {key: done[key] for key in self.KEPT if key in done}
        self.done.append({"at": round(time.time(), 1), **kept})
        self.next = time.monotonic() + (0 if done.get("incomplete") else self.interval)


def _round_args(own: dict, interval: float) -> dict:
    """The module's arguments for a round: `interval` long, or, following rank 0's lines as
    they come, short rounds that end as soon as there are some."""
    if not own["follow"]:
        return {"wait": min(interval, ROUND_S)}
    return {
        "follow": int(own["follow_max_lines"] or 100),
        "wait": FOLLOW_WAIT_S,
        "poll": FOLLOW_POLL_S,
        "min_wait": FOLLOW_MIN_WAIT_S,
    }


class _Screen:
    """What the controller shows of a round: rank 0's followed lines, and the status line
    with each node's GPU use (every round, or every `every` seconds when following). The GPU
    use also goes to gpu.csv in the job's runs folder, once some node has GPUs."""

    def __init__(self, own: dict, interval: float) -> None:
        run_dir = own["run_dir"] or ""
        self.path = os.path.join(run_dir, "gpu.csv") if run_dir else ""
        self.every, self.gpu_rows, self.gpu = interval, 0, ""
        self.next = time.monotonic() + self.every
        # The module's arguments for each round.
        self.round_args = _round_args(own, interval)

    def lines(self, seen: dict) -> None:
        followed = seen.get("lines") or []
        for line in follow_lines(followed, seen.get("skipped_lines") or 0, FOLLOW_PREFIX):
            display.display(line)
        gpus = {
            name: [GpuUse(**row) for row in rows] for name, rows in (seen.get("gpus") or {}).items()
        }
        self.gpu = gpu_summary(gpus)
        rows = gpu_csv_rows(time.time(), gpus)
        if rows and self.path:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            new = not os.path.exists(self.path)
            with open(self.path, "a", newline="", encoding="utf-8") as out:
                writer = csv.writer(out, lineterminator="\n")
                if new:
                    writer.writerow(GPU_CSV_FIELDS)
                writer.writerows(rows)
            self.gpu_rows += len(rows)

    def status(self, line: str) -> None:
        if time.monotonic() < self.next:
            return
        display.display(f"{line} | {self.gpu}" if self.gpu else line)
        self.next = time.monotonic() + self.every


class _StartUp:
    """What shows that the job got past its start-up, whatever it prints: rank 0's progress
    line, or a file the job wrote in the master's output folder since the start (as of the start
    when the node could read the folder then, torch_job_unit's output_newest, else as of the
    first round)."""

    def __init__(self, output_since: int) -> None:
        self.output_since = output_since
        self.progress_seen = self.output_written = False

    def tick(self, seen: dict) -> None:
        self.progress_seen = self.progress_seen or bool(seen.get("progress"))
        self.output_written = self.output_written or bool(seen.get("output_written"))
        if self.output_since < 0:
            self.output_since = int(seen.get("output_newest", -1))


class _Heard:
    """When the controller last heard from each node (monotonic): the master when a call to it
    returned, the others as the master's last round found them. The master is lost once it has
    been silent for train_lost_after seconds past the length of the call it was given."""

    # A call's own cost on top of its length (the module's start on the master, SSH, become).
    OVERHEAD_S = 1.0

    def __init__(self, master: str, names: list[str], lost_after: float) -> None:
        now = time.monotonic()
        self.master, self.lost_after = master, lost_after
        self.at = {name: now for name in [master, *names]}
        self.expected = 0.0

    def expect(self, length: float) -> None:
        self.expected = length + self.OVERHEAD_S

    def master_deadline(self) -> float:
        return self.at[self.master] + self.expected + self.lost_after

    def master_lost(self) -> bool:
        return time.monotonic() > self.master_deadline()

    def master_answered(self) -> None:
        self.at[self.master] = time.monotonic()

    def round(self, seen: dict) -> None:
        now = time.monotonic()
        for name, ago in (seen.get("heard_ago") or {}).items():
            if name in self.at and name != self.master:
                self.at[name] = now - float(ago)
        self.master_answered()

    def ago(self) -> dict[str, float]:
        now = time.monotonic()
        return {name: round(now - at, 2) for name, at in self.at.items()}

    def epochs(self) -> dict[str, float]:
        offset = time.time() - time.monotonic()
        return {name: round(at + offset, 2) for name, at in self.at.items()}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        own = {name: args.pop(name, None) for name in OWN_ARGS}
        job_id, interval = own["job_id"], float(own["interval"] or 25)
        timeout, startup_timeout = int(own["timeout"] or 0), int(own["startup_timeout"] or 0)
        if self._task.check_mode:
            result.update(skipped=True, msg="check mode: no job was started to watch")
            return result

        # Each node's result of the start (torch_job_unit state=started), by name.
        started_units = own["started"] or {}
        unstarted = _unstarted(started_units)
        if unstarted:
            # A node's unit did not start: the job cannot run. Nothing to watch.
            result.update(unstarted)
            return result

        started, started_at = time.monotonic(), time.time()
        # Rank 0's output of this attempt starts where the master's log ended before it.
        master = args.get("self_name", "")
        offset = int(started_units.get(master, {}).get("log_start", 0))
        progress, latest, quiet = "", "", 0.0
        start_up = _StartUp(int(started_units.get(master, {}).get("output_newest", -1)))
        heard = _Heard(master, list(args.get("nodes") or {}), float(args.get("lost_after") or 6))
        # Without a shared folder, the master's settled files are copied to other nodes
        # while the job runs (torch_job_sync phase=during), so that losing the master
        # loses no more than one interval of checkpoints.
        copier = _Copier(own["copies"] or {})
        # Through Slurm the job may wait in the queue first: that time counts neither
        # towards its time limit nor towards its start-up.
        queue = _QueueClock()
        screen = _Screen(own, interval)
        while True:
            round_args = {
                **args,
                **screen.round_args,
                "offset": offset,
                "quiet_for": quiet,
                "heard_ago": heard.ago(),
                "output_since": start_up.output_since,
                # Once the job has written a file, its folder is not walked again.
                **({"output_dir": ""} if start_up.output_written else {}),
            }
            seen = self._on_master("torch_job_watch", round_args, task_vars, heard)
            if seen.get("failed") or seen.get("unreachable"):
                seen = _unwatchable(master, seen)
                break
            heard.round(seen)
            queue.tick(seen)
            elapsed = time.monotonic() - started - queue.seconds
            offset, quiet = seen["offset"], queue.quiet(seen)
            progress = seen["progress"] or progress
            start_up.tick(seen)
            # Without a progress line yet, rank 0's latest line shows the job is alive.
            latest = seen.get("last_line") or latest
            screen.lines(seen)
            if seen["job"] != "running":
                break
            shown = _shown(seen, progress or latest or "running (no output from rank 0 yet)")
            shown += f" (rank 0 quiet for {quiet:.0f} s)" if quiet >= max(2 * interval, 60) else ""
            screen.status(f"job {job_id} [{_elapsed(elapsed)}] {shown}")
            lost = self._copy(copier, task_vars, heard)
            if lost:
                seen = _unwatchable(master, lost)
                break
            if timeout and elapsed > timeout + TIMEOUT_GRACE_S:
                seen["job"] = "timed out"
                seen["error"] = f"the units still ran {TIMEOUT_GRACE_S} s after the time limit"
                break

        seconds = time.monotonic() - started - queue.seconds
        result.update(
            {key: value for key, value in seen.items() if key not in DROPPED},
            changed=False,
            failed=False,
            started_at=started_at,
            progress=progress,
            seconds=round(seconds, 1),
            queued_seconds=round(queue.seconds, 1),
            # A failure once training has started is worth a restart from the checkpoint; one
            # at start-up is not (job/restarts.py).
            training_started=training_started(
                start_up.progress_seen,
                start_up.output_written,
                seconds,
                startup_timeout,
            ),
            output_written=start_up.output_written,
            error=seen.get("error", ""),
            copies_during=copier.done,
            gpu_rows=screen.gpu_rows,
            # When each node was last heard from (the controller's clock): the next attempt
            # waits for the fences of the lost ones (job/fence.py:fence_until).
            heard=heard.epochs(),
            lost_after=heard.lost_after,
        )
        return result

    def _copy(self, copier: _Copier, task_vars: dict, heard: _Heard) -> dict:
        """A copy of the master's files when one is due; the call's answer when the master was
        lost during it, else {}."""
        if not copier.due():
            return {}
        done = self._on_master("torch_job_sync", copier.module_args(), task_vars, heard)
        if done.get("unreachable"):
            return done
        copier.record(done)
        heard.master_answered()
        return {}

    def _on_master(self, module: str, module_args: dict, task_vars: dict, heard: _Heard) -> dict:
        """A module's answer from the master. A call that fails to connect (no route, refused)
        is made again every RETRY_S; the master is given up on once it has been silent for the
        call's own length (its wait, or a copy's slice) plus train_lost_after: then the answer
        is unreachable. A call given up on is left to its SSH connection's end in its thread."""
        length = float(module_args.get("wait") or module_args.get("max_seconds") or 0)
        heard.expect(length)
        while True:
            answer = self._bounded_call(module, module_args, task_vars, heard.master_deadline())
            if not answer.get("unreachable") or heard.master_lost():
                break
            self._reset_connection()
            time.sleep(RETRY_S)
        if answer.get("unreachable"):
            silent = time.monotonic() - heard.at[heard.master]
            answer["msg"] = f"the master did not answer for {silent:.1f} s: {answer.get('msg', '')}"
        return answer

    def _bounded_call(self, module: str, module_args: dict, task_vars: dict, until: float) -> dict:
        """The module's answer, or an unreachable one when none came by `until` (monotonic)."""
        answer: dict = {}

        def call() -> None:
            try:
                answer.update(
                    self._execute_module(
                        module_name=module, module_args=module_args, task_vars=task_vars
                    )
                )
            except AnsibleConnectionFailure as err:
                answer.update(unreachable=True, msg=str(err))
            except Exception as err:
                answer.update(failed=True, msg=f"{module}: {err}")

        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        thread.join(timeout=max(0.0, until - time.monotonic()))
        if thread.is_alive():
            return {"unreachable": True, "msg": "no answer in time"}
        return dict(answer)

    def _reset_connection(self) -> None:
        with contextlib.suppress(AttributeError, AnsibleConnectionFailure):
            self._connection.reset()
