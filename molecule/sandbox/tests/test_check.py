"""playbooks/check.yml on the scenario's cluster: a healthy cluster passes with real figures;
each injected fault (a slow node, a blocked pair, a leftover process, a node without the
training environment) fails the check and is named; once undone, the check passes again."""

from __future__ import annotations

import json
import secrets
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from launcher import Outcome, Playbook
from sandbox_nodes import Node

# A full check on the 2-node sandbox must take at most this long.
FULL_CHECK_LIMIT_S = 60


def check(playbook: Playbook, tmp_path: Path, **extra: object) -> tuple[Outcome, dict]:
    """check.yml, and its report.json (empty when it stopped before writing one)."""
    runs = tmp_path / "runs"
    extra_vars = {
        "check_runs_dir": str(runs),
        "check_baseline_file": str(tmp_path / "baseline.json"),
    }
    outcome = playbook.run("check.yml", {**extra_vars, **extra})
    reports = sorted(runs.glob("check-*/report.json"))
    return outcome, json.loads(reports[-1].read_text()) if reports else {}


def test_a_healthy_cluster_passes_with_every_section_measured(
    playbook: Playbook, tmp_path: Path, members: list[Node], master_port: int
) -> None:
    outcome, report = check(playbook, tmp_path, check_save_baseline=True)
    assert outcome.rc == 0, outcome.output
    assert outcome.seconds < FULL_CHECK_LIMIT_S, f"the check took {outcome.seconds:.0f} s"
    assert "HEALTHY: every check passed." in outcome.output
    assert report["healthy"] is True
    names = [node.name for node in members]
    assert list(report["nodes"]) == names
    for name in names:
        row = report["nodes"][name]
        assert row["torch"].startswith("2.14.1")
        assert all(row[key] for key in ("cuda", "nccl", "python", "kernel", "os"))
        # Both NCCLs: torch's (its wheel's) and the system's (none: the sandbox has no nccl role).
        assert row["nccl"] == "2.30.7"
        assert row["system_nccl"] == "none"
        assert row["disk_free_gib"] > 0
        assert row["processes"] == row["units"] == []
    offsets = report["nodes"][names[0]]["clock_offsets"]
    assert set(offsets) == set(names[1:])
    assert all(abs(offset) < 1 for offset in offsets.values())
    attempts = [
        (name, a["peer"], a["port"], a["outcome"])
        for name, found in report["reachability"].items()
        for a in found
    ]
    assert all(outcome == "connected" for *_, outcome in attempts)
    assert (names[1], names[0], master_port, "connected") in attempts
    # The path toward every peer: its interface's MTU, crossed by a full-size don't-fragment
    # echo, from the node's own cluster address; no hostname on loopback.
    paths = report["paths"]
    mtus = {path["mtu"] for found in paths.values() for path in found["paths"].values()}
    assert len(mtus) == 1, paths
    for name, found in paths.items():
        assert set(found["paths"]) == set(names) - {name}
        assert all(p["df"] == "ok" and p["own_source"] for p in found["paths"].values()), found
        assert found["loopback_hostname"] == [], found
    group = report["collectives"]["group"]
    assert [row["size"] for row in group] == [65536, 1048576, 4194304]
    assert all(row["busbw"] > 0 and row["seconds"] > 0 for row in group)
    assert set(report["collectives"]["directions"]) == {
        f"{a} -> {b}" for a in names for b in names if a != b
    }
    assert (tmp_path / "baseline.json").exists()
    # The support bundle: each node's versions, the collectives' node logs, nccl-tests' layout.
    with tarfile.open(next((tmp_path / "runs").glob("check-*/bundle.tar.gz"))) as bundle:
        inside = set(bundle.getnames())
        perf = bundle.extractfile("all_reduce_perf.txt").read().decode()
    for name in names:
        assert {f"nodes/{name}/versions.json", f"nodes/{name}/collectives.log"} <= inside
    assert {"report.json", "report.md"} <= inside
    assert [line.split()[0] for line in perf.splitlines()[3:]] == ["65536", "1048576", "4194304"]
    markdown = next((tmp_path / "runs").glob("check-*/report.md")).read_text()
    assert "## Connections" in markdown
    # The shared folder: every node wrote there and read every node's file; figures per node.
    shared = report["shared"]
    assert shared["path"] == "/shared"
    assert shared["problems"] == []
    assert set(shared["writes"]) == set(names)
    for wrote in shared["writes"].values():
        assert wrote["ok"], wrote
        assert wrote["free_gib"] > 0
        assert wrote["write_mb_s"] > 0
        assert wrote["mount"]["mount_point"] == "/shared"
    assert "## Shared folder" in markdown
    user = members[0].setting("ssh_trust_user", "ssh_trust")
    assert f"  {names[1]}: fuse.sshfs {user}@{members[0].address}:" in outcome.output


