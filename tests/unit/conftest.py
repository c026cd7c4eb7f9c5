"""What the unit tests share: a module of this collection run the way Ansible runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def run_module(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a module of the collection by its FQCN with `ansible localhost`, on this machine's
    Python: the collection that `make collection-path` links, without the repository's
    ansible.cfg (whose callbacks print to stdout too). Its JSON result is the process's
    `result` attribute, when it gave one."""
    (tmp_path / "ansible.cfg").write_text("")
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "json",
    }

    def run(name: str, args: dict, check: bool = False) -> subprocess.CompletedProcess[str]:
        argv = [BIN / "ansible", "localhost", "-i", "localhost,", "-c", "local"]
        argv += ["-e", f"ansible_python_interpreter={sys.executable}"]
        argv += ["-m", f"torch_cluster.cluster.{name}", "-a", json.dumps(args)]
        argv += ["--check"] if check else []
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        try:
            plays = json.loads(done.stdout)["plays"]
            done.result = plays[0]["tasks"][0]["hosts"]["localhost"]  # type: ignore[attr-defined]
        except (ValueError, KeyError, IndexError):
            done.result = None  # type: ignore[attr-defined]
        return done

    return run
