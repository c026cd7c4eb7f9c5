"""A job unit's resource limits: what the launcher asks systemd for (job/unit_properties.py,
torch_job_unit's argv), how a unit's /proc/self/limits is read, and the health check's judgement
of what a unit got (health/limits.py).
"""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.limits import (
    limit_findings,
    limit_lines,
    limit_number,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.report import markdown
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job import unit_probe
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_probe import (
    gpu_device_nodes_command,
    unit_limits,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_properties import (
    LIMIT_MEMLOCK,
    LIMIT_NOFILE,
    UNLIMITED,
    limit_properties,
    parse_limits,
    protection_properties,
)
from ansible_collections.torch_cluster.cluster.plugins.modules import torch_job_unit

DATA = Path(__file__).parents[1] / "data"
# /proc/self/limits of a shell on the machine that runs the sandbox: its hard limits are the
# sandbox containers' (memlock 8 MiB, nofile 20000).
RECORDED = (DATA / "proc-self-limits.txt").read_text()
MODULES = Path(__file__).resolve().parents[3] / "plugins" / "modules"
ASKED = {"memlock": "infinity", "nofile": 1048576}


def row(**limits: object) -> dict:
    return {"job_limits": {"asked": ASKED, "error": "", **limits}}


def test_a_recorded_proc_limits_text_gives_the_soft_memlock_and_nofile() -> None:
    assert parse_limits(RECORDED) == {"memlock": 8388608, "nofile": 20000}


def test_an_unlimited_memlock_is_read_as_unlimited() -> None:
    # The recorded text with its memlock line as a unit with LimitMEMLOCK=infinity shows it.
    line = next(line for line in RECORDED.splitlines() if line.startswith("Max locked memory"))
    unlimited = "Max locked memory         unlimited            unlimited            bytes     "
    assert parse_limits(RECORDED.replace(line, unlimited))["memlock"] == UNLIMITED


def test_a_text_without_the_limits_gives_nothing() -> None:
    assert parse_limits("Failed to start transient service unit\n") == {}


def test_the_launcher_asks_for_unlimited_memlock_and_a_million_files() -> None:
    assert (LIMIT_MEMLOCK, LIMIT_NOFILE) == ("infinity", 1048576)
    assert limit_properties(LIMIT_MEMLOCK, LIMIT_NOFILE) == [
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=1048576",
    ]
    assert limit_properties("", 0) == []


@pytest.mark.parametrize(
    ("memlock", "nofile", "properties"),
    [
        (
            "infinity",
            1048576,
            ["--property=LimitMEMLOCK=infinity", "--property=LimitNOFILE=1048576"],
        ),
        ("64M", 0, ["--property=LimitMEMLOCK=64M"]),
        ("", 0, []),
    ],
)
def test_the_units_systemd_run_carries_the_limits(
    memlock: str, nofile: int, properties: list[str]
) -> None:
    params = {
        "name": "torch-job-a", "description": "", "user": "root", "working_directory": "/w",
        "log": "/w/node.log", "requires_mounts": [], "runtime_max_sec": 0, "env": {},
        "job_id": "a", "command": ["torchrun"], "limit_memlock": memlock, "limit_nofile": nofile,
        "protect": False, "folders": [], "writable": [],
    }  # fmt: skip
    argv = torch_job_unit.systemd_run(params)
    assert [arg for arg in argv if arg.startswith("--property=Limit")] == properties
    assert argv[-2:] == ["--", "torchrun"]
    assert not any("Protect" in arg for arg in argv)


def test_a_protected_units_systemd_run_carries_the_confinement() -> None:
    params = {
        "name": "torch-job-a", "description": "", "user": "root", "working_directory": "/w/out",
        "log": "/w/node.log", "requires_mounts": [], "runtime_max_sec": 0, "env": {},
        "job_id": "a", "command": ["torchrun"], "limit_memlock": "", "limit_nofile": 0,
        "protect": True, "folders": ["/w", "/w/out"], "writable": ["/data/cache"],
    }  # fmt: skip
    argv = torch_job_unit.systemd_run(params)
    assert "--property=NoNewPrivileges=yes" in argv
    writable = [arg.split("=", 2)[2] for arg in argv if "ReadWritePaths=" in arg]
    assert writable == ["/w", "/w/out", "/data/cache", "/root"]


def test_a_units_limits_are_read_from_a_transient_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, RECORDED, "")

    monkeypatch.setattr(unit_probe.subprocess, "run", run)
    assert unit_limits("infinity", 1048576) == {
        "asked": ASKED,
        "memlock": 8388608,
        "nofile": 20000,
        "error": "",
    }
    assert seen == [
        [
            "systemd-run", "--wait", "--pipe", "--quiet", "--collect",
            "--property=LimitMEMLOCK=infinity", "--property=LimitNOFILE=1048576",
            "--", "cat", "/proc/self/limits",
        ]
    ]  # fmt: skip


def test_a_unit_that_does_not_start_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    failed = subprocess.CompletedProcess([], 1, "", "Failed to connect to bus: No medium found\n")
    monkeypatch.setattr(unit_probe.subprocess, "run", lambda argv, **_: failed)
    found = unit_limits("infinity", 1048576)
    assert found == {
        "asked": ASKED,
        "error": "systemd-run: Failed to connect to bus: No medium found",
    }


@pytest.mark.parametrize(
    ("text", "number"),
    [("infinity", float("inf")), ("unlimited", float("inf")), ("8M", 8 * 2**20),
     ("2g", 2 * 2**30), (65536, 65536), ("1048576", 1048576)],
)  # fmt: skip
def test_limits_are_read_in_systemds_syntax(text: str | int, number: float) -> None:
    assert limit_number(text) == number


@pytest.mark.parametrize("text", ["", "lots", "8MB", "-1"])
def test_anything_else_is_not_a_limit(text: str) -> None:
    with pytest.raises(ValueError, match="not a limit"):
        limit_number(text)


def test_a_unit_that_got_what_it_asked_for_passes() -> None:
    assert limit_findings({"n0": row(memlock="unlimited", nofile=1048576)}) == []


def test_a_node_whose_units_get_less_than_they_ask_for_is_named_with_the_fix() -> None:
    rows = {
        "n0": row(memlock="unlimited", nofile=1048576),
        "n1": row(memlock=8388608, nofile=20000),
    }
    memlock, nofile = limit_findings(rows)
    assert (memlock.check, memlock.subject, memlock.limit) == ("limits", "n1", "unlimited")
    assert memlock.value == "memlock 8 MiB in a job unit (it asked for LimitMEMLOCK=infinity)"
    assert "ibv_reg_mr" in memlock.fix
    assert "raise the memlock limit that systemd runs with on n1" in memlock.fix
    assert "--ulimit memlock=-1)" in memlock.fix
    assert (nofile.subject, nofile.limit) == ("n1", "at least 1048576")
    assert nofile.value == "nofile 20000 in a job unit (it asked for LimitNOFILE=1048576)"
    assert "--ulimit nofile=1048576)" in nofile.fix


@pytest.mark.parametrize(
    ("min_memlock", "min_nofile", "failing"),
    [("8M", 20000, []), ("16M", 20000, ["memlock"]), ("8M", 65536, ["nofile"]),
     ("", 20000, ["memlock"]), ("8M", 0, ["nofile"])],
)  # fmt: skip
def test_the_minimums_can_be_set_below_what_the_units_ask_for(
    min_memlock: str, min_nofile: int, failing: list[str]
) -> None:
    findings = limit_findings({"n0": row(memlock=8388608, nofile=20000)}, min_memlock, min_nofile)
    assert [f.value.split()[0] for f in findings] == failing


def test_a_unit_that_asks_for_nothing_is_judged_by_the_minimums_alone() -> None:
    rows = {"n0": {"job_limits": {"asked": {"memlock": "", "nofile": 0}, "memlock": 65536,
                                  "nofile": 1024, "error": ""}}}  # fmt: skip
    assert limit_findings(rows) == []
    (finding,) = limit_findings(rows, "8M", 0)
    assert finding.value == "memlock 64 KiB in a job unit (it asked for nothing)"


def test_limits_that_could_not_be_read_are_named() -> None:
    rows = {"n0": {"job_limits": {"asked": ASKED, "error": "systemd-run: exit status 1"}}}
    (finding,) = limit_findings(rows)
    assert finding.value == "a job unit's limits not read (systemd-run: exit status 1)"
    assert "systemd-run --wait --pipe true" in finding.fix


def test_a_node_without_the_limits_in_its_probe_is_left_to_the_other_checks() -> None:
    assert limit_findings({"n0": {"torch": "2.14.1"}}) == []
    assert limit_lines({"n0": {}}) == []


def test_the_limits_are_reported_one_line_per_node() -> None:
    rows = {
        "n0": row(memlock="unlimited", nofile=1048576),
        "n1": row(memlock=8388608, nofile=20000),
        "n2": {"job_limits": {"asked": ASKED, "error": "systemd-run: exit status 1"}},
    }
    assert limit_lines(rows) == [
        "Job unit limits (asked: memlock unlimited, nofile 1048576):",
        "  n0: memlock unlimited, nofile 1048576",
        "  n1: memlock 8 MiB, nofile 20000",
        "  n2: not read (systemd-run: exit status 1)",
    ]
    report = markdown("t", [], {}, {}, [], limits=limit_lines(rows))
    assert "## Job unit limits\n\n```\nJob unit limits (asked:" in report


def test_a_confined_unit_writes_only_to_its_folders_and_the_users_home() -> None:
    properties = protection_properties(
        "/home/torch", ["/var/lib/torch-cluster/jobs/j1", "/shared/jobs/j1/output"]
    )
    assert properties == [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "ProtectHome=tmpfs",
        "BindPaths=/home/torch",
        "ReadWritePaths=/var/lib/torch-cluster/jobs/j1",
        "ReadWritePaths=/shared/jobs/j1/output",
        "ReadWritePaths=/home/torch",
        "InaccessiblePaths=-/home/torch/.ssh",
    ]


def test_a_home_outside_the_hidden_folders_is_left_in_place_and_writable() -> None:
    properties = protection_properties("/srv/users/ml/", ["/jobs/a", "/jobs/a/", "/my data"])
    assert "ProtectHome=yes" in properties
    assert not any(prop.startswith("BindPaths=") for prop in properties)
    writable = [prop for prop in properties if prop.startswith("ReadWritePaths=")]
    # Each path once, normalised; one with a space quoted as one word.
    assert writable == [
        "ReadWritePaths=/jobs/a",
        'ReadWritePaths="/my data"',
        "ReadWritePaths=/srv/users/ml",
    ]
    assert properties[-1] == "InaccessiblePaths=-/srv/users/ml/.ssh"


def test_roots_home_is_hidden_from_nobody_but_root() -> None:
    properties = protection_properties("/root", ["/jobs/a"])
    assert properties[3:5] == ["ProtectHome=tmpfs", "BindPaths=/root"]


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to another user: needs root")
def test_a_folder_root_may_not_make_is_made_by_the_user() -> None:
    unit = torch_job_unit
    nobody = pwd.getpwnam("nobody")
    # Under /tmp: pytest's own folders are open to their owner alone.
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        top = Path(folder)
        top.chmod(0o755)
        open_to_all = top / "export"
        open_to_all.mkdir()
        open_to_all.chmod(0o777)
        made = open_to_all / "jobs" / "j1" / "output"
        unit.as_user(nobody, lambda: os.makedirs(made))
        assert made.stat().st_uid == nobody.pw_uid
        closed = top / "root-only"
        closed.mkdir(mode=0o755)
        with pytest.raises(PermissionError, match=r"Permission denied \(as nobody\)"):
            unit.as_user(nobody, lambda: os.makedirs(closed / "j2"))
        assert not (closed / "j2").exists()


def test_missing_gpu_device_nodes_are_made_by_root_before_a_confined_start(
    tmp_path: Path,
) -> None:
    gpus, uvm = tmp_path / "gpus", tmp_path / "nvidia-uvm"
    gpus.mkdir()
    # No GPU: nothing to do.
    assert gpu_device_nodes_command(str(gpus), str(uvm), "/usr/bin/nvidia-modprobe") == []
    (gpus / "0000:18:00.0").mkdir()
    made = gpu_device_nodes_command(str(gpus), str(uvm), "/usr/bin/nvidia-modprobe")
    assert made == ["/usr/bin/nvidia-modprobe", "-u", "-c=0"]
    # No nvidia-modprobe on the node: nothing to run (CUDA then says what is missing).
    assert gpu_device_nodes_command(str(gpus), str(uvm), "") == []
    uvm.touch()
    assert gpu_device_nodes_command(str(gpus), str(uvm), "/usr/bin/nvidia-modprobe") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_job_folder_and_its_missing_parents_belong_to_the_user() -> None:
    """On a shared folder, the first node to make jobs/ must leave it to the training user, so
    that another node's user (over sshfs, or squashed over NFS) can make its folder beside."""
    user = pwd.getpwnam("nobody")
    with tempfile.TemporaryDirectory() as scratch:
        # Open to the user, as a mount point is (pytest's own folders are root's alone).
        os.chmod(scratch, 0o755)
        existing = Path(scratch) / "shared"
        existing.mkdir()
        made_by_root_then_the_user(existing, user)


def made_by_root_then_the_user(existing: Path, user: pwd.struct_passwd) -> None:
    folder = existing / "jobs" / "job-1" / "output"
    torch_job_unit.make_folder(str(folder), user)
    for made in (existing / "jobs", existing / "jobs" / "job-1", folder):
        assert (made.stat().st_uid, made.stat().st_gid) == (user.pw_uid, user.pw_gid), made
    assert existing.stat().st_uid == 0
    # Another job's folder beside it, made by the user: jobs/ lets it.
    beside = torch_job_unit
    beside.as_user(user, lambda: os.mkdir(existing / "jobs" / "job-2"))
    assert (existing / "jobs" / "job-2").stat().st_uid == user.pw_uid
