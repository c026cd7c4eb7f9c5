"""systemd's view of a job's unit, mapped to the launcher's node states, table by table."""

from __future__ import annotations

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    FAILED,
    RUNNING,
    STOPPED,
    SUCCEEDED,
    TIMED_OUT,
    describe_exit,
    parse_properties,
    parse_timestamp,
    unit_state,
)


def props(
    active: str, sub: str, result: str = "success", code: str = "0", status: str = "0", **more: str
) -> dict[str, str]:
    """systemctl show's properties of a unit (more: load=, exited=)."""
    return {
        "LoadState": more.get("load", "loaded"),
        "ActiveState": active,
        "SubState": sub,
        "Result": result,
        "ExecMainCode": code,
        "ExecMainStatus": status,
        "ExecMainExitTimestamp": more.get("exited", ""),
    }


# (systemd's properties, the state, words the detail must hold)
CASES = {
    "never started or cleared": (props("inactive", "dead", load="not-found"), STOPPED, "gone"),
    "torchrun running": (props("active", "running"), RUNNING, "active/running"),
    "starting": (props("activating", "start"), RUNNING, "activating/start"),
    "torchrun exited 0": (props("active", "exited", code="1"), SUCCEEDED, "exit status 0"),
    "exited non-zero, still active": (
        props("active", "exited", code="1", status="3"), FAILED, "exit status 3"),
    "torchrun exited 1": (
        props("failed", "failed", "exit-code", "1", "1"), FAILED, "torchrun exit status 1"),
    "torchrun killed": (
        props("failed", "failed", "signal", "2", "9"), FAILED, "killed by SIGKILL"),
    "torchrun dumped core": (
        props("failed", "failed", "core-dump", "3", "11"), FAILED, "SIGSEGV, core dumped"),
    "out of memory": (props("failed", "failed", "oom-kill", "2", "9"), FAILED, "oom-kill"),
    "time limit, being stopped": (
        props("deactivating", "stop-sigterm", "timeout"), TIMED_OUT, "time limit"),
    "time limit, stopped": (
        props("failed", "failed", "timeout", "2", "15"), TIMED_OUT, "train_timeout"),
    "stopped by systemctl stop": (props("inactive", "dead"), STOPPED, "stopped before it ended"),
    "being stopped": (props("deactivating", "stop-sigterm"), STOPPED, "deactivating"),
}  # fmt: skip


@pytest.mark.parametrize(("properties", "state", "words"), CASES.values(), ids=list(CASES))
def test_unit_state_maps_systemds_view(properties: dict[str, str], state: str, words: str) -> None:
    node = unit_state(properties)
    assert node.state == state
    assert words in node.detail


def test_the_end_time_is_read_in_utc_with_microseconds() -> None:
    node = unit_state(
        props(
            "failed", "failed", "exit-code", "1", "1", exited="Thu 2026-12-03 07:54:44.460777 UTC"
        )
    )
    assert node.ended == pytest.approx(1796284484.460777)


@pytest.mark.parametrize("text", ["", "n/a", "Thu 2026-12-03 07:54:44 CET"])
def test_a_missing_or_foreign_time_reads_as_unknown(text: str) -> None:
    assert parse_timestamp(text) == 0.0


def test_systemctl_show_output_is_parsed_into_properties() -> None:
    text = (
        "LoadState=loaded\nActiveState=failed\nExecMainExitTimestamp=Thu 2026-12-03 07:54:44 UTC\n"
    )
    assert parse_properties(text) == {
        "LoadState": "loaded",
        "ActiveState": "failed",
        "ExecMainExitTimestamp": "Thu 2026-12-03 07:54:44 UTC",
    }


@pytest.mark.parametrize(
    ("code", "status", "words"),
    [("1", "0", "exit status 0"), ("2", "15", "killed by SIGTERM"), ("2", "99", "signal 99"),
     ("0", "0", "still running"), ("7", "1", "ended with code 7")],
)  # fmt: skip
def test_how_torchrun_ended_is_described(code: str, status: str, words: str) -> None:
    assert words in describe_exit(code, status)
