"""The launcher's wrapper (plugins/module_utils/job/record_wrapper.py) around a user's script, run
by the controller's torch: the script's outcome is what the process reports, and a script that
returned ends the way Python's shutdown would (other threads joined, atexit handlers run, output
flushed).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.record_wrapper import (
    RECORD_WRAPPER,
)


def run_wrapped(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    wrapper = tmp_path / "record_errors.py"
    wrapper.write_text(RECORD_WRAPPER)
    (tmp_path / "script.py").write_text(textwrap.dedent(script))
    return subprocess.run(
        [sys.executable, str(wrapper), str(tmp_path / "script.py"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_a_script_that_returns_ends_after_its_threads_and_atexit_handlers(
    tmp_path: Path,
) -> None:
    done = run_wrapped(
        tmp_path,
        """
        import atexit, sys, threading, time
        atexit.register(lambda: open("atexit.txt", "w").write("ran"))
        def late():
            time.sleep(0.5)
            open("thread.txt", "w").write(sys.argv[1])
        threading.Thread(target=late).start()
        print("unflushed line", end="")
        """,
        "from-argv",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "unflushed line"
    assert (tmp_path / "thread.txt").read_text() == "from-argv"
    assert (tmp_path / "atexit.txt").read_text() == "ran"


@pytest.mark.parametrize(("code", "expected"), [("0", 0), ("3", 3), ("'usage'", 1)])
def test_sys_exit_keeps_its_status(tmp_path: Path, code: str, expected: int) -> None:
    done = run_wrapped(tmp_path, f"import sys; sys.exit({code})")
    assert done.returncode == expected


def test_an_exception_fails_the_process_with_its_traceback(tmp_path: Path) -> None:
    done = run_wrapped(tmp_path, "raise ValueError('boom')")
    assert done.returncode == 1
    assert "ValueError: boom" in done.stderr
