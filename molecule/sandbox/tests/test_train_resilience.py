"""Jobs that survive a stall, a lost node, a lost master; spares; and the limit of all that.

The module adds the scenario's extra node (node2) to the training group through a second
inventory and provisions it once, so that the jobs here run on three nodes (or on two with a
spare). Its last test makes the three nodes a Slurm cluster, and loses a node of a job there.
Faults are real: a node is taken off the network, the master's container is stopped, and one
rank of a script sleeps outside the all_reduce that the others wait in.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from launcher import (
    JOB_PROCESSES_SCRIPT,
    PROJECT_DIR,
    Job,
    Outcome,
    Playbook,
    attempts,
    job_vars,
    metrics,
)
from sandbox_nodes import Node
from slurm_queue import accounting, settled

SCRIPTS = Path(__file__).parent / "scripts"
EXAMPLES = PROJECT_DIR / "train" / "examples"
# Long enough on the sandbox (about 2 s an epoch on three nodes) that a fault lands mid-run.
JOB = ["--epochs", "10", "--model", "cnn", "--batch-size", "16", "--log-interval", "0"]
STALL_TIMEOUT = 20
# From a node's loss to rank 0's next line on the rest: the issue's 20 s, and this 2-core
# machine's noise (three nodes training on it) on top.
BACK_IN_S, NOISE_S = 20, 5
FENCED = "fenced itself: its watcher"


def fenced(job: Job, node: Node) -> None:
    """The node's part of the job stopped by itself, without stop.yml, and its log says why."""
    assert job.processes(node) == [], job.processes(node)
    assert FENCED in job.log(node), job.log(node)[-2000:]


@pytest.fixture(scope="module")
def three_nodes(
    inventory_file: Path, members: list[Node], extra_node: Node, tmp_path_factory
) -> dict[str, Path]:
    """Inventories that add the extra node to the training group: "all" (node0, node1, node2;
    node2 stays in extra_nodes, which a test names as the spare group), "master_last" (a group
    node1_first of node1, node0, node2: the master is not the shared folder's server). The
    extra node is provisioned with them once."""
    folder = tmp_path_factory.mktemp("inventories")
    names = [node.name for node in members]
    extra = extra_node.name
    master_last = [names[1], names[0], extra]
    inventories = {
        "all": {"gpu_nodes": {"hosts": {extra: {}}}},
        "master_last": {"node1_first": {"hosts": {name: {} for name in master_last}}},
    }
    paths = {}
    for name, content in inventories.items():
        paths[name] = folder / f"{name}.yml"
        paths[name].write_text(yaml.safe_dump(content, sort_keys=False))
    provision = Playbook(inventory_file, folder / "runs")
    # The extra node has no torch yet: from the controller's wheelhouse, as converge.yml does.
    offline = {"pytorch_wheelhouse_dir": str(PROJECT_DIR / ".cache" / "wheelhouse")}
    outcome = provision.run("provision.yml", offline, inventories=(paths["all"],), timeout=900)
    assert outcome.rc == 0, outcome.output[-3000:]
    return paths


@pytest.fixture
def cluster(members: list[Node], extra_node: Node) -> list[Node]:
    return [*members, extra_node]


def attempt_logs(log: str) -> list[str]:
    """The log split at the launcher's header of each attempt."""
    return re.split(r"^=== torch-cluster: job .* attempt \d+,.*$", log, flags=re.MULTILINE)[1:]


def tutorial_on_node1(job: Job, epochs: int) -> dict[str, object]:
    """The tutorial's script on node1_first (node1 the master, not the shared folder's server),
    with no shared folder: rank 0's snapshot is copied to the next node every 3 s while it runs,
    and the job may go on with 2 of its 3 nodes once."""
    return job_vars(
        job,
        train_code_dir=str(EXAMPLES),
        train_script="snapshot_ddp.py",
        train_script_args=[str(epochs), "1", "--dataset_size", "40000"],
        # It resumes from its snapshot by itself, and takes no --resume.
        train_resume_args=[],
        train_shared_dir="",
        train_output_copy_interval=3,
        train_min_nodes=2,
        train_max_restarts=1,
        cluster_group="node1_first",
    )


