"""The plan of an attempt (plugins/module_utils/job/attempt_plan.py, the torch_job_plan action):
its nodes in rank order, the master, each node's node_rank, and the nodes that get the code and
the data."""

from __future__ import annotations

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempt_plan import (
    MIB,
    common_count,
    plan_attempt,
    start_nodes,
)

NODES = {"node0": "10.0.0.1", "node1": "10.0.0.2", "node2": "10.0.0.3", "node3": "10.0.0.4"}


def checked(code: bool = True, data: bool = True, nproc: int = 2, gpus: int = 8) -> dict:
    return {"code_current": code, "data_current": data, "nproc": nproc, "gpus": gpus}


def test_the_first_attempt_runs_on_the_group_in_inventory_order_and_the_first_is_the_master():
    plan = plan_attempt(NODES, []).as_dict()
    assert plan["names"] == ["node0", "node1", "node2", "node3"]
    assert (plan["master"], plan["master_address"]) == ("node0", "10.0.0.1")
    assert plan["ranks"] == {"node0": 0, "node1": 1, "node2": 2, "node3": 3}
    assert list(plan["addresses"].items()) == list(NODES.items())
    assert (plan["attempt"], plan["resumes"]) == (1, False)


def test_the_spares_are_left_out_of_the_first_attempt_in_inventory_order():
    plan = plan_attempt(NODES, ["node3", "node0", "elsewhere"])
    assert plan.spares == ["node0", "node3"]
    assert plan.start_names == plan.names == ["node1", "node2"]
    assert (plan.master, plan.ranks) == ("node1", {"node1": 0, "node2": 1})


def test_the_next_attempt_runs_on_the_nodes_the_record_named_with_a_new_master():
    plan = plan_attempt(NODES, ["node3"], attempt=2, next_nodes=["node1", "node3"]).as_dict()
    assert plan["names"] == ["node1", "node3"]
    assert (plan["master"], plan["master_address"]) == ("node1", "10.0.0.2")
    assert plan["ranks"] == {"node1": 0, "node3": 1}
    assert plan["start_names"] == ["node0", "node1", "node2"]
    assert (plan["attempt"], plan["resumes"]) == (2, True)


def test_a_node_outside_the_training_group_is_refused():
    with pytest.raises(
        ValueError, match=r"node9 not in train_nodes \(node0, node1, node2, node3\)"
    ):
        plan_attempt(NODES, [], next_nodes=["node0", "node9"])


def test_train_resume_resumes_the_first_attempt_too():
    assert plan_attempt(NODES, [], resume=True).resumes


def test_before_the_nodes_are_checked_no_node_is_staged_and_nothing_is_counted():
    plan = plan_attempt(NODES, [], hosts=list(NODES), code_bytes=100 * MIB)
    assert (plan.code_hosts, plan.data_hosts, plan.code_spreads) == ([], [], False)
    assert (plan.world_size, plan.gpus_per_node) == (0, 0)


def test_only_the_running_nodes_that_lack_the_code_or_the_data_get_them_the_spares_last():
    checks = {
        "node0": checked(code=False, data=False),  # a spare, first in the inventory
        "node1": checked(code=False, data=True),
        "node2": checked(code=True, data=False),
        "node3": checked(code=False, data=False),
    }
    plan = plan_attempt(NODES, ["node0"], checks=checks, hosts=["node0", "node2", "node3", "node1"])
    # The job's nodes in rank order, then the spare: it may take a lost node's place.
    assert plan.code_hosts == ["node1", "node3", "node0"]
    assert plan.data_hosts == ["node2", "node3", "node0"]
    # A node the play no longer runs on (it failed its checks) is not staged.
    lost = plan_attempt(NODES, ["node0"], checks=checks, hosts=["node2", "node3"])
    assert (lost.code_hosts, lost.data_hosts) == (["node3"], ["node2", "node3"])


@pytest.mark.parametrize(
    ("lacking", "size", "spreads"),
    [
        (["node1", "node2"], 32 * MIB, True),
        (["node1", "node2"], 32 * MIB - 1, False),  # small code goes to each node at once
        (["node2"], 500 * MIB, False),  # one node to send it to
        ([], 500 * MIB, False),
    ],
)
def test_large_code_new_to_more_than_one_node_goes_from_node_to_node(
    lacking: list[str], size: int, spreads: bool
):
    checks = {name: checked(code=name not in lacking) for name in NODES}
    plan = plan_attempt(NODES, [], checks=checks, hosts=list(NODES), code_bytes=size)
    assert (plan.code_hosts, plan.code_spreads) == (lacking, spreads)


def test_the_world_size_and_the_gpus_per_node_count_the_attempts_nodes_only():
    checks = {
        "node0": checked(nproc=4, gpus=4),
        "node1": checked(nproc=2, gpus=2),
        "node2": checked(nproc=2, gpus=2),
        "node3": checked(nproc=8, gpus=8),
    }
    plan = plan_attempt(NODES, [], attempt=2, next_nodes=["node1", "node2"], checks=checks)
    assert (plan.world_size, plan.gpus_per_node) == (4, 2)
    whole = plan_attempt(NODES, [], checks=checks)
    assert (whole.world_size, whole.gpus_per_node) == (16, 0)  # the GPU counts differ


@pytest.mark.parametrize(
    ("counts", "common"), [([8, 8, 8], 8), ([4, 2], 0), ([0, 0], 0), ([], 0), ([2], 2)]
)
def test_the_common_gpu_count_is_zero_when_the_nodes_differ(counts: list[int], common: int):
    assert common_count(counts) == common


def test_the_group_splits_into_the_nodes_the_job_starts_on_and_the_spares():
    assert start_nodes(["a", "b", "c"], ["c", "x"]) == (["a", "b"], ["c"])
    assert start_nodes(["a", "b"], []) == (["a", "b"], [])
