"""The node health check that Slurm runs: its decisions, and the program itself, installed by
its module into a temporary folder and run for real with stand-ins for sinfo, scontrol,
nvidia-smi and journalctl on PATH (the sandbox's tests drain a real Slurm node with it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.gpu_faults import Xid
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.node_health import (
    REASON_MAX,
    REASON_PREFIX,
    Readings,
    SlurmNode,
    decide,
    drain_reason,
    drained_findings,
    node_problems,
    parse_sinfo,
    parse_sinfo_nodes,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.node_health_run import (
    mounted,
    own_limits,
    slurmd_limits_path,
)

SMI_ROW = "0, 00000000:3B:00.0, 0\n"
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"


def test_a_healthy_node_has_no_problems() -> None:
    readings = Readings(
        gpus_expected=1,
        gpus_now=1,
        smi=(0, SMI_ROW, ""),
        shared_dir="/shared",
        shared_mounted=True,
        limits={"memlock": "infinity", "nofile": "1048576"},
        min_limits={"memlock": "infinity", "nofile": "1048576"},
    )
    assert node_problems(readings) == []


def test_every_kind_of_problem_is_named_gpus_first() -> None:
    readings = Readings(
        gpus_expected=2,
        gpus_now=1,
        smi=(0, "0, 00000000:3B:00.0, 4\n", ""),
        xids=[Xid("PCI:0000:3b:00", 79, "GPU has fallen off the bus."), Xid("PCI:0", 45, "")],
        shared_dir="/shared",
        shared_mounted=False,
        limits={"memlock": "8388608", "nofile": "1024"},
        min_limits={"memlock": "infinity", "nofile": "20000"},
    )
    assert node_problems(readings) == [
        "1 of its 2 GPU(s) are gone",
        "GPU 0 (00000000:3B:00.0) has 4 uncorrectable ECC error(s)",
        "new XID(s) in the kernel log: XID 79 on PCI:0000:3b:00 (GPU has fallen off the bus.)",
        "shared folder /shared not mounted",
        "memlock limit 8388608 below infinity",
        "nofile limit 1024 below 20000",
    ]


def test_a_shared_folder_that_hangs_and_a_silent_driver_are_problems() -> None:
    readings = Readings(
        smi=(9, "", "NVIDIA-SMI has failed because it couldn't communicate with the driver"),
        shared_dir="/shared",
        shared_mounted=None,
        shared_error="it did not answer within 5 s",
        limits={},
        min_limits={"memlock": "64K", "nofile": ""},
    )
    assert node_problems(readings) == [
        "nvidia-smi cannot read its GPUs: NVIDIA-SMI has failed because it couldn't "
        "communicate with the driver",
        "shared folder /shared not mounted (it did not answer within 5 s)",
        "memlock limit not read",
    ]


def test_no_shared_folder_and_no_minimums_are_not_looked_at() -> None:
    assert node_problems(Readings(limits={"memlock": "64"})) == []


def test_the_drain_reason_names_the_first_problem_and_counts_the_rest() -> None:
    assert drain_reason(["shared folder /shared not mounted"]) == (
        f"{REASON_PREFIX} shared folder /shared not mounted"
    )
    assert drain_reason(["a", "b", "c"]) == f"{REASON_PREFIX} a (and 2 more)"
    long = drain_reason(["x" * 500])
    assert len(long) == REASON_MAX
    assert long.endswith("...")


@pytest.mark.parametrize(
    ("line", "node"),
    [
        ("idle|none", SlurmNode("idle", "")),
        ("drained|torch-cluster health: a", SlurmNode("drained", "torch-cluster health: a")),
        ("draining|Prolog error", SlurmNode("draining", "Prolog error")),
        ("mixed-|none", SlurmNode("mixed", "")),
        ("idle*|Not responding", SlurmNode("idle", "Not responding")),
        ("", None),
    ],
)
def test_sinfo_state_and_reason(line: str, node: SlurmNode | None) -> None:
    assert parse_sinfo(line + "\n") == node


def test_a_node_with_problems_is_drained_once_and_someone_elses_drain_stays() -> None:
    reason = drain_reason(["b"])
    assert decide(["b"], SlurmNode("idle", "")) == ("drain", reason)
    assert decide(["b"], SlurmNode("allocated", "")) == ("drain", reason)
    assert decide(["b"], SlurmNode("drained", reason)) == ("", f"drained already: {reason}")
    # Drained by this check for another problem: the reason is brought up to date.
    assert decide(["b"], SlurmNode("drained", drain_reason(["a"]))) == ("drain", reason)
    assert decide(["b"], SlurmNode("drained", "maintenance")) == (
        "",
        "drained already: maintenance",
    )
    assert decide(["b"], None) == ("", "Slurm does not list this node")


def test_only_a_node_this_check_drained_is_taken_back() -> None:
    ours = drain_reason(["a"])
    assert decide([], SlurmNode("drained", ours)) == ("resume", ours)
    assert decide([], SlurmNode("draining", ours)) == ("resume", ours)
    assert decide([], SlurmNode("drained", "maintenance")) == ("", "healthy")
    assert decide([], SlurmNode("idle", "")) == ("", "healthy")


def test_check_yml_names_each_drained_or_down_node_of_the_group_and_why() -> None:
    nodes = parse_sinfo_nodes(
        "node0|idle|none\n"
        f"node1|drained|{REASON_PREFIX} shared folder /shared not mounted\n"
        "node2|down*|Not responding\n"
        "node3|draining|maintenance\n"
        "other|drained|not ours\n"
    )
    assert nodes["node2"] == {"state": "down", "reason": "Not responding"}
    found = drained_findings(nodes, ["node0", "node1", "node2", "node3", "node9"])
    assert [(f.subject, f.value) for f in found] == [
        ("node1", f"drained in Slurm: {REASON_PREFIX} shared folder /shared not mounted"),
        ("node2", "down in Slurm: Not responding"),
        ("node3", "draining in Slurm: maintenance"),
    ]
    assert {f.check for f in found} == {"slurm"}
    assert "takes the node back by itself" in found[0].fix
    assert "scontrol update NodeName=node3 State=RESUME" in found[2].fix


# --- The program, installed and run ---------------------------------------------------------


def _stand_in(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.fixture
def installed(tmp_path: Path, run_module) -> dict[str, Path]:
    """The check installed by its module into tmp_path, for a node with a shared folder that
    is not mounted, and stand-ins for Slurm's commands that log how they were called."""
    shared = tmp_path / "shared"
    shared.mkdir()
    paths = {
        "lib": tmp_path / "lib",
        "program": tmp_path / "sbin" / "torch-cluster-health",
        "prolog": tmp_path / "sbin" / "torch-cluster-health-prolog",
        "config": tmp_path / "etc" / "health.json",
        "state": tmp_path / "run" / "state.json",
        "bin": tmp_path / "bin",
        "calls": tmp_path / "calls.log",
        "sinfo": tmp_path / "sinfo.out",
    }
    args = {
        "node_name": "node1",
        "shared_dir": str(shared),
        "min_limits": {"nofile": "1", "memlock": ""},
        "lib_dir": str(paths["lib"]),
        "program": str(paths["program"]),
        "prolog": str(paths["prolog"]),
        "config": str(paths["config"]),
        "state_file": str(paths["state"]),
    }
    first = run_module("slurm_health_program", args)
    assert first.result, first.stdout + first.stderr
    assert first.result["changed"]
    again = run_module("slurm_health_program", args)
    assert again.result, again.stdout
    assert not again.result["changed"]
    paths["bin"].mkdir()
    paths["sinfo"].write_text("idle|none\n")
    _stand_in(paths["bin"], "sinfo", f'echo "sinfo $*" >> {paths["calls"]}\ncat {paths["sinfo"]}\n')
    _stand_in(paths["bin"], "scontrol", f'echo "scontrol $*" >> {paths["calls"]}\n')
    return paths