def no_processes(job: Job, nodes: list[Node]) -> dict[str, list[str]]:
    return {node.name: job.processes(node) for node in nodes}


def went_on_without_node2(playbook: Playbook, job: Job, outcome: Outcome, node0: Node) -> None:
    """A 10-epoch job of node0, node1 and node2 lost node2, and its second attempt ran on
    node0 and node1 to the end from the shared folder's checkpoint, saying so."""
    assert outcome.rc == 0, outcome.output
    assert "node2 left the job (stopped answering)" in outcome.output
    assert "The next attempt runs on node0, node1 (2 of 3 node(s), master node0)" in outcome.output
    first, second = attempts(playbook, job)
    assert first["nodes_used"] == ["node0", "node1", "node2"]
    assert first["left"] == {"node2": "stopped answering"}
    assert first["restarted"]
    assert first["next_nodes"] == ["node0", "node1"]
    assert second["nodes_used"] == ["node0", "node1"]
    assert second["outcome"] == "succeeded"
    assert second["resumed_from"] == "the shared folder /shared"
    ran = "attempt 2 ran on node0, node1, resumed from the shared folder /shared."
    assert ran in outcome.output
    log = attempt_logs(job.log(node0))[-1]
    assert "start world_size=2 " in log
    resumed = int(re.search(r"continuing at epoch (\d+)/10", log).group(1))
    assert resumed >= 3, "it did not resume from the checkpoint"
    assert metrics(playbook, job)["epochs_completed"] == 10


@pytest.fixture
def replug_cleanup(playbook: Playbook, job: Job, three_nodes: dict[str, Path]) -> Iterator[None]:
    """After a test that cut a node off: its part of the job is stopped the documented way."""
    yield
    stopped = playbook.run("stop.yml", {"job_id": job.job_id}, inventories=(three_nodes["all"],))
    assert stopped.rc == 0, stopped.output


def test_a_lost_worker_is_left_out_and_the_job_resumes_on_the_others(
    playbook: Playbook,
    job: Job,
    cluster: list[Node],
    three_nodes: dict[str, Path],
    replug_cleanup: None,
) -> None:
    node0, node1, node2 = cluster
    extra = job_vars(job, *JOB, train_min_nodes=2, train_max_restarts=1)
    running = playbook.start("train.yml", extra, inventories=(three_nodes["all"],))
    try:
        job.wait_for_log(node0, r"^\[rank0\]: epoch 2/10 ")
        with node2.unplugged():
            lost = time.monotonic()
            job.wait_for_log(node0, r"continuing at epoch", timeout=180, interval=0.5)
            back = time.monotonic() - lost
            outcome = running.wait(timeout=300)
    finally:
        running.kill()
    went_on_without_node2(playbook, job, outcome, node0)
    print(f"lost worker: rank 0 resumed {back:.1f} s after node2 was unplugged")
    assert back <= BACK_IN_S + NOISE_S, f"training ran again {back:.1f} s after the loss"
    assert no_processes(job, [node0, node1]) == {"node0": [], "node1": []}
    # node2 was cut off for the rest of the job: plugged back, its part had stopped by itself.
    fenced(job, node2)


