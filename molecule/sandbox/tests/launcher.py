"""Run the project's playbooks against the scenario's cluster, as a user would.

`Playbook.run` waits for ansible-playbook; `Playbook.start` leaves it running in the
background (for fault injection and stop.yml), and `Job` reads what a job left on the nodes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_nodes import PROJECT_DIR, Node

PLAYBOOKS = PROJECT_DIR / "playbooks"
# The sandbox's data: made by `make data` on the controller, staged once per node.
DATA = PROJECT_DIR / ".cache" / "data"
# Enough epochs of the sandbox's 1,500 digits to still be training when a test interferes.
LONG_JOB = ["--epochs", "400"]


@dataclass(frozen=True)
class Outcome:
    rc: int
    output: str
    seconds: float


class Playbook:
    """ansible-playbook with the scenario's inventory and the repository's ansible.cfg."""

    def __init__(self, inventory: Path, runs_dir: Path) -> None:
        self.inventory = inventory
        self.runs_dir = runs_dir
        ephemeral = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", inventory.parent.parent))
        self.env = os.environ | {
            "ANSIBLE_CONFIG": str(PROJECT_DIR / "ansible.cfg"),
            "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(ephemeral / "facts"),
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_NOCOLOR": "1",
        }

    def command(self, name: str, extra_vars: dict[str, Any], inventories: list[Path]) -> list[str]:
        sources = [arg for path in [self.inventory, *inventories] for arg in ("-i", str(path))]
        return [
            str(Path(sys.executable).parent / "ansible-playbook"),
            *sources,
            str(PLAYBOOKS / name),
            "-e",
            json.dumps({"train_runs_dir": str(self.runs_dir), **extra_vars}),
        ]

    def run(
        self,
        name: str,
        extra_vars: dict[str, Any],
        inventories: tuple[Path, ...] = (),
        timeout: int = 600,
    ) -> Outcome:
        started = time.monotonic()
        done = subprocess.run(
            self.command(name, extra_vars, list(inventories)),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Outcome(done.returncode, done.stdout + done.stderr, time.monotonic() - started)

    def start(self, name: str, extra_vars: dict[str, Any]) -> Running:
        process = subprocess.Popen(
            self.command(name, extra_vars, []),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return Running(process, time.monotonic())


@dataclass
class Running:
    """An ansible-playbook that runs in the background."""

    process: subprocess.Popen[str]
    started: float

    def wait(self, timeout: float = 600) -> Outcome:
        output, _ = self.process.communicate(timeout=timeout)
        return Outcome(self.process.returncode, output, time.monotonic() - self.started)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@dataclass(frozen=True)
class Job:
    """A job's traces on the nodes (the train role's layout)."""

    job_id: str
    base_dir: str = "/var/lib/torch-cluster"

    @property
    def unit(self) -> str:
        return f"torch-job-{self.job_id}"

    @property
    def folder(self) -> str:
        return f"{self.base_dir}/jobs/{self.job_id}"

    @property
    def output(self) -> str:
        return f"{self.folder}/output"

    def log(self, node: Node) -> str:
        return node.host.run(f"cat {self.folder}/node.log").stdout

    def processes(self, node: Node) -> list[str]:
        """The processes on the node that run the job's code (torchrun and its workers)."""
        found = node.host.run(shlex.join(["pgrep", "-af", f"{self.folder}/code/"]))
        return found.stdout.splitlines()

    def unit_exists(self, node: Node) -> bool:
        shown = node.host.run(f"systemctl show {self.unit} --property=LoadState --value")
        return shown.stdout.strip() == "loaded"

    def wait_for_log(self, node: Node, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log(node):
            assert time.monotonic() < deadline, f"{text!r} not in {node}'s log after {timeout} s"
            time.sleep(2)
