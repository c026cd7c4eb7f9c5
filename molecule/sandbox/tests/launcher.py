"""Run the project's playbooks against the scenario's cluster, as a user would.

`Playbook.run` waits for ansible-playbook; `Playbook.start` leaves it running in the
background (for fault injection and stop.yml), and `Job` reads what a job left on the nodes.
"""

from __future__ import annotations

import json
import os
import re
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

# Lists a job's processes on a node, or kills its workers (sandbox/job_processes.py).
JOB_PROCESSES_SCRIPT = (PROJECT_DIR / "sandbox" / "job_processes.py").read_text()
# The tests of provision.yml and check.yml read each node's own result lines (`ok: [node0] =>
# {"msg": ...}`, one per node) and which tasks ran (their banners): Ansible's default output
# without skipped tasks, not ansible.cfg's quiet callback, which prints only the steps that
# did something and says a message once for all nodes.
PER_NODE_OUTPUT = {"ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_DISPLAY_SKIPPED_HOSTS": "false"}
PER_NODE_PLAYBOOKS = frozenset({"provision.yml", "check.yml"})


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

    def environment(self, name: str) -> dict[str, str]:
        return self.env | PER_NODE_OUTPUT if name in PER_NODE_PLAYBOOKS else self.env

    def command(
        self,
        name: str,
        extra_vars: dict[str, Any],
        inventories: tuple[Path, ...] = (),
        args: tuple[str, ...] = (),
        *,
        job_file: Path | None = None,
    ) -> list[str]:
        """The command line; a job file goes first, as `-e @FILE`, so that extra_vars override
        it as a user's later `-e` does."""
        sources = [arg for path in [self.inventory, *inventories] for arg in ("-i", str(path))]
        job = ["-e", f"@{job_file}"] if job_file else []
        return [
            str(Path(sys.executable).parent / "ansible-playbook"),
            *sources,
            str(PLAYBOOKS / name),
            *job,
            "-e",
            json.dumps({"train_runs_dir": str(self.runs_dir), **extra_vars}),
            *args,
        ]

    def run(
        self,
        name: str,
        extra_vars: dict[str, Any],
        inventories: tuple[Path, ...] = (),
        timeout: int = 600,
        args: tuple[str, ...] = (),
        *,
        job_file: Path | None = None,
    ) -> Outcome:
        started = time.monotonic()
        done = subprocess.run(
            self.command(name, extra_vars, inventories, args, job_file=job_file),
            env=self.environment(name),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Outcome(done.returncode, done.stdout + done.stderr, time.monotonic() - started)

    def start(
        self,
        name: str,
        extra_vars: dict[str, Any],
        inventories: tuple[Path, ...] = (),
        *,
        job_file: Path | None = None,
    ) -> Running:
        process = subprocess.Popen(
            self.command(name, extra_vars, inventories, job_file=job_file),
            env=self.environment(name),
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
        """Kill it if it still runs; what it printed goes to the test's output (shown when the
        test fails)."""
        if self.process.returncode is None:  # nobody waited for it
            self.process.kill()
            output, _ = self.process.communicate()
            print(output)


# The sandbox's shared folder (inventory/sandbox: served by node0, at the shared_storage
# role's default mount point): train.yml runs jobs there unless train_shared_dir says otherwise.
SHARED_DIR = "/shared"


@dataclass(frozen=True)
class Job:
    """A job's traces on the nodes (the train role's layout). shared: the job's shared folder
    ("" for a job run with train_shared_dir: "")."""

    job_id: str
    base_dir: str = "/var/lib/torch-cluster"
    shared: str = SHARED_DIR

    @property
    def unit(self) -> str:
        return f"torch-job-{self.job_id}"

    @property
    def folder(self) -> str:
        return f"{self.base_dir}/jobs/{self.job_id}"

    @property
    def output(self) -> str:
        """The output folder: on the shared folder, else in each node's job folder."""
        return (
            f"{self.shared}/jobs/{self.job_id}/output" if self.shared else f"{self.folder}/output"
        )

    def log(self, node: Node) -> str:
        return node.host.run(f"cat {self.folder}/node.log").stdout

    def processes(self, node: Node) -> list[str]:
        """The job's processes on the node (torchrun and its workers), as "PID ROLE COMMAND"."""
        return self._job_processes(node, "list")

    def kill_workers(self, node: Node) -> list[str]:
        """SIGKILL the job's workers on the node (torchrun, their agent, sees them die);
        returns what ran there, and fails when no worker did."""
        killed = self._job_processes(node, "kill")
        assert any(line.split()[1] == "worker" for line in killed), f"no worker on {node}"
        return killed

    def _job_processes(self, node: Node, action: str) -> list[str]:
        command = ["python3", "-c", JOB_PROCESSES_SCRIPT, self.job_id, action]
        return node.host.check_output(shlex.join(command)).splitlines()

    def unit_exists(self, node: Node) -> bool:
        shown = node.host.run(f"systemctl show {self.unit} --property=LoadState --value")
        return shown.stdout.strip() == "loaded"

    def wait_for_log(
        self, node: Node, pattern: str, timeout: float = 300, interval: float = 2
    ) -> None:
        """Wait until the node's log matches the regular expression (re.MULTILINE)."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.log(node), flags=re.MULTILINE):
            assert time.monotonic() < deadline, f"{pattern!r} not in {node}'s log after {timeout} s"
            time.sleep(interval)


def job_vars(job: Job, *args: str, **extra: object) -> dict[str, object]:
    """train.yml's extra vars for a job of the example trainer on the sandbox's digits."""
    return {
        "job_id": job.job_id,
        "train_data_src": str(DATA),
        "train_watch_interval": 5,
        "train_extra_args": list(args),
        # The example trainer continues from its checkpoint with --resume (jobs/example.yml).
        "train_resume_args": ["--resume"],
        **extra,
    }


def metrics(playbook: Playbook, job: Job) -> dict[str, Any]:
    return json.loads((playbook.runs_dir / job.job_id / "metrics.json").read_text())


def attempts(playbook: Playbook, job: Job) -> list[dict[str, Any]]:
    """The attempts of the job's last run, as train.yml recorded them."""
    record = json.loads((playbook.runs_dir / job.job_id / "attempts.json").read_text())
    return record["attempts"]


def recap_changes(output: str) -> dict[str, int]:
    """Each host's changed= count in a playbook's PLAY RECAP."""
    return {
        host: int(count)
        for host, count in re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", output, re.M)
    }


def assert_script_environments(run: Path, job: Job, members: list[Node]) -> None:
    """What scripts/print_env.py wrote on each node (one process a node, MY_SETTING=42 in
    train_env, fetched from every node into run/<node>/): torchrun's variables, the job's own,
    the interface and the training environment's PATH."""
    for rank, node in enumerate(members):
        seen = json.loads((run / node.name / f"env-rank{rank}.json").read_text())
        env_bin = str(Path(seen["python"]).parent)
        assert seen["RANK"] == str(rank)
        assert (seen["LOCAL_RANK"], seen["LOCAL_WORLD_SIZE"]) == ("0", "1")
        assert seen["WORLD_SIZE"] == str(len(members))
        assert seen["MASTER_ADDR"] == members[0].address
        assert seen["TORCH_JOB_ID"] == job.job_id
        assert seen["TORCH_JOB_OUTPUT_DIR"] == seen["cwd"] == job.output
        assert seen["NCCL_SOCKET_IFNAME"] == seen["GLOO_SOCKET_IFNAME"] == node.interface
        assert seen["MY_SETTING"] == "42"
        assert seen["PATH"].split(":")[0] == env_bin
        assert Path(seen["python_on_path"]).parent == Path(env_bin)
