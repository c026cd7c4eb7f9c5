"""A bare sandbox cluster (started, not provisioned) and ansible-playbook runs against it.

The nodes are podman containers reached over SSH with their own host keys, like freshly
installed servers: the preflight's per-host checks run on real hosts with real facts.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PROJECT_DIR = Path(__file__).resolve().parents[2]
BIN_DIR = Path(sys.executable).parent
PLAYBOOK_TIMEOUT_S = 600

# What provision.yml creates first on a Debian node, role by role: none of it may exist
# after a run that the preflight stopped. (firewall: its packages; pytorch: the OS packages
# of a venv install from a wheelhouse, the venv, the staged wheelhouse, the local fact;
# ssh_trust: the training user's key; miniconda: its prefix.)
PACKAGES = ("firewalld", "python3-firewall", "python3-venv", "python3-packaging", "rsync")
PATHS = (
    "/opt/torch-venv",
    "/var/cache/pytorch-wheelhouse",
    "/etc/ansible/facts.d/pytorch.fact",
    "/root/.ssh/id_ed25519",
    "/opt/miniconda3",
)

# Ansible's default output without skipped tasks: the task banners that roles_started reads,
# which ansible.cfg's quiet callback leaves out (it prints steps that changed something).
TASK_BANNERS = {"ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_DISPLAY_SKIPPED_HOSTS": "false"}

_RECAP_LINE = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=\d+", re.M)
# The first task of a role's main entry point: the validation of its argument spec.
_ROLE_START = re.compile(r"^TASK \[(\S+) : Validating arguments against arg spec 'main'", re.M)


@dataclass(frozen=True)
class PlaybookRun:
    """A finished ansible-playbook run."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """stdout and stderr with every run of whitespace made one space, so that messages
        can be looked up whatever the line wrapping."""
        return " ".join((self.stdout + "\n" + self.stderr).split())

    @property
    def changed(self) -> dict[str, int]:
        """changed= of each host in the play recap."""
        return {host: int(n) for host, n in _RECAP_LINE.findall(self.stdout)}

    @property
    def roles_started(self) -> set[str]:
        """The roles whose main tasks began (every role of the repository has an argument
        spec, whose validation is the first task of its main entry point), read from the task
        banners of a run with TASK_BANNERS in its environment."""
        return set(_ROLE_START.findall(self.stdout))


@dataclass(frozen=True)
class Cluster:
    """A started sandbox cluster: its name, state folder and environment for Ansible."""

    name: str
    state_dir: Path
    env: dict[str, str]

    @property
    def inventory(self) -> Path:
        return self.state_dir / "inventory.yml"

    def inventory_data(self) -> dict[str, Any]:
        return yaml.safe_load(self.inventory.read_text())

    @property
    def members(self) -> dict[str, str]:
        """Inventory hostname -> address of the training nodes, in rank order."""
        hosts = self.inventory_data()["all"]["children"]["gpu_nodes"]["hosts"]
        return {name: host["ansible_host"] for name, host in hosts.items()}

    def playbook(self, playbook: str, *args: str) -> PlaybookRun:
        result = subprocess.run(
            [str(BIN_DIR / "ansible-playbook"), playbook, *args],
            cwd=PROJECT_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=PLAYBOOK_TIMEOUT_S,
            check=False,
        )
        return PlaybookRun(result.returncode, result.stdout, result.stderr)

    def provision(
        self,
        extra_vars: dict[str, Any],
        extra_vars_file: Path,
        *args: str,
        inventory: Path | None = None,
    ) -> PlaybookRun:
        """Run playbooks/provision.yml; extra_vars go in as JSON, so their types are kept."""
        extra_vars_file.write_text(json.dumps(extra_vars))
        return self.playbook(
            "playbooks/provision.yml",
            f"--inventory={inventory or self.inventory}",
            f"--extra-vars=@{extra_vars_file}",
            *args,
        )

    def ssh(self, node: str, command: str) -> str:
        """Run a command on a node over SSH the way Ansible reaches it (same key, same
        known_hosts, host key checking on) and return its stdout."""
        settings = self.inventory_data()["all"]["vars"]
        result = subprocess.run(
            [
                "ssh",
                "-o",
                "BatchMode=yes",
                "-i",
                settings["ansible_ssh_private_key_file"],
                *shlex.split(settings["ansible_ssh_common_args"]),
                f"{settings['ansible_user']}@{self.members[node]}",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return result.stdout

    def provisioned_traces(self) -> dict[str, list[str]]:
        """Node -> which of PACKAGES and PATHS it has: empty lists on a bare cluster."""
        script = " ".join(
            [
                f"for p in {shlex.join(PACKAGES)}; do",
                "dpkg-query -W -f='${db:Status-Status}' \"$p\" 2>/dev/null | grep -qx installed",
                '&& echo "package $p"; done;',
                f"for f in {shlex.join(PATHS)}; do",
                'test -e "$f" && echo "path $f"; done; true',
            ]
        )
        return {node: self.ssh(node, script).splitlines() for node in self.members}


def playbook_roles(playbook: str) -> set[str]:
    """The roles that the plays of a playbook list under `roles:`."""
    plays = yaml.safe_load((PROJECT_DIR / playbook).read_text())
    return {
        role if isinstance(role, str) else role["role"]
        for play in plays
        for role in play.get("roles", [])
    }


def ansible_env(tmp_dir: Path) -> dict[str, str]:
    """The environment of every Ansible run of the suite: the repository's settings, this
    session's own fact cache and SSH master sockets (nodes of other clusters have the same
    names and, once those are gone, maybe the same addresses), no colours, and the task
    banners (the preflight's tests check which roles started)."""
    for folder in ("facts", "cp"):
        (tmp_dir / folder).mkdir(exist_ok=True)
    return {
        **os.environ,
        "PATH": f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(PROJECT_DIR / "ansible.cfg"),
        "CONTAINERS_CONF": str(PROJECT_DIR / "sandbox" / "containers.conf"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_dir / "facts"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_dir / "cp"),
        "ANSIBLE_NOCOLOR": "1",
        **TASK_BANNERS,
    }
