"""A job's node is one transient systemd unit (torch-job-<id>) running torchrun: what that unit's
state is, in the launcher's words (running, succeeded, failed, timed out, stopped, unreachable),
from `systemctl show`. Standard library only: it runs on the nodes' system Python (3.9 on EL9)
and on the controller.
"""

from __future__ import annotations

import datetime
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass

RUNNING = "running"


SUCCEEDED = "succeeded"


FAILED = "failed"


TIMED_OUT = "timed out"


STOPPED = "stopped"


UNREACHABLE = "unreachable"


UNIT_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainCode",
    "ExecMainStatus",
    "ExecMainExitTimestamp",
)


# `systemctl show --timestamp=us+utc` (systemd 248 and later) prints times as
# "Thu 2026-12-03 07:54:44.460777 UTC".
SHOW_TIMESTAMPS = "--timestamp=us+utc"


_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) UTC")


# siginfo's si_code of the main process's end, as systemd reports it in ExecMainCode.
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = "1", "2", "3"


@dataclass(frozen=True)
class NodeState:
    """What one node's unit is doing, in the launcher's words."""

    state: str
    detail: str
    # When the unit's main process ended (seconds since the epoch by that node's clock; 0: not
    # yet, or not known).
    ended: float = 0.0

    @property
    def bad(self) -> bool:
        return self.state in (FAILED, TIMED_OUT, STOPPED, UNREACHABLE)

    def as_dict(self) -> dict[str, object]:
        return {"state": self.state, "detail": self.detail, "ended": self.ended}


def parse_properties(text: str) -> dict[str, str]:
    """`systemctl show --property=...` output as a dict."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch of a systemd timestamp in UTC; 0.0 when there is none."""
    found = _TIMESTAMP.search(text)
    if not found:
        return 0.0
    stamp = datetime.datetime.strptime(found.group(1).split(".")[0], "%Y-%m-%d %H:%M:%S")
    fraction = float("0." + found.group(1).split(".")[1]) if "." in found.group(1) else 0.0
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp() + fraction


def describe_exit(code: str, status: str) -> str:
    """How the unit's main process (torchrun) ended, from ExecMainCode and ExecMainStatus."""
    if code == _CLD_EXITED:
        return f"exit status {status}"
    if code in (_CLD_KILLED, _CLD_DUMPED):
        try:
            name = signal.Signals(int(status)).name
        except ValueError:
            name = f"signal {status}"
        return f"killed by {name}" + (", core dumped" if code == _CLD_DUMPED else "")
    return "still running" if code in ("", "0") else f"ended with code {code}, status {status}"


def unit_state(props: Mapping[str, str]) -> NodeState:
    """Map systemd's view of a job's unit (started with --remain-after-exit) to a NodeState."""
    load, active, sub = (
        props.get("LoadState", ""),
        props.get("ActiveState", ""),
        props.get("SubState", ""),
    )
    result = props.get("Result", "")
    ended = describe_exit(props.get("ExecMainCode", ""), props.get("ExecMainStatus", ""))
    if load == "not-found":
        state, detail = STOPPED, "the unit is gone: stopped and cleared, or never started"
    elif result == "timeout":
        state, detail = TIMED_OUT, f"{active}/{sub}: its time limit (train_timeout) ran out"
    elif active == "failed" or result not in ("success", ""):
        state, detail = FAILED, f"{active}/{sub}, result {result}: torchrun {ended}"
    elif active == "active" and sub == "exited":
        state = SUCCEEDED if ended == "exit status 0" else FAILED
        detail = f"torchrun {ended}" if state == SUCCEEDED else f"{active}/{sub}: torchrun {ended}"
    elif active in ("inactive", "deactivating"):
        state, detail = STOPPED, f"{active}/{sub}: stopped before it ended"
    else:
        state, detail = RUNNING, f"{active}/{sub}"
    ended_at = 0.0 if state == RUNNING else parse_timestamp(props.get("ExecMainExitTimestamp", ""))
    return NodeState(state, detail, ended_at)
