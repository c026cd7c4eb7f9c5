"""conda at the prefix is Miniforge's, what it installs comes from conda-forge only, and the
training env is one of its envs."""

from __future__ import annotations

import re

from el_nodes import Node

# conda's name for what pip installed into an env (the training env's torch, for one).
PIP = "pypi"


def conda(member: Node) -> str:
    return f"{member.setting('miniconda_prefix', 'miniconda')}/bin/conda"


def channels(member: Node, prefix: str) -> dict[str, str]:
    """Each package in the env at PREFIX -> the channel it was installed from, as conda lists it."""
    listing = member.run_json(conda(member), "list", "--prefix", prefix, "--json")
    return {package["name"]: package["channel"] for package in listing}


def test_conda_runs_from_the_prefix(member: Node) -> None:
    version = member.host.check_output(f"{conda(member)} --version")
    assert re.match(r"^conda [0-9]+\.[0-9]+", version), version


# The scenario runs the roles' defaults: Miniforge (miniconda_distribution). Its base comes from
# conda-forge, with mamba; Miniconda's comes from repo.anaconda.com (pkgs/main), without mamba.
def test_conda_is_miniforge(member: Node) -> None:
    base = channels(member, member.setting("miniconda_prefix", "miniconda"))
    assert "mamba" in base
    assert set(base.values()) == {"conda-forge"}, base


def test_training_env_comes_from_conda_forge_only(member: Node) -> None:
    env = channels(member, member.setting("pytorch_env_dir", "pytorch"))
    assert "python" in env
    assert set(env.values()) - {PIP} == {"conda-forge"}, env


def test_training_env_is_an_env_of_that_conda(member: Node) -> None:
    conda_executable = member.setting("pytorch_conda_executable", "pytorch")
    env_dir = member.setting("pytorch_env_dir", "pytorch")
    assert conda_executable == conda(member)
    assert env_dir in member.run_json(conda_executable, "env", "list", "--json")["envs"]
    assert member.host.file(f"{env_dir}/conda-meta/history").is_file