def test_a_slow_node_is_named_from_the_pairwise_bandwidth(
    playbook: Playbook, tmp_path: Path, members: list[Node]
) -> None:
    victim = members[-1]
    with victim.throttled():
        # The shared folder's write measurement would take half a minute through the throttle.
        outcome, report = check(playbook, tmp_path, check_shared_write_mib=0)
    assert outcome.rc != 0
    assert f"{victim}: sends slowly to every peer" in outcome.output
    assert report["failures"][0]["subject"] == victim.name


def test_a_blocked_pair_is_named_with_its_port(
    playbook: Playbook, tmp_path: Path, members: list[Node], master_port: int
) -> None:
    master, other = members[0], members[1]
    # At runtime only: the master's zone stops trusting the other member; a reload undoes it.
    master.host.run_expect(
        [0], f"firewall-cmd --zone=torch-cluster --remove-source={other.address}"
    )
    try:
        outcome, report = check(playbook, tmp_path)
    finally:
        master.host.run_expect([0], "firewall-cmd --reload")
    assert outcome.rc != 0
    assert f"{other} -> {master}: port {master_port} blocked" in outcome.output
    assert {f["subject"] for f in report["failures"] if f["check"] == "reachability"} == {
        f"{other} -> {master}"
    }


def test_a_node_with_another_mtu_is_named_with_the_pairs_it_breaks(
    playbook: Playbook, tmp_path: Path, members: list[Node]
) -> None:
    master, victim = members[0], members[-1]
    with victim.mtu(1400):
        outcome, report = check(playbook, tmp_path, check_collectives=False)
    assert outcome.rc != 0
    network = [(f["subject"], f["value"]) for f in report["failures"] if f["check"] == "network"]
    assert (victim.name, "MTU 1400 on its training interface") in network, network
    mtu = report["paths"][master.name]["paths"][victim.name]["mtu"]
    lost = (f"{master} -> {victim}", f"a {mtu}-byte don't-fragment ping: no answer")
    assert lost in network, network
    line = f"{victim}: MTU 1400 on its training interface (limit: {mtu}, as on the other nodes)"
    assert line in outcome.output


def test_a_floor_above_what_the_sandbox_reaches_fails_and_is_named(
    playbook: Playbook, tmp_path: Path, members: list[Node]
) -> None:
    """No baseline, and a cluster alike everywhere: the relative rules pass it; floors from
    the inventory (a pair's all_reduce, and with two ranks per node, each node's all_reduce
    over its ranks) name every figure below them."""
    floors = [
        {"name": "above the sandbox", "pair_busbw_gbs": 1000},
        {"name": "inside the sandbox's nodes", "node_allreduce_busbw_gbs": 1000},
        {"name": "below the sandbox", "pair_busbw_gbs": 0.0001},
    ]
    outcome, report = check(playbook, tmp_path, check_floors=floors, nproc=2)
    assert outcome.rc != 0
    found = [f for f in report["failures"] if f["check"] == "floors"]
    names = [node.name for node in members]
    pairs = [f"{a} <-> {b}" for i, a in enumerate(names) for b in names[i + 1 :]]
    assert sorted(f["subject"] for f in found) == sorted([*pairs, *names]), found
    assert {f["check"] for f in report["failures"]} == {"floors"}, report["failures"]
    assert all("1000 GB/s, the floor '" in f["limit"] for f in found)
    assert set(report["collectives"]["inside_nodes"]) == set(names)
    line = f"[floors] {pairs[0]}: all_reduce busbw between two nodes (one rank each: one NIC)"
    assert line in outcome.output
    assert "(limit: 1000 GB/s, the floor 'above the sandbox')" in outcome.output