def test_a_lost_master_hands_over_to_the_next_node_and_its_checkpoint_copy(
    playbook: Playbook, cluster: list[Node], three_nodes: dict[str, Path]
) -> None:
    """The tutorial's script: global rank 0 saves snapshot.pt in the current folder, every
    rank loads it at start. No shared folder: the launcher copies rank 0's files to the next
    node while the job runs. The master, node1, is stopped like a power loss."""
    node0, node1, _ = cluster
    job = Job(f"test-{secrets.token_hex(4)}", shared="")
    extra = tutorial_on_node1(job, epochs=12)
    running = playbook.start("train.yml", extra, inventories=(three_nodes["master_last"],))
    try:
        job.wait_for_log(node1, r"^\[rank0\]: Epoch 3 \| Training snapshot saved", timeout=120)
        time.sleep(8)  # a copy while it runs (every 3 s, between two watch rounds of 5 s)
        with node1.stopped():
            stopped = time.monotonic()
            job.wait_for_log(node0, r"Resuming training from snapshot", timeout=180, interval=0.5)
            back = time.monotonic() - stopped
            outcome = running.wait(timeout=300)
    finally:
        running.kill()
    assert outcome.rc == 0, outcome.output
    assert "node1 left the job (stopped answering)" in outcome.output
    assert "master node0 (a new master)" in outcome.output
    first, second = attempts(playbook, job)
    assert first["outcome"] == "unwatchable"
    assert first["left"] == {"node1": "stopped answering"}
    copied = [copy for copy in first["copies_during"] if copy.get("files")]
    assert copied, first["copies_during"]
    assert all(copy["holders"] == ["node0"] for copy in copied), copied
    assert second["nodes_used"] == ["node0", "node2"]
    assert second["outcome"] == "succeeded"
    log = attempt_logs(job.log(node0))[-1]
    resumed = {
        int(rank): int(epoch)
        for rank, epoch in re.findall(
            r"^\[rank(\d+)\]: Resuming training from snapshot at Epoch (\d+)$", log, re.M
        )
    }
    assert resumed.get(0, 0) >= 3, log
    assert "[rank0]: Epoch 12 | Training snapshot saved" in log
    print(f"lost master: rank 0 resumed {back:.1f} s after node1's container was stopped")
    assert back <= BACK_IN_S + NOISE_S, f"training ran again {back:.1f} s after the loss"
    assert no_processes(job, cluster) == {node.name: [] for node in cluster}


def test_a_master_cut_off_is_replaced_within_seconds_and_fences_itself(
    playbook: Playbook, cluster: list[Node], three_nodes: dict[str, Path]
) -> None:
    """The master's link is pulled (it stays up, its ranks blocked): the others train again
    from its copied snapshot within seconds, and when its link comes back its own part of the
    job has stopped by itself (train_fence_timeout), with no stop.yml."""
    node0, node1, _ = cluster
    job = Job(f"test-{secrets.token_hex(4)}", shared="")
    extra = tutorial_on_node1(job, epochs=30)
    running = playbook.start("train.yml", extra, inventories=(three_nodes["master_last"],))
    try:
        job.wait_for_log(node1, r"^\[rank0\]: Epoch 3 \| Training snapshot saved", timeout=120)
        time.sleep(5)  # a copy while it runs
        with node1.unplugged():
            lost = time.monotonic()
            job.wait_for_log(node0, r"Resuming training from snapshot", timeout=120, interval=0.5)
            back = time.monotonic() - lost
            time.sleep(3)  # past its fence timeout since it was last heard from
        outcome = running.wait(timeout=400)
    finally:
        running.kill()
    assert outcome.rc == 0, outcome.output
    assert "node1 left the job (stopped answering)" in outcome.output
    first, second = attempts(playbook, job)
    assert first["outcome"] == "unwatchable"
    assert second["outcome"] == "succeeded"
    # The next attempt began only once node1's fence had fired: fence_until is past its
    # last answer by the fence timeout.
    assert first["fence_until"] >= first["heard"]["node1"] + 10, first
    print(f"master cut off: rank 0 resumed {back:.1f} s after node1's link was pulled")
    assert back <= BACK_IN_S + NOISE_S, f"training ran again {back:.1f} s after the loss"
    fenced(job, node1)
    # Its fenced unit is left (failed) for stop.yml to clear, as after any lost node.
    assert playbook.run("stop.yml", {"job_id": job.job_id}).rc == 0


def test_a_slow_node_is_not_a_lost_one(playbook: Playbook, job: Job, members: list[Node]) -> None:
    """For 20 s every poll of node1 answers 2 s late, as a loaded node's SSH would: it is slow,
    not lost, and the job is neither restarted nor fenced."""
    node0, node1 = members
    extra = job_vars(job, *JOB, train_max_restarts=1)
    running = playbook.start("train.yml", extra)
    try:
        job.wait_for_log(node0, r"^\[rank0\]: epoch 2/10 ")
        with node1.slow_answers(2):
            began = time.monotonic()
            probe = node0.host.run(f"runuser -u torch -- ssh -o BatchMode=yes {node1.address} "
                                   f"systemctl is-system-running")  # fmt: skip
            poll = time.monotonic() - began
            time.sleep(20)
        outcome = running.wait(timeout=400)
    finally:
        running.kill()
        # Whatever happened, nothing of the job is left for the next test.
        playbook.run("stop.yml", {"job_id": job.job_id})
    assert outcome.rc == 0, outcome.output
    assert "left the job" not in outcome.output
    (only,) = attempts(playbook, job)
    assert only["outcome"] == "succeeded"
    assert FENCED not in job.log(node1)
    print(f"slow node: a command over SSH on node1 took {poll:.1f} s (rc {probe.rc}); no restart")
    assert poll >= 2, "the node's answers were not slowed"


