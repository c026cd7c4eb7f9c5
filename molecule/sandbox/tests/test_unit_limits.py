"""A job unit's resource limits: LimitMEMLOCK=infinity and LimitNOFILE=1048576, asked for by
the launcher, reach the job's processes on every node as far as the node's systemd can grant
them, and check.yml reports what a unit gets on every node and names a node that falls short.

systemd grants a unit's limits in full where it may raise its own hard limits (the
CAP_SYS_RESOURCE capability, outside a user namespace: a real host); otherwise it gives no
more than its own hard limit, without a word. The sandbox's containers lack the capability,
and the machine that runs them caps them at memlock 8 MiB and nofile 20000: there a job gets
those (nofile 20000 where a unit asking for nothing gets 1024), and the check, told so by
inventory/sandbox/group_vars, accepts them.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

from launcher import Job, Playbook, job_vars
from sandbox_nodes import Node

SCRIPTS = Path(__file__).parent / "scripts"
# What the launcher's units ask for (torch_job_unit's limit_memlock and limit_nofile).
ASKED = {"memlock": math.inf, "nofile": 1048576}
RESOURCES = {"memlock": "RLIMIT_MEMLOCK", "nofile": "RLIMIT_NOFILE"}
CAP_SYS_RESOURCE = 24
WHOLE_UID_RANGE = ["0", "0", "4294967295"]


def number(value: int | str) -> float:
    return math.inf if value == "unlimited" else int(value)


def granted(node: Node) -> dict[str, float]:
    """What the node's systemd gives a unit that asks for ASKED: all of it where it may raise
    its own hard limits, else at most its own hard limits."""
    status = node.host.file("/proc/1/status").content_string
    capabilities = int(
        next(line for line in status.splitlines() if line.startswith("CapEff:"))[7:], 16
    )
    uid_map = node.host.file("/proc/1/uid_map").content_string.split()
    if capabilities & (1 << CAP_SYS_RESOURCE) and uid_map == WHOLE_UID_RANGE:
        return dict(ASKED)
    script = (
        "import json, resource\n"
        f"names = {RESOURCES!r}\n"
        "hard = {k: resource.prlimit(1, getattr(resource, v))[1] for k, v in names.items()}\n"
        "print(json.dumps({k: -1 if v == resource.RLIM_INFINITY else v for k, v in hard.items()}))"
    )
    hard = json.loads(node.host.check_output(shlex.join(["python3", "-c", script])))
    return {key: min(ASKED[key], math.inf if hard[key] == -1 else hard[key]) for key in ASKED}


def check(playbook: Playbook, tmp_path: Path, **extra: object) -> tuple[str, dict]:
    """The quick check.yml (no collectives): its output and report.json."""
    runs = tmp_path / "runs"
    outcome = playbook.run(
        "check.yml", {"check_runs_dir": str(runs), "check_collectives": False, **extra}
    )
    reports = sorted(runs.glob("check-*/report.json"))
    assert reports, outcome.output
    return outcome.output, json.loads(reports[-1].read_text())


def test_a_jobs_processes_get_the_memlock_and_nofile_limits_the_unit_asks_for(
    playbook: Playbook, job: Job, members: list[Node]
) -> None:
    extra = {
        "train_code_dir": str(SCRIPTS),
        "train_script": "print_limits.py",
        "train_script_args": [],
        "train_result_files": ["limits-*.json"],
        "train_results_from_all_nodes": True,
    }
    outcome = playbook.run("train.yml", job_vars(job, **extra), timeout=120)
    assert outcome.rc == 0, outcome.output
    for rank, node in enumerate(members):
        seen = json.loads(
            (playbook.runs_dir / job.job_id / node.name / f"limits-rank{rank}.json").read_text()
        )
        expected = granted(node)
        for key, value in expected.items():
            # Soft and hard alike: a unit's Limit*= sets both.
            assert [number(v) for v in seen[key]] == [value, value], (node.name, key, seen["proc"])


def test_check_reports_the_limits_a_job_unit_gets_on_every_node(
    playbook: Playbook, tmp_path: Path, members: list[Node]
) -> None:
    output, report = check(playbook, tmp_path)
    assert "Job unit limits (asked: memlock unlimited, nofile 1048576):" in output
    for node in members:
        limits = report["nodes"][node.name]["job_limits"]
        assert limits["error"] == ""
        assert {key: number(limits[key]) for key in ASKED} == granted(node)
        assert f"  {node.name}: memlock " in output
    # The sandbox's minimums (its group_vars) accept what its nodes can grant.
    assert [f for f in report["failures"] if f["check"] == "limits"] == []
    markdown = next((tmp_path / "runs").glob("check-*/report.md")).read_text()
    assert "## Job unit limits" in markdown


def test_check_names_a_node_whose_units_get_less_than_they_ask_for(
    playbook: Playbook, tmp_path: Path, members: list[Node]
) -> None:
    # The role's defaults: a unit must get what it asks for.
    output, report = check(playbook, tmp_path, check_min_memlock="", check_min_nofile=0)
    short = {
        (node.name, key)
        for node in members
        for key, value in granted(node).items()
        if value < ASKED[key]
    }
    failures = [f for f in report["failures"] if f["check"] == "limits"]
    assert {(f["subject"], f["value"].split()[0]) for f in failures} == short
    for failure in failures:
        key, name = failure["value"].split()[0], failure["subject"]
        assert f"raise the {key} limit that systemd runs with on {name}" in failure["fix"]
        assert f"[limits] {name}: {failure['value']}" in output
