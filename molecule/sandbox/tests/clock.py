"""The verify's clock (a pytest plugin, loaded by conftest.py): when each module starts, what
each module cost, and a limit on every test.

CI gives the whole of `make test` a fixed time. A test that hangs would use the rest of it, and
the log would end in the middle of a module's line with nothing named. So:
- each module's first test prints the time and the seconds since the verify began;
- every test has a limit (pytest-timeout): PER_TEST_LIMIT_S, or less when TEST_DEADLINE (seconds
  since the epoch; .ci/run sets it from CI's limit) comes first. A test past it fails with its
  stack, and the verify goes on;
- a test that would start after TEST_DEADLINE fails at once, naming it, so that Molecule's
  destroy and the failed tests' summary are printed before CI stops the run;
- the summary lists each module's seconds, longest first.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

# The longest a sandbox test may take, its module's fixtures included (test_slurm.py's sets up
# Slurm and the team in about 250 s; the longest test takes about 150 s).
PER_TEST_LIMIT_S = 900
DEADLINE_VARIABLE = "TEST_DEADLINE"

_started = time.monotonic()
_seconds: defaultdict[str, float] = defaultdict(float)
_module = ""


def deadline() -> float | None:
    """TEST_DEADLINE as seconds since the epoch, or None when it is unset."""
    value = os.environ.get(DEADLINE_VARIABLE, "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError as error:
        raise pytest.UsageError(f"{DEADLINE_VARIABLE}={value!r} is not a number") from error


def limit(now: float, until: float | None) -> int:
    """A test's limit in seconds, starting now (epoch seconds): PER_TEST_LIMIT_S, or what is left
    before the deadline when that is less (at least 1 s: pytest-timeout takes 0 as no limit)."""
    if until is None:
        return PER_TEST_LIMIT_S
    return max(1, int(min(PER_TEST_LIMIT_S, until - now)))


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # Outermost, so that pytest-timeout (a wrapper of this hook too) reads the marker.
    item.add_marker(pytest.mark.timeout(limit(time.time(), deadline())))
    yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    until = deadline()
    if until is not None and time.time() >= until:
        pytest.fail(
            f"not run: {DEADLINE_VARIABLE} passed {time.time() - until:.0f} s ago "
            f"({time.strftime('%H:%M:%S', time.gmtime(until))} UTC), so that the sandbox is "
            "destroyed and the failures reported within CI's time",
            pytrace=False,
        )


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    global _module  # noqa: PLW0603 (one verify, one clock)
    module = _module_of(nodeid)
    if module != _module:
        _module = module
        print(
            f"\n[verify {time.strftime('%H:%M:%S', time.gmtime())} UTC, "
            f"+{time.monotonic() - _started:.0f} s] {module}",
            flush=True,
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[_module_of(report.nodeid)] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.section("seconds per module (fixtures included)")
    for module, seconds in sorted(_seconds.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.0f}  {module}")
    terminalreporter.write_line(f"{sum(_seconds.values()):8.0f}  in all")