def test_a_spare_takes_a_lost_nodes_place_and_the_world_size_stays(
    playbook: Playbook,
    job: Job,
    cluster: list[Node],
    three_nodes: dict[str, Path],
    replug_cleanup: None,
) -> None:
    node0, node1, node2 = cluster
    # The spare holds neither the code nor the data: the launch stages them on the spares too,
    # not only on the nodes the job starts on, so that one can take a lost node's place.
    gone = node2.host.run("rm -rf /var/lib/torch-cluster/code /var/lib/torch-cluster/data")
    assert gone.rc == 0, gone.stderr
    extra = job_vars(job, *JOB, train_spare_group="extra_nodes", train_max_restarts=1)
    running = playbook.start("train.yml", extra, inventories=(three_nodes["all"],))
    try:
        job.wait_for_log(node0, r"^\[rank0\]: epoch 2/10 ")
        with node1.unplugged():
            outcome = running.wait(timeout=300)
    finally:
        running.kill()
    assert outcome.rc == 0, outcome.output
    replaced = "node1 left the job (stopped answering); the spare node2 takes its place"
    assert replaced in outcome.output
    first, second = attempts(playbook, job)
    assert first["nodes_used"] == ["node0", "node1"]
    assert first["replaced"] == {"node1": "node2"}
    assert second["nodes_used"] == ["node0", "node2"]
    runs = attempt_logs(job.log(node0))
    assert "start world_size=2 " in runs[0]
    assert "start world_size=2 " in runs[-1]
    assert "continuing at epoch" in runs[-1]
    assert f"job {job.job_id}, attempt 2, node node2 (node_rank 1)" in job.log(node2)
    assert metrics(playbook, job)["epochs_completed"] == 10


def test_losing_more_nodes_than_train_min_nodes_allows_fails_clearly(
    playbook: Playbook, job: Job, members: list[Node], replug_cleanup: None
) -> None:
    node0, node1 = members
    extra = job_vars(job, *JOB, train_min_nodes=2, train_max_restarts=1)
    running = playbook.start("train.yml", extra)
    try:
        job.wait_for_log(node0, r"^\[rank0\]: epoch 1/10 ")
        with node1.unplugged():
            outcome = running.wait(timeout=180)
            left = job.processes(node0)
    finally:
        running.kill()
    assert outcome.rc != 0, outcome.output
    assert (
        "Not restarted: node1 stopped answering: 1 node(s) would be left, fewer than "
        "train_min_nodes=2." in outcome.output
    )
    assert left == []
    assert len(attempts(playbook, job)) == 1


def test_a_stalled_job_is_caught_explained_and_restarted(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    """Rank 3 (node1's second process) sleeps before an all_reduce that ranks 0-2 wait in."""
    extra = job_vars(
        job,
        train_code_dir=str(SCRIPTS),
        train_script="stall_on_rank.py",
        train_script_args=["3", "8"],
        train_progress_regex="^step ",
        train_stall_timeout=STALL_TIMEOUT,
        train_max_restarts=1,
        nproc=2,
    )
    outcome = playbook.run("train.yml", extra, timeout=400)
    assert outcome.rc == 0, outcome.output
    first, second = attempts(playbook, job)
    assert first["outcome"] == "stalled"
    assert first["restarted"]
    stall = first["stall"]
    assert STALL_TIMEOUT <= stall["quiet_for"] < STALL_TIMEOUT + 30, stall
    assert stall["outliers"] == [3], stall
    assert "rank 3" in stall["summary"], stall
    assert "sleep" in stall["summary"], stall
    assert "attempt 1: stalled after" in outcome.output
    assert "rank 3" in outcome.output
    folder = playbook.runs_dir / job.job_id / "stall-1"
    stacks = {path.relative_to(folder).as_posix() for path in folder.rglob("*.txt")}
    assert {"node0/rank0.txt", "node0/rank1.txt", "node1/rank2.txt", "node1/rank3.txt"} <= stacks
    source = (SCRIPTS / "stall_on_rank.py").read_text().splitlines()
    sleeping = next(n for n, line in enumerate(source, 1) if "time.sleep(3600)" in line)
    assert f"main (stall_on_rank.py:{sleeping})" in (folder / "node1" / "rank3.txt").read_text()
    assert f"time.sleep(3600) at stall_on_rank.py:{sleeping} in main" in stall["summary"]
    assert "all_reduce" in (folder / "node0" / "rank0.txt").read_text()
    assert second["outcome"] == "succeeded"
    assert json.loads((folder / "summary.json").read_text())["outliers"] == [3]


@pytest.fixture
def slurm_on_three_nodes(playbook: Playbook, three_nodes: dict[str, Path]) -> None:
    """playbooks/slurm.yml on the three nodes, with its defaults (test_slurm.py, before this
    module, made node0 and node1 a Slurm cluster; this adds node2)."""
    outcome = playbook.run("slurm.yml", {}, inventories=(three_nodes["all"],), timeout=900)
    assert outcome.rc == 0, outcome.output[-3000:]


@pytest.mark.usefixtures("slurm_on_three_nodes", "replug_cleanup")
def test_through_slurm_a_lost_node_leaves_the_job_fences_itself_and_the_next_batch_job_resumes(
    playbook: Playbook, job: Job, cluster: list[Node], three_nodes: dict[str, Path]
) -> None:
    """A 3-node Slurm job with train_min_nodes=2 loses node2's link. Slurm would notice after
    its SlurmdTimeout; the watch declares the node lost after train_lost_after, the batch job
    is cancelled, the next one is submitted for node0 and node1 alone and resumes from the
    checkpoint, with the default launcher's messages. Cut off, node2 stops its own part (its
    fence, started beside torchrun in the batch script): seen through podman while it is still
    unplugged, before Slurm could have told it anything."""
    node0, _, node2 = cluster
    extra = job_vars(job, *JOB, train_launcher="slurm", train_min_nodes=2, train_max_restarts=1)
    running = playbook.start("train.yml", extra, inventories=(three_nodes["all"],))
    try:
        job.wait_for_log(node0, r"^\[rank0\]: epoch 2/10 ")
        with node2.unplugged():
            lost = time.monotonic()
            job.wait_for_log(node0, r"continuing at epoch", timeout=180, interval=0.5)
            back = time.monotonic() - lost
            cut_off_log = node2.inside("cat", f"{job.folder}/node.log")
            cut_off_processes = node2.inside(
                "python3", "-c", JOB_PROCESSES_SCRIPT, job.job_id, "list"
            )
            outcome = running.wait(timeout=300)
    finally:
        running.kill()
        # The cleanup's stop.yml waits for Slurm no more than 60 s.
        cleared = settled(node0, job, cluster, timeout=180)
    went_on_without_node2(playbook, job, outcome, node0)
    assert cleared, "Slurm still held a node or the job 180 s after the job ended"
    # Two batch jobs: the first on all three nodes, cancelled; the second on node0 and node1.
    first, second = accounting(node0, job)
    assert first["State"].startswith("CANCELLED"), first
    assert first["NodeList"] == "node[0-2]"
    assert (second["State"], second["NodeList"]) == ("COMPLETED", "node[0-1]")
    # node2, still cut off: its fence had killed its part and said why in its log.
    assert FENCED in cut_off_log, cut_off_log[-2000:]
    assert cut_off_processes.split() == [], cut_off_processes
    print(f"lost worker through Slurm: rank 0 resumed {back:.1f} s after node2 was unplugged")
    # The same target as the default launcher's: a new batch job's submission and start fit in.
    assert back <= BACK_IN_S + NOISE_S, f"training ran again {back:.1f} s after the loss"