def test_a_malformed_floor_is_refused_before_anything_runs(
    playbook: Playbook, tmp_path: Path
) -> None:
    outcome, report = check(playbook, tmp_path, check_floors=[{"name": "x", "pair_bw": 5}])
    assert outcome.rc != 0
    assert "check_floors[0] has unknown keys pair_bw" in outcome.output
    assert report == {}
    assert "Read every node" not in outcome.output


@pytest.fixture
def leftover(members: list[Node]) -> Iterator[tuple[Node, str]]:
    """A training process of an old job, left running on the last member."""
    node, unit = members[-1], f"leftover-{secrets.token_hex(4)}"
    node.host.run_expect(
        [0],
        f"systemd-run --unit={unit} --setenv=TORCH_JOB_ID=old-job "
        "python3 -c 'import time; time.sleep(600)'",
    )
    yield node, unit
    node.host.run(f"systemctl stop {unit}")


def test_a_leftover_training_process_is_named(
    playbook: Playbook, tmp_path: Path, leftover: tuple[Node, str]
) -> None:
    node, _ = leftover
    outcome, report = check(playbook, tmp_path)
    assert outcome.rc != 0
    assert f"{node}: training process left:" in outcome.output
    assert "(job old-job)" in outcome.output
    assert [f["subject"] for f in report["failures"] if f["check"] == "leftovers"] == [node.name]


def test_a_node_without_the_training_environment_is_named_and_the_rest_still_checked(
    playbook: Playbook, tmp_path: Path, members: list[Node], outsider: Node
) -> None:
    overlay = tmp_path / "groups.yml"
    hosts = {members[0].name: None, outsider.name: None}
    overlay.write_text(yaml.safe_dump({"all": {"children": {"trainers": {"hosts": hosts}}}}))
    runs = tmp_path / "runs"
    outcome = playbook.run(
        "check.yml",
        {"check_runs_dir": str(runs), "cluster_group": "trainers"},
        inventories=(overlay,),
    )
    assert outcome.rc != 0
    assert f"{outsider}: no training environment" in outcome.output
    report = json.loads(next(runs.glob("check-*/report.json")).read_text())
    assert report["nodes"][members[0].name]["torch"].startswith("2.14.1")
    assert report["nodes"][outsider.name]["kernel"]
    assert set(report["reachability"]) == {members[0].name, outsider.name}
    assert "the whole group: not run:" in outcome.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"check_fraction_of_median": 1.5},
            "check_fraction_of_median must be a number between 0 and 1",
        ),
        (
            {"check_message_sizes": [1024, 0]},
            "check_message_sizes must be a list of positive sizes",
        ),
        ({"cluster_group": "nobody"}, "The training group 'nobody' is missing from the inventory"),
    ],
    ids=["fraction-1.5", "size-0", "unknown-group"],
)
def test_bad_input_is_refused_before_anything_runs(
    playbook: Playbook, tmp_path: Path, extra: dict, message: str
) -> None:
    outcome, report = check(playbook, tmp_path, **extra)
    assert outcome.rc != 0
    assert message in outcome.output
    assert report == {}
    assert "Read every node" not in outcome.output


def test_with_every_fault_undone_the_check_passes_again(playbook: Playbook, tmp_path: Path) -> None:
    outcome, report = check(playbook, tmp_path)
    assert outcome.rc == 0, outcome.output
    assert report["healthy"] is True


def test_train_check_launches_nothing_on_a_cluster_that_fails_the_quick_check(
    playbook: Playbook, tmp_path: Path, members: list[Node], leftover: tuple[Node, str]
) -> None:
    node, _ = leftover
    job = f"checked-{secrets.token_hex(4)}"
    outcome = playbook.run(
        "train.yml", {"job_id": job, "train_check": True, "check_runs_dir": str(tmp_path)}
    )
    assert outcome.rc != 0
    assert f"{node}: training process left:" in outcome.output
    # The quick part only: no collectives job.
    report = json.loads(next(tmp_path.glob("check-*/report.json")).read_text())
    assert report["collectives"] == {}
    for member in members:
        assert not member.host.file(f"/var/lib/torch-cluster/jobs/{job}").exists
