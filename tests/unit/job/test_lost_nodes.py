"""A job that loses nodes: which nodes run the next attempt, and what the user reads."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempts import Attempt
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.failures import RankFailure
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.inputs import input_problems
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.lost_nodes import (
    NodePlan,
    excluded_nodes,
    lost_nodes,
    plan_nodes,
    resumed_from,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.messages import (
    describe_attempt,
    final_message,
    restart_message,
    success_message,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.restarts import (
    decide_restart,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.slurm import (
    SLURM_CONTROLLER,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    UNREACHABLE,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.watch import (
    JOB_FAILED,
    JOB_STALLED,
    JOB_SUCCEEDED,
    JOB_UNWATCHABLE,
)

THREE = ["node0", "node1", "node2"]


def plan(
    current: list[str] = THREE,
    lost: dict[str, str] | None = None,
    *,
    spares: tuple[str, ...] = (),
    excluded: tuple[str, ...] = (),
    job_size: int = 3,
    min_nodes: int = 0,
) -> NodePlan:
    return plan_nodes(
        current,
        lost if lost is not None else {"node2": "stopped answering"},
        spares=list(spares),
        excluded=list(excluded),
        job_size=job_size,
        min_nodes=min_nodes,
    )


def test_nothing_lost_keeps_the_nodes() -> None:
    assert plan(lost={}) == NodePlan(THREE)


def test_a_lost_worker_leaves_and_the_rest_keep_their_order() -> None:
    found = plan(min_nodes=2)
    assert found.nodes == ["node0", "node1"]
    assert found.left == {"node2": "stopped answering"}
    assert found.why_not == ""


def test_a_lost_master_makes_the_first_node_left_the_master() -> None:
    found = plan(lost={"node0": "stopped answering"}, min_nodes=2)
    assert found.nodes == ["node1", "node2"]


def test_a_spare_takes_the_lost_nodes_place_and_rank() -> None:
    found = plan(
        ["node0", "node1"], {"node0": "stopped answering"}, spares=("node3", "node4"), job_size=2
    )
    assert found.nodes == ["node3", "node1"]
    assert found.replaced == {"node0": "node3"}


def test_a_spare_that_left_or_runs_already_is_not_used_again() -> None:
    found = plan(
        ["node0", "node3"],
        {"node0": "stopped answering"},
        spares=("node3", "node4", "node5"),
        excluded=("node4",),
        job_size=2,
    )
    assert found.nodes == ["node5", "node3"]


def test_spares_first_then_fewer_nodes_when_train_min_nodes_allows() -> None:
    lost = {"node0": "stopped answering", "node1": "stopped answering"}
    found = plan(lost=lost, spares=("node3",), min_nodes=2)
    assert found.nodes == ["node3", "node2"]
    assert found.replaced == {"node0": "node3"}


def test_without_train_min_nodes_the_job_does_not_go_on_with_fewer_nodes() -> None:
    found = plan()
    assert found.nodes == []
    assert found.why_not.startswith(
        "node2 stopped answering: the job does not restart on fewer nodes than its 3"
    )
    assert "set train_min_nodes" in found.why_not


def test_fewer_nodes_than_train_min_nodes_stops_the_job_and_says_so() -> None:
    lost = {"node1": "stopped answering", "node2": "failed on hardware: XID 79 on PCI:0000:3b:00"}
    found = plan(lost=lost, spares=("node3",), excluded=("node3",), min_nodes=2)
    assert found.nodes == []
    assert found.why_not == (
        "node1 stopped answering; node2 failed on hardware: XID 79 on PCI:0000:3b:00: 1 node(s) "
        "would be left, and no spare is left in train_spare_group (node3), fewer than "
        "train_min_nodes=2"
    )


def test_a_lost_node_that_no_attempt_starts_without_stops_the_job_and_says_why() -> None:
    plan = plan_nodes(
        THREE, {"node0": "stopped answering"}, spares=[], excluded=[], job_size=3, min_nodes=1,
        indispensable={"node0": SLURM_CONTROLLER},
    )  # fmt: skip
    assert plan.nodes == []
    assert plan.why_not == (
        "node0 stopped answering: it runs Slurm's controller (slurmctld), and no attempt "
        "starts without it"
    )
    # Another node lost: the controller is no matter.
    plan = plan_nodes(
        THREE, {"node2": "stopped answering"}, spares=[], excluded=[], job_size=3, min_nodes=2,
        indispensable={"node0": SLURM_CONTROLLER},
    )  # fmt: skip
    assert plan.nodes == ["node0", "node1"]


def test_lost_nodes_name_no_answer_before_hardware() -> None:
    lost = lost_nodes(
        THREE, ["node2"], {"node1": ["nvidia-smi cannot read its GPUs"], "node2": ["x"]}
    )
    assert lost == {
        "node1": "failed on hardware: nvidia-smi cannot read its GPUs",
        "node2": "stopped answering",
    }


def test_the_nodes_that_left_earlier_attempts_are_excluded() -> None:
    recorded = [{"left": {"node2": "stopped answering"}}, {"left": {}}, {"left": {"node0": "x"}}]
    assert excluded_nodes(recorded) == ["node2", "node0"]


@pytest.mark.parametrize(
    ("sync", "shared", "expected"),
    [
        ({}, "/shared", "the shared folder /shared"),
        (
            {"transfers": [{"from": "node2", "to": "node0", "files": 2}]},
            "",
            "the newest copies, fetched by node0 from node2",
        ),
        (
            {"transfers": [{"from": "node0", "to": "node2", "files": 2}]},
            "",
            "node0's own output folder",
        ),
        (
            {"transfers": [{"from": "node2", "to": "node0", "files": 2, "error": "rsync"}]},
            "",
            "node0's own output folder",
        ),
    ],
)
def test_where_an_attempt_resumed_from(sync: dict, shared: str, expected: str) -> None:
    assert resumed_from(sync, "node0", shared) == expected


def lost_attempt(**changes: Any) -> Attempt:
    values: dict[str, Any] = {
        "number": 1,
        "outcome": JOB_FAILED,
        "nodes": {"node2": {"state": UNREACHABLE, "detail": "no answer within 8 s"}},
        "failed_nodes": ["node2"],
        "unreachable_nodes": ["node2"],
        "training_started": True,
        "seconds": 30.0,
        "nodes_used": THREE,
        "left": {"node2": "stopped answering"},
        "next_nodes": ["node0", "node1"],
        "failures": [
            RankFailure("node2", -1, -1, 0, 0.0, "unreachable (no answer within 8 s)").as_dict()
        ],
    }
    values.update(changes)
    return Attempt(**values)


def test_a_job_that_can_go_on_without_its_lost_node_restarts() -> None:
    assert decide_restart(lost_attempt(), 1, 300, lost_why_not="") is None


def test_a_lost_node_at_start_up_is_no_start_up_failure_of_the_script() -> None:
    attempt = lost_attempt(training_started=False)
    assert decide_restart(attempt, 1, 300, lost_why_not="") is None


def test_a_lost_master_restarts_although_it_could_not_be_watched() -> None:
    attempt = lost_attempt(outcome=JOB_UNWATCHABLE, unreachable_nodes=["node0"])
    assert decide_restart(attempt, 1, 300, lost_why_not="") is None
    unwatched = lost_attempt(outcome=JOB_UNWATCHABLE, unreachable_nodes=[], left={})
    assert decide_restart(unwatched, 1, 300) == "the master could not be watched"


def test_no_restarts_left_wins_over_a_viable_node_plan() -> None:
    assert decide_restart(lost_attempt(number=2), 1, 300, lost_why_not="") == (
        "it has restarted 1 time(s) already (train_max_restarts=1)"
    )
    assert decide_restart(lost_attempt(), 0, 300, lost_why_not="") == "train_max_restarts is 0"


def test_the_plans_reason_is_why_the_job_stops() -> None:
    assert decide_restart(lost_attempt(), 1, 300, lost_why_not="too few") == "too few"


def test_the_restart_message_names_who_left_who_replaced_it_and_the_new_master() -> None:
    attempt = lost_attempt(
        unreachable_nodes=["node0"],
        left={"node0": "stopped answering"},
        replaced={"node0": "node3"},
        next_nodes=["node3", "node1", "node2"],
    )
    message = restart_message("j", attempt, 2)
    assert "node0 left the job (stopped answering); the spare node3 takes its place." in message
    assert (
        "The next attempt runs on node3, node1, node2 (3 of 3 node(s), master node3 (a new "
        "master)); node0 will not be used again in this job." in message
    )
    assert message.endswith("Restarting the job from the newest checkpoint copy (restart 1 of 2).")


def test_a_stalled_attempt_is_described_by_where_its_ranks_were() -> None:
    stall = {
        "timeout": 20,
        "quiet_for": 21.5,
        "summary": "rank 3 is elsewhere (time.sleep)",
        "folder": "/runs/j/stall-1",
    }
    attempt = lost_attempt(outcome=JOB_STALLED, left={}, unreachable_nodes=[], stall=stall)
    assert describe_attempt(attempt) == (
        "attempt 1: stalled after 30 s: rank 3 is elsewhere (time.sleep)"
    )
    attempt.not_restarted_because = "train_max_restarts is 0"
    message = final_message(
        "j", [attempt], run_dir="/runs/j", timeout=0, max_restarts=0, stop_hint="stop"
    )
    assert message.startswith("Job j stalled; it is stopped on every node.")
    assert "Rank 0 printed nothing for 22 s (train_stall_timeout=20)" in message
    assert "Where the ranks were: rank 3 is elsewhere (time.sleep)" in message
    assert "/runs/j/stall-1/" in message


def test_a_lost_master_that_is_not_replaced_says_why_and_that_its_fence_stops_it() -> None:
    attempt = lost_attempt(
        outcome=JOB_UNWATCHABLE, unreachable_nodes=["node0"], left={"node0": "stopped answering"},
        error="the master did not answer for 9.0 s", fence_until=1e9,
        not_restarted_because="node0 stopped answering: it runs Slurm's controller (slurmctld), "
        "and no attempt starts without it",
    )  # fmt: skip
    message = final_message(
        "j", [attempt], run_dir="/runs/j", timeout=0, max_restarts=1, stop_hint="stop.yml"
    )
    assert message.startswith("Job j could not be watched; it is stopped on every node that")
    assert (
        "Not restarted: node0 stopped answering: it runs Slurm's controller (slurmctld), and no "
        "attempt starts without it." in message
    )
    assert "its fence kills them once nobody has watched them for train_fence_timeout" in message
    # Without a fence (train_fence_timeout=0) they run on until their collectives time out.
    attempt.fence_until = 0.0
    message = final_message(
        "j", [attempt], run_dir="/runs/j", timeout=0, max_restarts=1, stop_hint="stop.yml"
    )
    assert "They end at the trainer's collective timeout" in message


def test_a_stalled_attempt_with_restarts_left_restarts() -> None:
    attempt = lost_attempt(outcome=JOB_STALLED, left={}, unreachable_nodes=[])
    assert decide_restart(attempt, 1, 300) is None


@pytest.mark.parametrize(
    ("inputs", "problem"),
    [
        (
            {"train_min_nodes": "4"},
            "train_min_nodes (4) is more than the 3 node(s) the job starts on",
        ),
        ({"train_min_nodes": "-1"}, "train_min_nodes must be a whole number"),
        (
            {"train_spare_group": "spares", "spare_hosts": None},
            "train_spare_group names 'spares', which is not a group of the inventory",
        ),
        (
            {"train_spare_group": "spares", "spare_hosts": ["node9"]},
            "the spares node9 of train_spare_group 'spares' are not in the training group",
        ),
        (
            {"train_spare_group": "spares", "spare_hosts": ["node2"], "train_min_nodes": "3"},
            "train_min_nodes (3) is more than the 2 node(s) the job starts on",
        ),
        (
            {"train_spare_group": "s", "spare_hosts": THREE},
            "every node of the training group is a spare",
        ),
        ({"train_stall_timeout": "soon"}, "train_stall_timeout must be a whole number"),
        ({"train_limit_nofile": "0"}, "train_limit_nofile must be a whole number, 1 or more"),
    ],
)
def test_bad_node_loss_inputs_are_refused(inputs: dict, problem: str) -> None:
    problems = input_problems({"nodes": THREE, "hosts": THREE, **inputs})
    assert any(found.startswith(problem) for found in problems), problems


@pytest.mark.parametrize("launcher", ["systemd", "slurm"])
def test_good_node_loss_inputs_pass_with_either_launcher(launcher: str) -> None:
    inputs = {
        "nodes": THREE,
        "hosts": THREE,
        "train_min_nodes": "1",
        "train_spare_group": "spares",
        "spare_hosts": ["node2"],
        "train_stall_timeout": "600",
        "train_limit_nofile": "65536",
        "train_launcher": launcher,
    }
    assert input_problems(inputs) == []


def test_a_job_that_went_on_says_where_its_last_attempt_ran_and_resumed_from() -> None:
    first = lost_attempt(restarted=True)
    last = Attempt(
        number=2,
        outcome=JOB_SUCCEEDED,
        nodes_used=["node0", "node1"],
        resumed_from="the shared folder /shared",
    )
    assert success_message("j", [first, last]) == (
        "Job j succeeded after 1 restart(s): attempt 2 ran on node0, node1, resumed from the "
        "shared folder /shared."
    )
    assert success_message("j", [last]) == "Job j succeeded."
