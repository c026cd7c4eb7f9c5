"""What roles/slurm installs and expects on each family, EL9 first, from its vars and tasks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "slurm"

# The package that holds /usr/bin/mysql on each family: AppStream's mariadb on EL9,
# mariadb-client on Debian and Ubuntu.
MYSQL_CLIENT = {"RedHat": "mariadb", "Debian": "mariadb-client"}


def family_vars(family: str) -> dict:
    return yaml.safe_load((ROLE / "vars" / f"{family}.yml").read_text())


def tasks(name: str) -> list[dict]:
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def commands_run(task_list: list[dict]) -> set[str]:
    return {
        task["ansible.builtin.command"]["argv"][0]
        for task in task_list
        if "ansible.builtin.command" in task
    }


def task_index(task_list: list[dict], name: str) -> int:
    return [task["name"] for task in task_list].index(name)


@pytest.mark.parametrize("family", sorted(MYSQL_CLIENT))
def test_accounting_installs_the_client_its_tasks_call(family):
    assert commands_run(tasks("accounting.yml")) == {"mysql"}
    packages = family_vars(family)["__slurm_accounting_packages"]
    assert MYSQL_CLIENT[family] in packages
    assert "mariadb-server" in packages


@pytest.mark.parametrize(
    ("family", "daemon_packages"),
    [
        ("RedHat", ["slurm-slurmd", "slurm-slurmctld", "slurm-slurmdbd"]),
        ("Debian", ["slurmd", "slurmctld", "slurmdbd"]),
    ],
)
def test_each_daemon_comes_from_the_family_package(family, daemon_packages):
    found = family_vars(family)
    slurmd, slurmctld, slurmdbd = daemon_packages
    assert slurmd in found["__slurm_node_packages"]
    assert slurmctld in found["__slurm_controller_packages"]
    assert slurmdbd in found["__slurm_accounting_packages"]


@pytest.mark.parametrize("family", sorted(MYSQL_CLIENT))
def test_every_node_installs_munge(family):
    assert "munge" in family_vars(family)["__slurm_node_packages"]


def test_el9_uses_the_folders_epel_slurm_ships():
    found = family_vars("RedHat")
    assert found["__slurm_state_dir"] == "/var/spool/slurm/ctld"
    assert found["__slurm_spool_dir"] == "/var/spool/slurm/d"
    assert found["__slurm_pid_dir"] == "/run/slurm"


def test_el9_reaches_mariadb_through_its_default_socket():
    assert family_vars("RedHat")["__slurm_mysql_socket"] == "/var/lib/mysql/mysql.sock"


def test_debian_paths_are_unchanged():
    found = family_vars("Debian")
    assert found["__slurm_pid_dir"] == "/run"
    assert found["__slurm_state_dir"] == "/var/lib/slurm/slurmctld"
    assert found["__slurm_spool_dir"] == "/var/lib/slurm/slurmd"
    assert found["__slurm_mysql_socket"] == "/run/mysqld/mysqld.sock"


def test_the_munge_key_is_written_before_munge_first_starts():
    # EL9's munge package makes no key, and munged does not start without one.
    configure = tasks("configure.yml")
    key = task_index(configure, "Install the cluster's munge key on every node")
    assert key < task_index(configure, "Start munge")


def test_the_slurm_user_is_made_before_its_folders():
    # EPEL's packages create no slurm user; the folders are chowned to it.
    configure = tasks("configure.yml")
    user = task_index(configure, "Make sure the slurm user exists")
    assert user < task_index(configure, "Create Slurm's folders")


@pytest.mark.parametrize(
    ("template", "pid_files"),
    [
        ("slurm.conf.j2", ["slurmctld.pid", "slurmd.pid"]),
        ("slurmdbd.conf.j2", ["slurmdbd.pid"]),
    ],
)
def test_pid_files_live_in_the_family_pid_folder(template, pid_files):
    text = (ROLE / "templates" / template).read_text()
    for pid_file in pid_files:
        assert f"{{{{ __slurm_pid_dir }}}}/{pid_file}" in text
