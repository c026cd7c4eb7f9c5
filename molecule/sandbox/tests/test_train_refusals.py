"""train.yml refuses bad input with a clear message before anything starts on any node."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from launcher import DATA, Job, Outcome, Playbook
from sandbox_nodes import Listen, Node

# Where the train role looks for GPUs is an input (train_gpu_dir, the driver's
# /proc/driver/nvidia/gpus by default). The sandbox has no GPU, so the GPU-count test
# points it at a folder laid out like the driver's: one folder per GPU.
FAKE_GPUS = ("0000:17:00.0", "0000:65:00.0")


@pytest.fixture
def gpu_dir(members: list[Node]) -> Iterator[str]:
    folder = f"/tmp/gpus-{secrets.token_hex(4)}"
    for node in members:
        node.host.run_expect([0], " ".join(f"mkdir -p {folder}/{gpu}" for gpu in FAKE_GPUS))
    yield folder
    for node in members:
        node.host.run(f"rm -rf {folder}")


def train(
    playbook: Playbook, job: Job, inventories: tuple[Path, ...] = (), **extra: object
) -> Outcome:
    extra_vars = {"job_id": job.job_id, "train_data_src": str(DATA), **extra}
    return playbook.run("train.yml", extra_vars, inventories=inventories)


def assert_refused_before_anything_started(
    outcome: Outcome, message: str, job: Job, members: list[Node]
) -> None:
    assert outcome.rc != 0
    assert message in outcome.output, outcome.output
    for node in members:
        assert not job.unit_exists(node), f"{job.unit} was started on {node}"
        assert not node.host.file(job.folder).exists, f"{job.folder} was made on {node}"
        assert not node.host.file(job.output).exists, f"{job.output} was made on {node}"


@pytest.mark.parametrize("nproc", [0, -1, "two", 1.5])
def test_nproc_that_is_not_a_positive_integer_is_refused(
    playbook: Playbook, job: Job, members: list[Node], nproc: object
) -> None:
    outcome = train(playbook, job, nproc=nproc)
    assert_refused_before_anything_started(
        outcome, "nproc must be a positive integer or auto", job, members
    )


def test_nproc_beyond_a_gpu_nodes_gpu_count_is_refused(
    playbook: Playbook, job: Job, members: list[Node], gpu_dir: str
) -> None:
    outcome = train(playbook, job, nproc=len(FAKE_GPUS) + 1, train_gpu_dir=gpu_dir)
    message = f"has {len(FAKE_GPUS)} GPU(s) but nproc is {len(FAKE_GPUS) + 1}"
    assert_refused_before_anything_started(outcome, message, job, members)


GROUP_CASES = {
    "missing": ({}, "The training group 'trainers' is missing from the inventory"),
    "empty": (
        {"trainers": {"hosts": {}}},
        "The training group 'trainers' is empty in the inventory",
    ),
}


@pytest.mark.parametrize("case", GROUP_CASES.values(), ids=list(GROUP_CASES))
def test_an_empty_or_missing_training_group_is_refused(
    playbook: Playbook, job: Job, members: list[Node], tmp_path: Path, case: tuple[dict, str]
) -> None:
    groups, message = case
    overlay = tmp_path / "groups.yml"
    overlay.write_text(yaml.safe_dump({"all": {"children": groups}}))
    outcome = train(playbook, job, inventories=(overlay,), cluster_group="trainers")
    assert_refused_before_anything_started(outcome, message, job, members)


def test_a_master_port_in_use_on_the_master_is_refused(
    playbook: Playbook, job: Job, members: list[Node], master_port: int, listen: Listen
) -> None:
    listen(members[0], master_port)
    outcome = train(playbook, job)
    message = f"Port {master_port} is already in use on the master {members[0]}"
    assert_refused_before_anything_started(outcome, message, job, members)


def test_a_training_script_that_does_not_exist_is_refused(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    outcome = train(playbook, job, train_script="no_such_script.py")
    message = "no_such_script.py does not exist on the controller"
    assert_refused_before_anything_started(outcome, message, job, members)


def test_a_data_folder_that_does_not_exist_is_refused(
    playbook: Playbook, job: Job, members: list[Node], tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-data"
    outcome = train(playbook, job, train_data_src=str(missing))
    message = f"The data folder train_data_src={missing} does not exist on the controller"
    assert_refused_before_anything_started(outcome, message, job, members)


def test_a_node_that_is_not_provisioned_is_refused(
    playbook: Playbook, job: Job, members: list[Node], outsider: Node, tmp_path: Path
) -> None:
    # The outsider is a fresh node on the same network that provision.yml never ran on.
    overlay = tmp_path / "groups.yml"
    hosts = {members[0].name: None, outsider.name: None}
    overlay.write_text(yaml.safe_dump({"all": {"children": {"trainers": {"hosts": hosts}}}}))
    outcome = train(playbook, job, inventories=(overlay,), cluster_group="trainers")
    message = f"{outsider} is not provisioned: it has no training environment"
    assert_refused_before_anything_started(outcome, message, job, [members[0], outsider])


def test_a_bad_job_id_is_refused_naming_only_the_job_id(
    playbook: Playbook, members: list[Node]
) -> None:
    job = Job("bad.id!")
    outcome = train(playbook, job)
    assert_refused_before_anything_started(outcome, "job_id must be 1 to 64 letters", job, members)
    assert "nproc must" not in outcome.output
    assert "train_timeout must" not in outcome.output


def test_a_train_user_other_than_ssh_trust_user_is_refused(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    outcome = train(playbook, job, train_user="nobody", ssh_trust_user="torch")
    message = "train_user (nobody) must be ssh_trust_user (torch)"
    assert_refused_before_anything_started(outcome, message, job, members)


def test_a_train_user_the_nodes_do_not_trust_is_refused(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    # Without ssh_trust_user in the inventory, the preflight proves the trust itself: the
    # master must reach every other node over SSH as the training user, as the watcher will.
    outcome = train(playbook, job, train_user="nobody")
    message = f"the master {members[0]} cannot reach every node over SSH as nobody"
    assert_refused_before_anything_started(outcome, message, job, members)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"train_result_files": ["../../etc/shadow"]}, "train_result_files must be relative"),
        ({"train_result_files": ["/etc/shadow"]}, "train_result_files must be relative"),
        ({"train_progress_regex": "epoch=("}, "train_progress_regex is not a regular expression"),
    ],
    ids=["pattern-climbs-out", "pattern-absolute", "regex-does-not-compile"],
)
def test_bad_result_patterns_and_progress_regexes_are_refused(
    playbook: Playbook, job: Job, members: list[Node], extra: dict, message: str
) -> None:
    assert_refused_before_anything_started(train(playbook, job, **extra), message, job, members)
