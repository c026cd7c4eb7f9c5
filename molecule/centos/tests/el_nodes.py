"""The nodes of the centos scenario, and the settings the roles ran with on them.

A node is an inventory host of the training group, reached with `podman exec` (the scenario's
connection); its settings are the inventory's values, else the roles' defaults, read from the
roles' own files so that the tests follow the pins rather than repeat them.
"""

from __future__ import annotations

import functools
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from testinfra.host import Host

PROJECT_DIR = Path(__file__).resolve().parents[3]


@functools.cache
def role_file(role: str, path: str) -> dict[str, Any]:
    """A YAML file of a role, e.g. role_file("epel", "vars/RedHat.yml")."""
    return yaml.safe_load((PROJECT_DIR / "roles" / role / path).read_text())


def role_defaults(role: str) -> dict[str, Any]:
    return role_file(role, "defaults/main.yml")


def cuda_version(variant: str) -> str:
    """The CUDA version of a PyTorch wheel variant: cu130 -> 13.0 (the pytorch role's rule)."""
    return f"{variant[2:-1]}.{variant[-1]}"


@dataclass(frozen=True)
class Node:
    """A host of the training group (equal and hashed by name)."""

    name: str
    host: Host = field(compare=False)
    hostvars: dict[str, Any] = field(compare=False)

    @property
    def address(self) -> str:
        """The node's cluster_address: molecule.yml sets it for every node, literally."""
        return self.hostvars["cluster_address"]

    @property
    def distribution(self) -> str:
        """ID of /etc/os-release: centos (CentOS Stream) or rocky."""
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

    def __str__(self) -> str:
        return self.name
