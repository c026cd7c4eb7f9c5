"""An input that nothing would read stops the playbook in its first play, on the controller,
with the closest known name, before any node is reached: a misspelt variable on the command
line, in a job file (-e @path) and in the inventory's group_vars and host_vars, and a -e
key=value whose value has spaces (Ansible keeps the rest in _raw_params). A job file that is
not a mapping Ansible refuses itself, before any play."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from bare_cluster import Cluster, PlaybookRun

REGEX = r"\[GPU0\] Epoch (?P<epoch>\d+) .* Loss: (?P<loss>[\d.]+)"


@dataclass(frozen=True)
class LostInput:
    """A playbook run with a lost input, and the messages it must stop with ({tmp}: the run's
    folder, where the job file and the inventory are written)."""

    playbook: str
    messages: tuple[str, ...]
    args: tuple[str, ...] = ()
    job_file: object = None
    group_vars: dict[str, object] = field(default_factory=dict)
    host_vars: dict[str, object] = field(default_factory=dict)


LOST_INPUTS = [
    pytest.param(
        LostInput(
            "playbooks/train.yml",
            (
                "train_max_restart (-e train_max_restart=3): no role or playbook reads it; "
                "did you mean train_max_restarts?",
            ),
            args=("-e", "train_max_restart=3", "-e", "job_id=lost-input"),
        ),
        id="command-line-train-max-restart",
    ),
    pytest.param(
        LostInput(
            "playbooks/provision.yml",
            (
                "pytorch_cuda_varient (-e pytorch_cuda_varient=cu126): no role or playbook reads "
                "it; did you mean pytorch_cuda_variant",
            ),
            args=("-e", "pytorch_cuda_varient=cu126"),
        ),
        id="command-line-provision-setting",
    ),
    pytest.param(
        LostInput(
            "playbooks/train.yml",
            ("nprocs (-e nprocs=2): no role or playbook reads it; did you mean nproc?",),
            args=("-e", "nprocs=2"),
        ),
        id="command-line-short-name",
    ),
    pytest.param(
        LostInput(
            "playbooks/train.yml",
            (
                "train_stall_timout (the job file {tmp}/job.yml): no role or playbook reads it; "
                "did you mean train_stall_timeout",
                "job-id (the job file {tmp}/job.yml): no role or playbook reads it; "
                "did you mean job_id?",
            ),
            job_file={"job-id": "lost-input", "train_max_restarts": 1, "train_stall_timout": 60},
        ),
        id="job-file",
    ),
    pytest.param(
        LostInput(
            "playbooks/provision.yml",
            (
                "shared_storage_srever (set in {tmp}/group_vars/gpu_nodes.yml for node0, node1): "
                "no role or playbook reads it; did you mean shared_storage_server",
            ),
            group_vars={"shared_storage_srever": "node0", "site_ntp_server": "ntp.example"},
        ),
        id="group-vars",
    ),
    pytest.param(
        LostInput(
            "playbooks/provision.yml",
            (
                "miniconda_enabeld (set in {tmp}/host_vars/node1.yml for node1): "
                "no role or playbook reads it; did you mean miniconda_enabled?",
            ),
            host_vars={"miniconda_enabeld": True},
        ),
        id="host-vars",
    ),
    pytest.param(
        LostInput(
            "playbooks/train.yml",
            (
                f"-e {shlex.quote('train_progress_regex=' + REGEX)} arrived split at its spaces, "
                r"as train_progress_regex='\[GPU0\]' and "
                r"_raw_params='Epoch (?P<epoch>\d+) .* Loss: (?P<loss>[\d.]+)', "
                "which nothing reads",
                f"Put it in a job file, -e @jobs/<name>.yml, as train_progress_regex: '{REGEX}'",
                "or pass it as JSON: -e "
                + shlex.quote(json.dumps({"train_progress_regex": REGEX})),
            ),
            args=("-e", f"train_progress_regex={REGEX}"),
        ),
        id="key-value-with-spaces",
    ),
    pytest.param(
        LostInput(
            "playbooks/train.yml",
            (
                "Invalid extra vars data supplied. '@{tmp}/job.yml' could not be made into a "
                "dictionary",
            ),
            job_file=["train_script: main.py"],
        ),
        id="job-file-not-a-mapping",
    ),
]


@dataclass(frozen=True)
class Refusal:
    messages: tuple[str, ...]
    run: PlaybookRun


@pytest.fixture(scope="module", params=LOST_INPUTS)
def refusal(
    request: pytest.FixtureRequest, bare_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Refusal:
    """The playbook run once per lost input, on the bare cluster."""
    lost: LostInput = request.param
    tmp = tmp_path_factory.mktemp("lost-input").resolve()
    args = [f"--inventory={bare_cluster.inventory}", *lost.args]
    if lost.job_file is not None:
        (tmp / "job.yml").write_text(yaml.safe_dump(lost.job_file))
        args += ["-e", f"@{tmp / 'job.yml'}"]
    if lost.group_vars or lost.host_vars:
        args.append(f"--inventory={vars_beside(tmp, lost.group_vars, lost.host_vars)}")
    run = bare_cluster.playbook(lost.playbook, *args)
    return Refusal(tuple(message.replace("{tmp}", str(tmp)) for message in lost.messages), run)


def vars_beside(folder: Path, group_vars: dict[str, object], host_vars: dict[str, object]) -> Path:
    """A second inventory source that adds no host, with gpu_nodes' group_vars and node1's
    host_vars beside it (the bare cluster's own, and the sandbox's settings, stay as they are)."""
    for path, variables in (
        (folder / "group_vars" / "gpu_nodes.yml", group_vars),
        (folder / "host_vars" / "node1.yml", host_vars),
    ):
        if variables:
            path.parent.mkdir(exist_ok=True)
            path.write_text(yaml.safe_dump(variables))
    source = folder / "vars-only.yml"
    source.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": None}}}))
    return source


def test_a_lost_input_is_refused_with_its_message(refusal: Refusal) -> None:
    assert refusal.run.returncode != 0
    missing = [message for message in refusal.messages if message not in refusal.run.output]
    assert not missing, refusal.run.output[-4000:]


def test_a_lost_input_is_refused_before_any_role_starts(refusal: Refusal) -> None:
    assert refusal.run.roles_started == set()


def test_a_lost_input_is_refused_before_any_node_is_reached(refusal: Refusal) -> None:
    """Only the first play's localhost ran (no play at all for a job file that is not a
    mapping), and it changed nothing."""
    assert set(refusal.run.changed) <= {"localhost"}
    assert set(refusal.run.changed.values()) <= {0}


def test_a_lost_input_is_refused_before_any_change(refusal: Refusal, bare_cluster: Cluster) -> None:
    assert bare_cluster.provisioned_traces() == {node: [] for node in bare_cluster.members}


def test_a_site_variable_in_the_inventory_passes(bare_cluster: Cluster, tmp_path: Path) -> None:
    """The inventory may hold a site's own variables for other playbooks: only names with a
    role's prefix are the collection's to refuse (--tags=always: only the preflight runs)."""
    extra = vars_beside(tmp_path, {"site_ntp_server": "ntp.example"}, {})
    run = bare_cluster.provision(
        {}, tmp_path / "extra-vars.json", "--tags=always", f"--inventory={extra}"
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr
