"""playbooks/train.yml on the scenario's cluster: real torchrun jobs over the nodes' network.

Every test trains the example trainer on the sandbox's digits (staged from the controller)
with gloo on the CPU, under a job id of its own, and collects into a folder of its own.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import time
from pathlib import Path

import yaml
from launcher import DATA, LONG_JOB, Job, Playbook, attempts, job_vars, metrics
from sandbox_nodes import PROJECT_DIR, Node

# Fault injection: the playbook must fail, with every process gone, within this long of a kill.
TEARDOWN_LIMIT_S = 30
DATA_DIR = "/var/lib/torch-cluster/data"
# "Code (2.2 MB) staged on 3 nodes: the controller sent 2.2 MB to node0; the nodes sent 4.4 MB
# to each other in 2 round(s)." (and the same for the data)
STAGED = re.compile(
    r"(Code|Data) (?:\(([\d.]+) MB\) )?staged on (\d+) nodes: the controller sent ([\d.]+) MB to "
    r"(\S+); the nodes sent ([\d.]+) MB to each other in (\d+) round"
)


def test_two_nodes_with_nproc_2_train_as_world_size_4(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    outcome = playbook.run("train.yml", job_vars(job, "--epochs", "2", nproc=2))
    assert outcome.rc == 0, outcome.output
    assert metrics(playbook, job)["world_size"] == 2 * len(members)


def test_results_and_every_nodes_log_reach_the_controller(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    patterns = ["*.json", "loss.png", "checkpoint.*"]
    outcome = playbook.run("train.yml", job_vars(job, "--epochs", "1", train_result_files=patterns))
    assert outcome.rc == 0, outcome.output
    run = playbook.runs_dir / job.job_id
    expected = {"metrics.json", "loss.png", "checkpoint.pt", *(f"{node}.log" for node in members)}
    assert expected <= {path.name for path in run.iterdir()}
    assert (run / "loss.png").read_bytes().startswith(b"\x89PNG")


def test_heterogeneous_nodes_train_as_world_size_3_and_node0s_checkpoint_is_copied_to_node1(
    playbook: Playbook, members: list[Node], tmp_path: Path
) -> None:
    # The guide's 4 + 2 GPUs, scaled to the sandbox: nproc per host, from host variables.
    layout = {members[0].name: 2, members[1].name: 1}
    overlay = tmp_path / "nproc.yml"
    hosts = {name: {"nproc": nproc} for name, nproc in layout.items()}
    overlay.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    # Without a shared folder: rank 0 saves on node0, and the launcher keeps a copy on node1.
    job = Job(f"test-{secrets.token_hex(4)}", shared="")
    extra = job_vars(job, "--epochs", "2", train_shared_dir="")
    outcome = playbook.run("train.yml", extra, inventories=(overlay,))
    assert outcome.rc == 0, outcome.output
    assert metrics(playbook, job)["world_size"] == 3
    checkpoint = f"{job.output}/checkpoint.pt"
    saved, copy = (node.host.file(checkpoint) for node in members[:2])
    assert saved.exists
    assert copy.exists
    assert saved.sha256sum == copy.sha256sum


def test_code_and_data_new_to_the_nodes_leave_the_controller_once_and_go_on_node_to_node(
    playbook: Playbook, job: Job, members: list[Node], tmp_path: Path
) -> None:
    # A version of the code and an entry of the data that no node has: 2 MiB of noise each.
    code, data = tmp_path / "code", tmp_path / "data"
    shutil.copytree(PROJECT_DIR / "train", code, ignore=shutil.ignore_patterns("__pycache__"))
    (code / "noise.bin").write_bytes(secrets.token_bytes(2 * 2**20))
    shutil.copytree(DATA, data)
    (data / f"noise-{job.job_id}.bin").write_bytes(secrets.token_bytes(2 * 2**20))
    # What each node lacks: all of the code; of the data, the noise, and the digits where an
    # earlier job has not staged them yet.
    digits, noise_mb = _megabytes(DATA), 2 * 2**20 / 1e6
    lacks = {n: not n.host.file(f"{DATA_DIR}/MNIST").exists for n in members}
    wanted = {
        "Code": [_megabytes(code)] * len(members),
        "Data": [noise_mb + digits * lacks[n] for n in members],
    }
    extra = job_vars(
        job, "--epochs", "1", train_code_dir=str(code), train_data_src=str(data),
        train_code_spread_mb=0,
    )  # fmt: skip
    outcome = playbook.run("train.yml", extra)
    assert outcome.rc == 0, outcome.output
    staged = {m[0]: m for m in STAGED.findall(" ".join(outcome.output.split()))}
    assert set(staged) == {"Code", "Data"}, outcome.output
    rounds = (len(members) - 1).bit_length()  # the nodes that have it double each round
    for what, (_, _, nodes, sent, first, spread, made) in staged.items():
        assert int(nodes) == len(members)
        assert first == members[0].name
        # rsync's own count: one copy leaves the controller, for the first node, and the nodes
        # send the others what each lacks: at least the noise, which does not compress, and at
        # most what was lacking (with rsync's own bytes and the 0.1 MB shown).
        assert noise_mb <= float(sent) + 0.05 <= wanted[what][0] * 1.1 + 0.15, (what, sent)
        others = sum(wanted[what][1:])
        assert noise_mb * (len(members) - 1) <= float(spread) + 0.05 <= others * 1.1 + 0.15, (
            what,
            spread,
            others,
        )
        assert int(made) == rounds
    # Every node runs the code as root gave it back: root's, and whole (torch_job_unit checks
    # its digest before the start, or the job would have failed).
    noise = hashlib.sha256((code / "noise.bin").read_bytes()).hexdigest()
    for node in members:
        sums = node.host.run("sha256sum /var/lib/torch-cluster/code/*/noise.bin").stdout
        folders = [line.split()[1].rsplit("/", 1)[0] for line in sums.splitlines() if noise in line]
        assert len(folders) == 1, (node, sums)
        owners = node.host.run(f"find {folders[0]} ! -user root -print").stdout
        assert owners == "", (node, owners)
    assert metrics(playbook, job)["world_size"] == len(members)


def _megabytes(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 1e6


def test_killing_a_nodes_workers_fails_the_playbook_and_stops_the_job_everywhere(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    running = playbook.start("train.yml", job_vars(job, *LONG_JOB, nproc=2))
    try:
        job.wait_for_log(members[0], "progress epoch=")
        victim = members[-1]
        # The workers only: torchrun (the agent) on that node sees them die.
        job.kill_workers(victim)
        killed = time.monotonic()
        outcome = running.wait(timeout=120)
    finally:
        running.kill()
    teardown = time.monotonic() - killed
    assert outcome.rc != 0, outcome.output
    assert teardown < TEARDOWN_LIMIT_S, f"the playbook took {teardown:.1f} s to fail"
    # nproc 2: the victim's workers are ranks 2 and 3; the first of them to be seen dead leads.
    assert re.search(
        rf"First failure: {victim}, rank [23] \(local rank [01]\): killed by SIGKILL",
        outcome.output,
    ), outcome.output
    failure = json.loads((playbook.runs_dir / job.job_id / "failure.json").read_text())
    assert failure["first_failure"]["node"] == victim.name
    assert len(attempts(playbook, job)) == 1, "the default is not to restart"
    assert {node.name: job.processes(node) for node in members} == {n.name: [] for n in members}


def test_a_node_that_stops_answering_fails_the_playbook_and_the_job_stops_on_the_others(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    running = playbook.start("train.yml", job_vars(job, *LONG_JOB))
    victim, survivors = members[-1], members[:-1]
    try:
        job.wait_for_log(members[0], "progress epoch=")
        with victim.unplugged():
            unplugged = time.monotonic()
            outcome = running.wait(timeout=120)
            teardown = time.monotonic() - unplugged
            survivors_left = {node.name: job.processes(node) for node in survivors}
    finally:
        running.kill()
    assert outcome.rc != 0, outcome.output
    assert teardown < TEARDOWN_LIMIT_S, f"the playbook took {teardown:.1f} s to fail"
    assert f"{victim}: unreachable" in outcome.output
    assert survivors_left == {node.name: [] for node in survivors}
    # Back on the network, the node's part of the job is stopped the documented way.
    stopped = playbook.run("stop.yml", {"job_id": job.job_id})
    assert stopped.rc == 0, stopped.output
    assert {node.name: job.processes(node) for node in members} == {n.name: [] for n in members}


def test_train_timeout_stops_the_job_everywhere_when_it_expires(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    limit = 30
    outcome = playbook.run("train.yml", job_vars(job, *LONG_JOB, train_timeout=limit))
    assert outcome.rc != 0, outcome.output
    assert f"timed out after {limit} s" in outcome.output
    # The units start after staging; the playbook ends soon after they are stopped.
    assert limit < outcome.seconds < limit + 90, f"the playbook took {outcome.seconds:.0f} s"
    assert "progress epoch=" in job.log(members[0])
    assert {node.name: job.processes(node) for node in members} == {n.name: [] for n in members}


def test_stop_yml_stops_a_running_job_and_a_resume_continues_from_its_checkpoint(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    running = playbook.start("train.yml", job_vars(job, *LONG_JOB))
    try:
        job.wait_for_log(members[0], "epoch 2/")
        stopped = playbook.run("stop.yml", {"job_id": job.job_id})
        outcome = running.wait(timeout=120)
    finally:
        running.kill()
    assert stopped.rc == 0, stopped.output
    assert outcome.rc != 0
    assert "was stopped by playbooks/stop.yml" in outcome.output
    assert all(job.processes(node) == [] for node in members)
    done = metrics(playbook, job)["epochs_completed"]

    resumed = playbook.run("train.yml", job_vars(job, "--epochs", str(done + 2), train_resume=True))
    assert resumed.rc == 0, resumed.output
    assert f"continuing at epoch {done + 1}/{done + 2}" in job.log(members[0])
    assert metrics(playbook, job)["epochs_completed"] == done + 2


def test_check_mode_starts_nothing_and_shows_what_each_node_would_run(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    outcome = playbook.run("train.yml", job_vars(job, "--epochs", "1"), args=("--check",))
    assert outcome.rc == 0, outcome.output
    assert outcome.output.count("Check mode: nothing was started. This node would run:") == len(
        members
    )
    assert f"--unit={job.unit}" in outcome.output
    for node in members:
        assert not job.unit_exists(node), f"{job.unit} was started on {node}"
        assert not node.host.file(job.folder).exists, f"{job.folder} was made on {node}"
