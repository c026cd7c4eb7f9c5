"""A peer's clock against this node's (module_utils/health/clock.py), with real
processes standing in for the SSH command: the measurement must not count the time the
connection and the peer's start take."""

from __future__ import annotations

import sys
import time

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.clock import (
    CLOCK_ECHO,
    clock_offset,
)


def _peer(skew: float, start_delay: float) -> list[str]:
    """A peer whose clock is `skew` seconds ahead and that takes `start_delay` seconds to start
    answering (an SSH handshake and Python's start on a loaded node)."""
    echo = CLOCK_ECHO.replace("time.time()", f"(time.time() + {skew})")
    return [sys.executable, "-c", f"import time\ntime.sleep({start_delay})\n{echo}"]


def test_a_slow_start_does_not_look_like_a_clock_that_is_off() -> None:
    # Timed around the whole command, a 1.5 s start made the clock seem 0.75 s or more off.
    assert abs(clock_offset(_peer(0.0, 1.5))) < 0.05


def test_a_clock_ahead_or_behind_is_measured() -> None:
    assert abs(clock_offset(_peer(5.0, 0.5)) - 5.0) < 0.05
    assert abs(clock_offset(_peer(-2.5, 0.0)) + 2.5) < 0.05


def test_a_peer_that_does_not_answer_gives_none_at_the_timeout() -> None:
    started = time.monotonic()
    assert clock_offset(["sleep", "30"], timeout=1) is None
    assert time.monotonic() - started < 5
    assert clock_offset(["true"]) is None
    assert clock_offset(["/no/such/ssh"]) is None
