"""The roles, modules and playbooks as a collection: built, installed elsewhere, and run.

Teams with an Ansible repository of their own install torch_cluster.cluster instead of cloning
this one. The collection is built from this tree, installed into a temporary path, and
provision.yml's preflight runs from it against the sandbox, with an ansible.cfg that knows
nothing of this repository (no library, module_utils, action or roles paths)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from launcher import recap_changes
from sandbox_nodes import PROJECT_DIR, Node

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The collection, built from this tree and installed under a temporary path."""
    root = tmp_path_factory.mktemp("collection")
    subprocess.run(
        [BIN / "ansible-galaxy", "collection", "build", "--output-path", root, PROJECT_DIR],
        check=True,
        capture_output=True,
        cwd=root,
    )
    (tarball,) = root.glob("torch_cluster-cluster-*.tar.gz")
    subprocess.run(
        [
            BIN / "ansible-galaxy",
            "collection",
            "install",
            "--force",
            "-p",
            root / "installed",
            tarball,
        ],
        check=True,
        capture_output=True,
        cwd=root,
    )
    (root / "ansible.cfg").write_text(
        f"[defaults]\ncollections_path = {root / 'installed'}\ninterpreter_python = auto_silent\n"
    )
    return root


def run_from_collection(
    installed: Path, inventory: Path, playbook: str, *args: str
) -> subprocess.CompletedProcess:
    # Molecule's environment (its connection settings) stays; every path that leads to this
    # repository's plugins and roles goes.
    repository_paths = (
        "ANSIBLE_CONFIG", "ANSIBLE_LIBRARY", "ANSIBLE_MODULE_UTILS", "ANSIBLE_ACTION_PLUGINS",
        "ANSIBLE_ROLES_PATH", "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS",
        "ANSIBLE_FILTER_PLUGINS",
    )  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in repository_paths}
    # Plain output (Molecule's verifier sets ANSIBLE_FORCE_COLOR), for the recap's counts.
    env |= {
        "ANSIBLE_CONFIG": str(installed / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    return subprocess.run(
        [BIN / "ansible-playbook", playbook, "-i", inventory, *args],
        capture_output=True,
        text=True,
        cwd=installed,
        env=env,
        timeout=300,
        check=False,
    )


def test_the_collection_holds_the_roles_modules_and_playbooks(installed: Path) -> None:
    home = installed / "installed" / "ansible_collections" / "torch_cluster" / "cluster"
    for part in ("playbooks/provision.yml", "playbooks/train.yml", "playbooks/check.yml"):
        assert (home / part).is_file(), part
    for role in ("cluster", "epel", "nccl", "nvidia_driver", "pytorch", "firewall", "train"):
        assert (home / "roles" / role / "tasks" / "main.yml").is_file(), role
    assert (home / "plugins" / "modules" / "torch_job_unit.py").is_file()
    assert (home / "plugins" / "action" / "torch_job_watch.py").is_file()
    assert not (home / "molecule").exists()
    assert not (home / ".venv").exists()


def test_provision_preflight_runs_from_the_installed_collection(
    installed: Path, inventory_file: Path, members: list[Node]
) -> None:
    done = run_from_collection(
        installed, inventory_file, "torch_cluster.cluster.provision", "--tags", "always"
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    # The collection's own roles and modules ran: the platform check (an action plugin), the
    # address check and every role's preflight (modules importing the collection's
    # module_utils).
    for task in (
        "torch_cluster.cluster.cluster : Check the node's operating system and choose its Python",
        "torch_cluster.cluster.cluster : Check that the cluster address is one of this host's",
        "torch_cluster.cluster.firewall : Check that no other zone holds a member's address",
        "torch_cluster.cluster.ssh_trust : Check the key type against the node's FIPS mode",
    ):
        assert f"TASK [{task}]" in output, task
    changes = recap_changes(output)
    assert set(changes) >= {node.name for node in members}
    assert not any(changes.values())


def test_the_collections_preflight_refuses_bad_input(installed: Path, inventory_file: Path) -> None:
    done = run_from_collection(
        installed,
        inventory_file,
        "torch_cluster.cluster.provision",
        "--tags",
        "always",
        "-e",
        "pytorch_cuda_variant=cu128",
    )
    assert done.returncode != 0
    assert "torch 2.14.1 has no cu128 build" in done.stdout
