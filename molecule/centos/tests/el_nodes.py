"""The containers of the centos scenario, and the settings the roles ran with on them.

A node is a container of the scenario reached with `podman exec` (the scenario's connection): a
member of the training group, or the outsider. A member's settings are the inventory's values, else
the roles' defaults, read from the roles' own files so that the tests follow the pins rather than
repeat them.

Reachability is proven with real TCP connections, made with the sandbox scenario's probes
(molecule/sandbox/tests/sandbox_nodes.py): a listener that sends each client a token of its own, and
a client that reports how its connection ended. A playbook run is read the way the preflight suite
reads one (tests/preflight/bare_cluster.py). One implementation of each, for every suite.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import secrets
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from testinfra.host import Host

sys.path.append(str(Path(__file__).resolve().parents[2] / "sandbox" / "tests"))
sys.path.append(str(Path(__file__).resolve().parents[3] / "tests" / "preflight"))

from bare_cluster import PlaybookRun
from sandbox_nodes import CLIENT_SCRIPT, LISTENER_SCRIPT, RANDOM_PORTS, Connection

PROJECT_DIR = Path(__file__).resolve().parents[3]
PLAYBOOK_TIMEOUT_S = 900


@functools.cache
def role_file(role: str, path: str) -> dict[str, Any]:
    """A YAML file of a role, e.g. role_file("epel", "vars/RedHat.yml")."""
    return yaml.safe_load((PROJECT_DIR / "roles" / role / path).read_text())


def role_defaults(role: str) -> dict[str, Any]:
    return role_file(role, "defaults/main.yml")


def random_high_port() -> int:
    """A random port of the range that gloo and NCCL pick their connections from."""
    return random.choice(RANDOM_PORTS)


def cuda_version(variant: str) -> str:
    """The CUDA version of a PyTorch wheel variant: cu130 -> 13.0 (the pytorch role's rule)."""
    return f"{variant[2:-1]}.{variant[-1]}"


@dataclass(frozen=True)
class Node:
    """A container of the scenario (equal and hashed by name)."""

    name: str
    host: Host = field(compare=False)
    hostvars: dict[str, Any] = field(compare=False)

    @property
    def address(self) -> str:
        """A member's cluster_address: molecule.yml sets it for every member, literally."""
        return self.hostvars["cluster_address"]

    @property
    def distribution(self) -> str:
        """ID of /etc/os-release: centos (CentOS Stream), rocky or almalinux."""
        return self.host.system_info.distribution

    @property
    def major_version(self) -> str:
        return self.host.system_info.release.split(".")[0]

    @property
    def is_centos_stream(self) -> bool:
        return self.distribution == "centos"

    def setting(self, name: str, role: str) -> Any:
        """A role variable for this node: the inventory's value, else the role default."""
        value = self.hostvars.get(name, role_defaults(role)[name])
        if "{{" in str(value):
            msg = f"{name} of {self.name} is a template ({value!r}); these tests read only literals"
            raise ValueError(msg)
        return value

    def run_json(self, *argv: str) -> Any:
        """Run a command on the node and parse what it prints as JSON."""
        return json.loads(self.host.check_output(shlex.join(argv)))

    def connect(self, address: str, port: int, timeout: float = 5) -> Connection:
        """Open a TCP connection from this node to ADDRESS:PORT."""
        outcome = self.run_json("python3", "-c", CLIENT_SCRIPT, address, str(port), str(timeout))
        return Connection(**outcome)

    @contextlib.contextmanager
    def listening(self, port: int) -> Iterator[Connection]:
        """A TCP listener on PORT of this node for the duration of the block (a transient systemd
        unit, started once it listens); yields what a client that reaches it sees."""
        token = secrets.token_hex(8)
        unit = f"molecule-listener-{port}-{token}"
        command = [
            "systemd-run",
            f"--unit={unit}",
            "--collect",
            "--quiet",
            "--property=Type=notify",
            "--property=TimeoutStartSec=20",
            "/usr/bin/python3",
            "-c",
            LISTENER_SCRIPT,
            str(port),
            token,
        ]
        started = self.host.run(shlex.join(command))
        assert started.rc == 0, f"no listener on {self}:{port}: {started.stderr}"
        try:
            yield Connection("connected", token)
        finally:
            self.host.run(f"systemctl stop {unit}")

    def __str__(self) -> str:
        return self.name


def provision(facts_dir: Path, *args: str) -> PlaybookRun:
    """playbooks/provision.yml on the scenario's members as an operator runs it: the scenario's
    inventory, the repository's ansible.cfg, facts of this run only (in FACTS_DIR)."""
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            f"--inventory={os.environ['MOLECULE_INVENTORY_FILE']}",
            "playbooks/provision.yml",
            *args,
        ],
        cwd=PROJECT_DIR,
        env=os.environ
        | {
            "ANSIBLE_CONFIG": str(PROJECT_DIR / "ansible.cfg"),
            "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(facts_dir),
            # The tests read which tasks ran (their banners) and each node's failure: Ansible's
            # default output without skipped tasks, not ansible.cfg's one line per step.
            "ANSIBLE_STDOUT_CALLBACK": "default",
            "ANSIBLE_DISPLAY_SKIPPED_HOSTS": "false",
            # Molecule forces colours, which would outrank ANSIBLE_NOCOLOR.
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_NOCOLOR": "1",
        },
        capture_output=True,
        text=True,
        timeout=PLAYBOOK_TIMEOUT_S,
        check=False,
    )
    return PlaybookRun(done.returncode, done.stdout, done.stderr)
