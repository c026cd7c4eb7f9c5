"""The health check's judgements (plugins/module_utils/health/findings.py, shared_folder.py,
limits.py, collectives.py, report.py), table by table.
"""

from __future__ import annotations

import itertools

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.collectives import (
    bandwidth_findings,
    collective_figures,
    nccl_transport,
    round_robin,
    slow_nodes,
    transport_findings,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.findings import (
    clock_findings,
    disk_findings,
    environment_findings,
    gpu_findings,
    leftover_findings,
    reach_findings,
    version_findings,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.inputs import (
    check_input_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.shared_folder import (
    shared_findings,
    shared_lines,
)

NODE = {"torch": "2.14.1+cu130", "cuda": "13.0", "nccl": "2.27.7", "python": "3.11.2"}


def test_every_pair_meets_once_in_rounds_of_disjoint_pairs() -> None:
    for count in range(2, 12):
        names = [f"n{i}" for i in range(count)]
        rounds = round_robin(names)
        assert len(rounds) == (count - 1 if count % 2 == 0 else count)
        pairs = [frozenset(pair) for pairs in rounds for pair in pairs]
        assert sorted(map(sorted, pairs)) == sorted(map(sorted, itertools.combinations(names, 2)))
        for pairs in rounds:
            members = [node for pair in pairs for node in pair]
            assert len(members) == len(set(members)), "a node twice in one round"


def test_the_odd_build_is_named_and_the_majority_is_the_limit() -> None:
    rows = {"n0": NODE, "n1": NODE, "n2": {**NODE, "torch": "2.13.0+cu128", "cuda": "12.8"}}
    findings = version_findings(rows)
    assert [(f.subject, f.value, f.limit) for f in findings] == [
        ("n2", "torch 2.13.0+cu128", "torch 2.14.1+cu130 as on the others"),
        ("n2", "cuda 12.8", "cuda 13.0 as on the others"),
    ]


def test_a_tie_names_every_node() -> None:
    findings = version_findings({"n0": NODE, "n1": {**NODE, "nccl": "2.21.5"}})
    assert {f.subject for f in findings} == {"n0", "n1"}


def test_a_node_without_its_environment_is_named_and_left_out_of_the_versions() -> None:
    rows = {"n0": NODE, "n1": {"torch_error": "no training environment (fact is missing)"}}
    (finding,) = environment_findings(rows)
    assert finding.line().startswith("n1: no training environment (fact is missing)")
    assert version_findings(rows) == []


@pytest.mark.parametrize(
    ("row", "nproc", "words"),
    [
        ({"driver_gpus": 8, "torch_gpus": 6}, "auto", "torch sees 6 of 8 GPUs"),
        ({"driver_gpus": 4, "torch_gpus": 4}, "6", "nproc 6"),
        ({"driver_gpus": 4, "torch_gpus": 4, "ecc_uncorrected": 2}, "auto", "2 uncorrectable ECC"),
        ({"driver_gpus": 4, "torch_gpus": 4, "remaps_pending": 1}, "auto", "1 pending row remaps"),
    ],
)
def test_gpu_problems_fail_the_node(row: dict, nproc: str, words: str) -> None:
    (finding,) = gpu_findings({"n1": {**NODE, **row}}, {"n1": nproc})
    assert finding.subject == "n1"
    assert words in finding.value


def test_a_node_without_gpus_has_no_gpu_problems() -> None:
    assert gpu_findings({"n0": {**NODE, "driver_gpus": 0, "torch_gpus": 0}}, {"n0": "1"}) == []


def test_a_blocked_pair_is_named_with_its_port_and_the_fix() -> None:
    attempts = {
        "n0": [{"peer": "n1", "port": 47000, "outcome": "connected"}],
        "n1": [{"peer": "n0", "port": 10086, "outcome": "no route to host (rejected)"}],
    }
    (finding,) = reach_findings(attempts)
    assert finding.line().startswith("n1 -> n0: port 10086 blocked (no route to host (rejected))")
    assert "provision.yml" in finding.fix


@pytest.mark.parametrize(("offset", "failing"), [(0.2, False), (-1.5, True), (None, True)])
def test_a_clock_too_far_from_the_masters_fails(offset: float | None, failing: bool) -> None:
    assert bool(clock_findings({"n1": offset}, "n0", 1.0)) is failing


def test_leftovers_are_named_with_how_to_stop_them() -> None:
    row = {
        "units": ["torch-job-old.service"],
        "processes": ["77 (job old) python3 -u train.py"],
        "port_users": ["88 nc -l 10086"],
    }
    findings = leftover_findings({"n0": row}, 10086)
    assert [f.value for f in findings] == [
        "job unit torch-job-old.service still active",
        "training process left: 77 (job old) python3 -u train.py",
        "master port 10086 in use by 88 nc -l 10086",
    ]
    assert findings[0].fix == "ansible-playbook playbooks/stop.yml -e job_id=old"


def test_too_little_disk_fails() -> None:
    rows = {"n0": {"disk_free_gib": 3.0, "disk_path": "/var"}, "n1": {"disk_free_gib": 50.0}}
    assert [f.subject for f in disk_findings(rows, 10)] == ["n0"]


SHARED_MOUNT = {"mount_point": "/shared", "fstype": "nfs4", "source": "nfs1:/jobs", "root": "/"}


def test_the_shared_folder_names_a_node_without_it_and_a_full_folder() -> None:
    writes = {
        "n0": {"ok": True, "mount": SHARED_MOUNT, "free_gib": 3.5, "write_mb_s": 412.0},
        "n1": {"ok": True, "mount": {**SHARED_MOUNT, "fstype": "ext4"}, "free_gib": 80.0},
    }
    problems = [{"node": "n1", "problem": "sees another filesystem at /shared"}]
    shared = {"path": "/shared", "writes": writes, "problems": problems}
    findings = shared_findings(shared, 10)
    assert [(f.check, f.subject) for f in findings] == [
        ("shared folder", "n1"),
        ("shared folder", "/shared"),
    ]
    assert findings[1].value == "3.5 GiB free"
    lines = shared_lines(shared)
    assert lines[0] == "Shared folder /shared:"
    assert lines[1] == "  n0: nfs4 nfs1:/jobs at /shared, 3.5 GiB free, write 412.0 MB/s"
    assert lines[2].endswith("80.0 GiB free, write not measured")
    assert shared_findings({"path": "/shared", "writes": writes, "problems": []}, 1) == []
    assert shared_lines({}) == []


def test_nccl_over_sockets_where_rdma_nics_exist_fails() -> None:
    log = "NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    transport = nccl_transport(log)
    assert transport == "Socket"
    rows = {"n0": {"rdma_nics": ["mlx5_0"]}, "n1": {"rdma_nics": []}}
    assert [f.subject for f in transport_findings(rows, {"n0": transport, "n1": transport})] == [
        "n0"
    ]
    assert nccl_transport("via NET/IB/0") == "IB"
    assert nccl_transport("gloo only") == ""


MB = 1e6


def test_a_slow_sender_among_three_is_named_from_its_directions() -> None:
    directions = {
        "n0 -> n1": 900 * MB, "n1 -> n0": 2.5 * MB, "n0 -> n2": 880 * MB,
        "n2 -> n0": 910 * MB, "n1 -> n2": 2.4 * MB, "n2 -> n1": 890 * MB,
    }  # fmt: skip
    slow = bandwidth_findings(directions, {}, 0.8, 0.5, "one way")
    assert {f.subject for f in slow} == {"n1 -> n0", "n1 -> n2"}
    (node,) = slow_nodes(slow, ["n0", "n1", "n2"])
    assert node.subject == "n1"
    assert node.value.startswith("sends slowly to every peer: n1 -> n0: one way 2.5 MB/s")


def test_with_two_nodes_the_slow_sender_is_named_and_the_doubt_said() -> None:
    slow = bandwidth_findings({"n0 -> n1": 900 * MB, "n1 -> n0": 2.5 * MB}, {}, 0.8, 0.5, "one way")
    (node,) = slow_nodes(slow, ["n0", "n1"])
    assert node.subject == "n1"
    assert "or n0 receives slowly: with two nodes the check cannot tell which" in node.value


def test_a_baseline_sets_the_limit_when_there_is_one() -> None:
    measured = {"n0 <-> n1": 500 * MB}
    assert bandwidth_findings(measured, {}, 0.8, 0.5, "busbw") == []
    (finding,) = bandwidth_findings(measured, {"n0 <-> n1": 1000 * MB}, 0.8, 0.5, "busbw")
    assert finding.limit == "800.0 MB/s, 80% of the baseline"


def test_the_collectives_report_is_read_by_node_name() -> None:
    report = {
        "group": [{"size": 4, "seconds": 1.0, "algbw": 4.0, "busbw": 4.0}],
        "pairs": {"0-1": {"sweep": [{"busbw": 7.0}], "forward": 5.0, "backward": 6.0}},
    }
    figures = collective_figures(report, ["n0", "n1"])
    assert figures["pairs"] == {"n0 <-> n1": 7.0}
    assert figures["directions"] == {"n0 -> n1": 5.0, "n1 -> n0": 6.0}


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        (
            {"check_fraction_of_baseline": 1.5},
            "check_fraction_of_baseline must be a number between 0 and 1",
        ),
        (
            {"check_fraction_of_median": "half"},
            "check_fraction_of_median must be a number between 0 and 1",
        ),
        (
            {"check_message_sizes": [1024, -5]},
            "check_message_sizes must be a list of positive sizes",
        ),
        ({"check_message_sizes": "1024"}, "check_message_sizes must be a list of positive sizes"),
        ({"check_min_free_gib": -1}, "check_min_free_gib must be a number of GiB"),
        ({"check_shared_write_mib": "lots"}, "check_shared_write_mib must be a whole number"),
        ({"check_min_memlock": "8MB"}, "check_min_memlock must be empty, infinity, or bytes"),
        ({"check_min_nofile": -1}, "check_min_nofile must be a whole number"),
    ],
)
def test_bad_check_inputs_are_named(inputs: dict, words: str) -> None:
    good = {
        "check_fraction_of_baseline": 0.8,
        "check_fraction_of_median": 0.5,
        "check_message_sizes": [65536, 1048576],
        "check_min_free_gib": 10,
        "check_shared_write_mib": 64,
        "check_min_memlock": "",
        "check_min_nofile": 0,
    }
    assert check_input_problems(good) == []
    (problem,) = check_input_problems({**good, **inputs})
    assert words in problem
