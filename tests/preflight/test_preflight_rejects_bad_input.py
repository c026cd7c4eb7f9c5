"""Bad input stops playbooks/provision.yml in its preflight, with a message that names the
problem, before any change is made on any node."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from bare_cluster import Cluster, PlaybookRun

Inventory = dict[str, Any]


def without_training_group(inventory: Inventory) -> Inventory:
    """The nodes are in the inventory, but in another group."""
    children = inventory["all"]["children"]
    children["spare"] = children.pop("gpu_nodes")
    return inventory


def with_empty_training_group(inventory: Inventory) -> Inventory:
    children = inventory["all"]["children"]
    children["spare"] = children["gpu_nodes"]
    children["gpu_nodes"] = {"hosts": {}}
    return inventory


def with_a_shared_address(inventory: Inventory) -> Inventory:
    """node1's ansible_host is node0's."""
    hosts = inventory["all"]["children"]["gpu_nodes"]["hosts"]
    hosts["node1"]["ansible_host"] = hosts["node0"]["ansible_host"]
    return inventory


@dataclass(frozen=True)
class BadInput:
    """Extra vars and/or a change to the bare cluster's inventory, and the message that the
    preflight must fail with ({node0} is node0's address, {tmp} a fresh folder)."""

    message: str
    extra_vars: dict[str, Any] = field(default_factory=dict)
    inventory: Callable[[Inventory], Inventory] | None = None
    args: tuple[str, ...] = ()


BAD_INPUTS = [
    pytest.param(
        BadInput(
            "The training group 'gpu_nodes' is missing from the inventory",
            inventory=without_training_group,
        ),
        id="training-group-missing",
    ),
    pytest.param(
        BadInput(
            "The training group 'gpu_nodes' is empty in the inventory",
            inventory=with_empty_training_group,
        ),
        id="training-group-empty",
    ),
    pytest.param(
        BadInput(
            "Nodes of 'gpu_nodes' share an address: {node0} is used by node0 and node1;",
            inventory=with_a_shared_address,
        ),
        id="two-hosts-one-address",
    ),
    pytest.param(
        BadInput(
            "This playbook runs on every node of 'gpu_nodes' at once, "
            "but --limit leaves out node1.",
            args=("--limit=node0,localhost",),
        ),
        id="limit-leaves-out-a-node",
    ),
    pytest.param(
        BadInput(
            "cluster_master_port must be an integer between 1024 and 65535, got 80.",
            {"cluster_master_port": 80},
        ),
        id="master-port-80",
    ),
    pytest.param(
        BadInput(
            "cluster_master_port must be an integer between 1024 and 65535, got 70000.",
            {"cluster_master_port": 70000},
        ),
        id="master-port-70000",
    ),
    pytest.param(
        BadInput(
            "argument 'cluster_master_port' is of type str and we were unable to convert to int",
            {"cluster_master_port": "abc"},
        ),
        id="master-port-abc",
    ),
    pytest.param(
        BadInput(
            "torch 2.14.1 has no cu999 build: PyTorch 2.14 ships cu126, cu130, cu132, cpu",
            {"pytorch_cuda_variant": "cu999"},
        ),
        id="cuda-variant-cu999",
    ),
    pytest.param(
        BadInput(
            "torchvision 0.28.0 does not match torch 2.14.1: "
            "torch 2.14 is built with torchvision 0.29.x",
            {"pytorch_torch_version": "2.14.1", "pytorch_torchvision_version": "0.28.0"},
        ),
        id="torch-2.14.1-torchvision-0.28.0",
    ),
    pytest.param(
        BadInput(
            "pytorch_wheelhouse_dir {tmp}/no-wheelhouse is not an absolute path to an existing "
            "folder on the controller",
            {"pytorch_wheelhouse_dir": "{tmp}/no-wheelhouse"},
        ),
        id="wheelhouse-missing",
    ),
    pytest.param(
        BadInput(
            "pytorch_env_dir (relative/path), pytorch_node_wheelhouse_dir "
            "(/var/cache/pytorch-wheelhouse) and pytorch_conda_executable "
            "(/opt/miniconda3/bin/conda) must be absolute paths; one is not absolute.",
            {"pytorch_env_dir": "relative/path"},
        ),
        id="env-dir-relative",
    ),
    pytest.param(
        BadInput(
            "miniconda_prefix 'opt/miniconda3' is not absolute",
            {"miniconda_enabled": True, "miniconda_prefix": "opt/miniconda3"},
        ),
        id="miniconda-prefix-relative",
    ),
]


@dataclass(frozen=True)
class Rejection:
    message: str
    run: PlaybookRun


@pytest.fixture(scope="module", params=BAD_INPUTS)
def rejection(
    request: pytest.FixtureRequest, bare_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Rejection:
    """provision.yml run once per bad input, on the bare cluster."""
    bad_input: BadInput = request.param
    tmp = tmp_path_factory.mktemp("bad-input")
    values = {"node0": bare_cluster.members["node0"], "tmp": tmp}
    extra_vars = {
        name: value.format(**values) if isinstance(value, str) else value
        for name, value in bad_input.extra_vars.items()
    }
    inventory = None
    if bad_input.inventory:
        inventory = tmp / "inventory.yml"
        data = bad_input.inventory(copy.deepcopy(bare_cluster.inventory_data()))
        inventory.write_text(yaml.safe_dump(data))
    run = bare_cluster.provision(
        extra_vars, tmp / "extra-vars.json", *bad_input.args, inventory=inventory
    )
    return Rejection(bad_input.message.format(**values), run)


def test_preflight_fails_with_a_message_that_names_the_problem(rejection: Rejection) -> None:
    assert rejection.run.returncode != 0
    assert rejection.message in rejection.run.output


def test_preflight_fails_before_any_role_starts(rejection: Rejection) -> None:
    assert rejection.run.roles_started <= {"cluster"}


def test_preflight_fails_before_any_change(rejection: Rejection, bare_cluster: Cluster) -> None:
    assert "localhost" in rejection.run.changed
    assert set(rejection.run.changed.values()) == {0}
    assert bare_cluster.provisioned_traces() == {node: [] for node in bare_cluster.members}
