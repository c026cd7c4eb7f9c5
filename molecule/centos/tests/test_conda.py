"""Miniforge's conda at the prefix, on conda-forge only, and the training env one of its envs."""

from __future__ import annotations

import re

import yaml
from el_nodes import Node


def test_conda_runs_from_the_prefix(member: Node) -> None:
    prefix = member.setting("miniconda_prefix", "miniconda")
    version = member.host.check_output(f"{prefix}/bin/conda --version")
    assert re.match(r"^conda [0-9]+\.[0-9]+", version), version


def test_conda_uses_conda_forge_only(member: Node) -> None:
    prefix = member.setting("miniconda_prefix", "miniconda")
    condarc = yaml.safe_load(member.host.file(f"{prefix}/.condarc").content_string)
    assert condarc["channels"] == ["conda-forge"]
    assert "https://repo.anaconda.com/pkgs/main" in condarc["denylist_channels"]


def test_training_env_is_an_env_of_that_conda(member: Node) -> None:
    conda = member.setting("pytorch_conda_executable", "pytorch")
    env_dir = member.setting("pytorch_env_dir", "pytorch")
    assert conda == f"{member.setting('miniconda_prefix', 'miniconda')}/bin/conda"
    assert env_dir in member.run_json(conda, "env", "list", "--json")["envs"]
    assert member.host.file(f"{env_dir}/conda-meta/history").is_file