def _run(paths: dict[str, Path], *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{paths['bin']}:/usr/bin:/bin"}
    return subprocess.run(
        [str(paths["program"]), "--config", str(paths["config"]), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _calls(paths: dict[str, Path]) -> list[str]:
    text = paths["calls"].read_text() if paths["calls"].exists() else ""
    paths["calls"].write_text("")
    return [line for line in text.splitlines() if line.startswith("scontrol")]


def test_the_installed_check_drains_a_node_whose_shared_folder_is_gone(installed) -> None:
    config = json.loads(installed["config"].read_text())
    assert config["shared_dir"].endswith("/shared")
    assert config["node"] == "node1"
    done = _run(installed)
    assert done.returncode == 0, done.stderr
    reason = f"{REASON_PREFIX} shared folder {config['shared_dir']} not mounted"
    assert _calls(installed) == [f"scontrol update NodeName=node1 State=DRAIN Reason={reason}"]
    assert done.stdout.strip() == f"node1: drain: {reason}"
    # Drained already with that reason: nothing more to say to Slurm.
    installed["sinfo"].write_text(f"drained|{reason}\n")
    assert _run(installed).returncode == 0
    assert _calls(installed) == []
    # The prolog fails on the same problem, so that no job starts there.
    assert _run(installed, "--prolog").returncode == 1
    # The folder mounted again (the file system's root stands in for it): taken back.
    config["shared_dir"] = "/"
    installed["config"].write_text(json.dumps(config))
    done = _run(installed)
    assert done.returncode == 0, done.stderr
    assert _calls(installed) == ["scontrol update NodeName=node1 State=RESUME"]
    assert _run(installed, "--prolog").returncode == 0


def test_a_hardware_xid_keeps_the_node_out_until_cleared(installed) -> None:
    config = json.loads(installed["config"].read_text())
    config["shared_dir"] = ""
    installed["config"].write_text(json.dumps(config))
    log = installed["bin"] / "kernel.log"
    log.write_text(XID_79)
    _stand_in(installed["bin"], "nvidia-smi", f"printf '{SMI_ROW}'\n")
    _stand_in(installed["bin"], "journalctl", f"cat {log}\n")
    assert _run(installed, "--once").stdout.strip() == (
        "node1: new XID(s) in the kernel log: XID 79 on PCI:0000:3b:00 "
        "(pid=0, GPU has fallen off the bus.)"
    )
    # The kernel log has nothing new since: the XID is still there.
    log.write_text("")
    assert _run(installed, "--once").returncode == 1
    assert json.loads(installed["state"].read_text())["xids"][0][1] == 79
    assert _run(installed, "--once", "--clear").stdout.strip() == "node1: healthy"


def test_a_limit_below_the_minimum_is_found(installed) -> None:
    config = json.loads(installed["config"].read_text())
    config.update(shared_dir="", min_limits={"nofile": str(2**40)})
    installed["config"].write_text(json.dumps(config))
    done = _run(installed, "--once")
    assert done.returncode == 1
    assert done.stdout.startswith("node1: nofile limit ")
    assert "below 1099511627776" in done.stdout


def test_check_mode_and_absent_change_nothing_then_remove_everything(installed, run_module) -> None:
    args = {
        "node_name": "node1",
        "lib_dir": str(installed["lib"]),
        "program": str(installed["program"]),
        "prolog": str(installed["prolog"]),
        "config": str(installed["config"]),
        "state_file": str(installed["state"]),
        "state": "absent",
    }
    checked = run_module("slurm_health_program", args, check=True)
    assert checked.result
    assert checked.result["changed"]
    assert installed["program"].exists()
    removed = run_module("slurm_health_program", args)
    assert removed.result
    assert removed.result["changed"]
    assert not installed["program"].exists()
    assert not installed["config"].exists()
    assert not (installed["lib"] / "ansible_collections").exists()
    assert os.listdir(installed["lib"]) == []


def test_a_bind_mount_counts_as_mounted_and_a_plain_folder_does_not(tmp_path: Path) -> None:
    # The served folder's server: /shared is a bind mount of /srv/torch-cluster/shared on the
    # same file system (os.path.ismount says no); the clients mount it with sshfs or NFS.
    shared = tmp_path / "shared"
    shared.mkdir()
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 0:21 / / rw,relatime - overlay overlay rw\n"
        f"90 22 0:21 /srv/torch-cluster/shared {shared} rw,relatime - overlay overlay rw\n"
    )
    assert mounted(str(shared), str(table)) == (True, "")
    assert mounted(str(tmp_path), str(table)) == (False, "")
    assert mounted(str(shared), str(tmp_path / "none"))[0] is None
    # Mounted, but its stat fails (a dead FUSE mount says "Transport endpoint is not
    # connected"; a mount point gone from under the table stands in for it).
    gone = tmp_path / "gone"
    table.write_text(f"91 22 0:21 / {gone} rw - fuse.sshfs x rw\n")
    assert mounted(str(gone), str(table)) == (None, "No such file or directory")


def test_slurmds_limits_are_read_from_its_process_and_else_from_this_one(tmp_path: Path) -> None:
    pid_file = tmp_path / "slurmd.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    assert slurmd_limits_path(str(pid_file)) == f"/proc/{os.getpid()}/limits"
    assert set(own_limits(slurmd_limits_path(str(pid_file)))) == {"memlock", "nofile"}
    assert slurmd_limits_path(str(tmp_path / "none.pid")) == "/proc/self/limits"
