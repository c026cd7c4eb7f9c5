"""The Slurm launcher's logic: its batch script (run for real by bash here, with srun standing in
for Slurm's), and Slurm's job states and srun's lines in the launcher's words. The scontrol and
srun texts are what the sandbox's Slurm 22.05 printed."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.action import torch_job_watch as watch_action
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job import fence as fence_file
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.fence import (
    FENCE_MARGIN_S,
    SCANCEL_RETRY_S,
    cancel_slurm_job,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.inputs import input_problems
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.slurm import (
    PORT_SPREAD,
    allocation_command,
    blocking_jobs,
    cancel_wait_states,
    controller_nodes,
    job_phase,
    jobs_to_wait_for,
    node_states,
    parse_scontrol,
    parse_squeue_states,
    preflight_problems,
    sbatch_script,
    srun_errors,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    FAILED,
    RUNNING,
    STOPPED,
    SUCCEEDED,
    TIMED_OUT,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.watch import (
    JOB_FAILED,
    JOB_RUNNING,
    JOB_STOPPED,
    JOB_SUCCEEDED,
    JOB_TIMED_OUT,
    first_failure,
    judge,
)

DATA = Path(__file__).parents[1] / "data" / "slurm"


def text(name: str) -> str:
    return (DATA / name).read_text()


# --- The batch script -----------------------------------------------------------
# What each node's part runs: a Python that writes down its argv, environment and folder.
PROBE = """
import json, os, sys
with open(os.path.join(os.environ["PROBE_DIR"], os.environ["SLURMD_NODENAME"] + ".json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}, f)
print("probe ran", flush=True)
"""


def nodes(tmp_path: Path) -> list[dict]:
    return [
        {
            "name": name,
            "rank": rank,
            "env": {
                "PROBE_DIR": str(tmp_path),
                "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]: ",
                "MY_SETTING": 'it\'s $HOME; "quoted"',
            },
            "command": [sys.executable, "-c", PROBE, f"--node-rank={rank}", "a b", "$x"],
        }
        for rank, name in enumerate(["node0", "gpu-1.example"])
    ]


def script(tmp_path: Path, **extra: object) -> str:
    arguments = {
        "job_id": "job-1",
        "attempt": 2,
        "nodes": nodes(tmp_path),
        "job_dir": str(tmp_path / "job"),
        "output_dir": str(tmp_path / "out"),
        "log": str(tmp_path / "node.log"),
    }
    return sbatch_script(**(arguments | extra))


def run_step(tmp_path: Path, text: str, node: str) -> subprocess.CompletedProcess[str]:
    """Run the batch script on a node with `srun` standing in for Slurm's: it runs the script's
    step (the bash -c argument) once, with SLURMD_NODENAME set as slurmstepd would."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    srun = fake / "srun"
    srun.write_text('#!/bin/bash\nfor last; do :; done\nexec bash -c "$last"\n')
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "out").mkdir(exist_ok=True)
    path = tmp_path / "job.sbatch"
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",
        "SLURMD_NODENAME": node,
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "node0,gpu-1.example",
    }
    # The script sets PATH for itself; the fake srun must still be found first.
    body = text.replace("export PATH=/usr/local/sbin", f"export PATH={fake}:/usr/local/sbin")
    path.write_text(body)
    return subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, check=False)


def test_the_batch_script_asks_slurm_for_every_node_once_and_whole() -> None:
    body = sbatch_script(
        job_id="j", attempt=1, nodes=[{"name": "n0", "rank": 0, "env": {}, "command": ["x"]},
                                       {"name": "n1", "rank": 1, "env": {}, "command": ["x"]}],
        job_dir="/jobs/j", output_dir="/jobs/j/output", log="/jobs/j/node.log",
        partition="gpu", timeout_s=61, gpus_per_node=4,
    )  # fmt: skip
    directives = re.findall(r"^#SBATCH (\S+)$", body, re.M)
    assert directives == [
        "--job-name=torch-j",
        "--nodes=2",
        "--nodelist=n0,n1",
        "--ntasks-per-node=1",
        "--exclusive",
        "--chdir=/jobs/j/output",
        "--output=/jobs/j/slurm-%j.out",
        "--open-mode=append",
        "--export=NONE",
        "--partition=gpu",
        "--time=2",
        "--gres=gpu:4",
    ]
    assert re.search(r"^srun --export=ALL --kill-on-bad-exit=1 .* &$", body, re.M)


def test_a_cancelled_batch_shell_ends_at_once_and_takes_srun_with_it(tmp_path: Path) -> None:
    """scancel sends SIGTERM to the batch step. srun, which waits for a lost node's step until
    Slurm's KillWait (here: a stand-in that ignores SIGTERM), does not hold the node."""
    fake = tmp_path / "bin"
    fake.mkdir()
    srun = fake / "srun"
    srun.write_text("#!/bin/bash\ntrap '' TERM\necho $$ > \"$SRUN_PID\"\nsleep 60 & wait\n")
    srun.chmod(0o755)
    path = tmp_path / "job.sbatch"
    path.write_text(
        script(tmp_path).replace("export PATH=/usr/local", f"export PATH={fake}:/usr/local")
    )
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",
        "SLURM_JOB_NUM_NODES": "2",
        "SRUN_PID": str(tmp_path / "pid"),
    }
    shell = subprocess.Popen(["bash", str(path)], env=env)
    deadline = time.monotonic() + 10
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    began = time.monotonic()
    shell.terminate()
    assert shell.wait(timeout=5) == 143
    assert time.monotonic() - began < 2
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 2
    while fence_file.process_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not fence_file.process_running(pid), "srun outlived the batch shell"


def test_the_batch_script_without_limits_asks_for_no_time_partition_or_gpus(tmp_path: Path) -> None:
    body = script(tmp_path)
    assert not re.search(r"^#SBATCH --(time|partition|gres)", body, re.M)


@pytest.mark.parametrize(("rank", "node"), [(0, "node0"), (1, "gpu-1.example")])
def test_each_node_runs_its_own_command_environment_and_folder(
    tmp_path: Path, rank: int, node: str
) -> None:
    done = run_step(tmp_path, script(tmp_path), node)
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / f"{node}.json").read_text())
    assert seen["argv"] == [f"--node-rank={rank}", "a b", "$x"]
    assert seen["cwd"] == str(tmp_path / "out")
    env = seen["env"]
    assert env["MY_SETTING"] == 'it\'s $HOME; "quoted"'
    assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]: "
    assert env["TORCH_JOB_NODE_RANK"] == str(rank)
    # The step's output goes to the node's log, after a line that names the Slurm job.
    log = (tmp_path / "node.log").read_text()
    assert log == (
        f"=== torch-cluster: job job-1, attempt 2, Slurm job 77, node {node} "
        f"(node_rank {rank}) ===\nprobe ran\n"
    )


def test_a_node_that_is_not_the_jobs_refuses_to_run(tmp_path: Path) -> None:
    done = run_step(tmp_path, script(tmp_path), "node7")
    assert done.returncode == 2
    assert "node7 is not a node of job job-1" in done.stderr
    assert not list(tmp_path.glob("*.json"))


def test_a_batch_script_needs_nodes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one node"):
        script(tmp_path, nodes=[])


def test_the_step_script_is_valid_bash(tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(script(tmp_path))
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0


# --- The fence beside torchrun ---------------------------------------------------
# A "torchrun" that starts a "worker" (its child) and waits for it, as torchrun does.
TORCHRUN = """
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
with open(os.environ["PROBE_DIR"] + "/worker.pid", "w") as f:
    f.write(str(worker.pid))
print("training", flush=True)
sys.exit(worker.wait() if sys.argv[1] == "wait" else int(sys.argv[1]))
"""


def fenced_nodes(tmp_path: Path, beat: Path, how: str, fence: list[str] | None = None) -> list:
    fence = fence or [sys.executable, fence_file.__file__, "torch-job-j", str(beat), "1",
                      str(tmp_path / "node.log"), "node0"]  # fmt: skip
    return [{"name": "node0", "rank": 0, "env": {"PROBE_DIR": str(tmp_path), "TORCH_JOB_ID": "j"},
             "command": [sys.executable, "-c", TORCHRUN, how], "fence": fence}]  # fmt: skip


def alive(pid: int) -> bool:
    return fence_file.process_running(pid)


def test_a_node_cut_off_from_the_watch_kills_its_part_of_the_slurm_job(tmp_path: Path) -> None:
    """No poll touches the heartbeat: after the fence's timeout (1 s) torchrun and its worker
    are killed, the log says why, the fence asks Slurm to cancel the job (scancel answers at
    its second try, as a controller back from a cut would), and the step ends by SIGKILL as it
    would without a fence."""
    beat = tmp_path / "j.heard"
    beat.write_text("")
    fake = tmp_path / "bin"
    fake.mkdir()
    scancel = fake / "scancel"
    scancel.write_text(
        f'#!/bin/bash\necho "$@" >> {tmp_path}/scancel.calls\n'
        f'[ "$(wc -l < {tmp_path}/scancel.calls)" -ge 2 ] && exit 0\n'
        'echo "scancel: error: Unable to contact slurm controller (connect failure)" >&2; exit 1\n'
    )
    scancel.chmod(0o755)
    began = time.monotonic()
    done = run_step(tmp_path, script(tmp_path, nodes=fenced_nodes(tmp_path, beat, "wait")), "node0")
    took = time.monotonic() - began
    # The step ended by SIGKILL; the batch shell exits with srun's status, as 128 + 9.
    assert done.returncode == 137, (done.returncode, done.stderr)
    assert 1 + SCANCEL_RETRY_S <= took < 1 + FENCE_MARGIN_S + SCANCEL_RETRY_S + 2, took
    log = (tmp_path / "node.log").read_text()
    assert "training\n=== torch-cluster: node node0 fenced itself: its watcher" in log
    assert "=== torch-cluster: node node0, after its fence: Slurm cancelled job 77 ===" in log
    assert (tmp_path / "scancel.calls").read_text() == "77\n77\n"
    worker = int((tmp_path / "worker.pid").read_text())
    assert not alive(worker), "the worker outlived the fence"


def test_the_fences_cancel_ends_at_an_ended_job_or_its_time() -> None:
    answers = iter(
        [(1, "Unable to contact slurm controller"), (1, "Job/step already completing or completed")]
    )

    def run(argv, **_):
        code, err = next(answers)
        return subprocess.CompletedProcess(argv, code, "", err)

    waits = []
    said = cancel_slurm_job("8", until=1e12, run=run, sleep=waits.append)
    assert said == "Slurm job 8 had ended already"
    assert waits == [SCANCEL_RETRY_S]
    never = lambda argv, **_: subprocess.CompletedProcess(argv, 1, "", "connect failure")  # noqa: E731
    said = cancel_slurm_job("8", until=0, run=never, sleep=waits.append)
    assert said == "Slurm's controller did not take the cancel of job 8: connect failure"


def test_a_watched_node_runs_its_part_to_the_end_and_the_fence_goes_with_it(
    tmp_path: Path,
) -> None:
    """The heartbeat touched every 0.3 s, twice past the fence's timeout: the job ends by
    itself with its own exit status, and nothing of the fence is left."""
    beat = tmp_path / "j.heard"
    beat.write_text("")
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(0.3):
            os.utime(beat)

    keeper = threading.Thread(target=keep)
    keeper.start()
    code = "import time, sys; time.sleep(2.5); sys.exit(3)"
    nodes = fenced_nodes(tmp_path, beat, "3")
    nodes[0]["command"] = [sys.executable, "-c", code]
    try:
        done = run_step(tmp_path, script(tmp_path, nodes=nodes), "node0")
    finally:
        stop.set()
        keeper.join()
    assert done.returncode == 3, done.stderr
    assert "fenced itself" not in (tmp_path / "node.log").read_text()
    left = subprocess.run(["pgrep", "-f", str(beat)], capture_output=True, text=True, check=False)
    assert left.stdout == "", f"the fence is still running: {left.stdout}"


def test_the_fence_gets_torchruns_pid_and_none_of_the_jobs_environment(tmp_path: Path) -> None:
    """The job's processes are found by TORCH_JOB_ID (stacks, leftovers): the fence has none."""
    probe = tmp_path / "fence.json"
    record = (
        "import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, "
        f"open({str(probe)!r}, 'w'))"
    )
    nodes = fenced_nodes(tmp_path, tmp_path / "j.heard", "0", [sys.executable, "-c", record, "x"])
    done = run_step(tmp_path, script(tmp_path, nodes=nodes), "node0")
    assert done.returncode == 0, done.stderr
    seen = json.loads(probe.read_text())
    assert seen["argv"][0] == "x"
    assert seen["argv"][1].isdigit(), seen["argv"]
    assert seen["argv"][2] == "77", "the Slurm job's id"
    assert "TORCH_JOB_ID" not in seen["env"]
    assert "PATH" in seen["env"]


def test_without_a_fence_the_step_execs_torchrun_itself(tmp_path: Path) -> None:
    body = script(tmp_path)
    assert "fence=()" in body
    assert 'if [ "${#fence[@]}" -eq 0 ]; then exec "${command[@]}"; fi' in body


# --- Jobs that share their nodes --------------------------------------------------
def test_the_allocation_decides_the_port_and_the_processes_not_the_scripts_arguments() -> None:
    command = ["torchrun", "--nnodes=2", "--nproc-per-node=2", "--master-port=10086",
               "--tee=3", "train.py", "--master-port=1", "--nproc-per-node=9"]  # fmt: skip
    assert allocation_command(command, shared=True, gpus=1) == [
        "torchrun", "--nnodes=2", "--tee=3", "train.py", "--master-port=1", "--nproc-per-node=9",
    ]  # fmt: skip
    assert allocation_command(command, shared=False, gpus=0) == command
    assert "--master-port=10086" in allocation_command(command, shared=False, gpus=1)


def test_a_job_asking_for_gpus_shares_its_nodes_and_takes_a_port_and_processes_of_its_own(
    tmp_path: Path,
) -> None:
    # A stand-in for torchrun that writes down its argv and environment, as PROBE does.
    torchrun = tmp_path / "torchrun"
    torchrun.write_text(f"#!{sys.executable}\n{PROBE}")
    torchrun.chmod(0o755)
    shaped = [
        {**node, "command": [str(torchrun), f"--node-rank={node['rank']}", "--nproc-per-node=2",
                             "--master-port=10086", "train.py", "--epochs=1"]}
        for node in nodes(tmp_path)
    ]  # fmt: skip
    body = script(tmp_path, nodes=shaped, gpus_per_node=1, exclusive=False, master_port=10086)
    directives = re.findall(r"^#SBATCH (\S+)$", body, re.M)
    assert "--exclusive" not in directives
    assert "--gres=gpu:1" in directives
    done = run_step(tmp_path, body, "node0")
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "node0.json").read_text())
    assert seen["argv"] == ["--node-rank=0", "train.py", "--epochs=1"]
    port = 10086 + 1 + 77 % PORT_SPREAD  # SLURM_JOB_ID is 77 in run_step
    assert seen["env"]["PET_MASTER_PORT"] == str(port)
    # Slurm's count of the node's GPUs is not set here: the asked count stands in.
    assert seen["env"]["PET_NPROC_PER_NODE"] == "1"
    assert (
        "torch-cluster: 1 process(es), one per GPU Slurm gave (GPU ? of the node, "
        "CUDA_VISIBLE_DEVICES=not set); "
        f"master port {port} (the node may run other jobs)"
    ) in (tmp_path / "node.log").read_text()


def test_whole_nodes_keep_the_inventorys_port_and_nproc(tmp_path: Path) -> None:
    body = script(tmp_path, gpus_per_node=4)
    assert "#SBATCH --exclusive" in body
    assert "PET_MASTER_PORT" not in body
    assert 'export PET_NPROC_PER_NODE="${SLURM_GPUS_ON_NODE:-4}"' in body


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({"train_gpus": "1"}, "gpus=1 asks Slurm for GPUs: add -e train_launcher=slurm"),
        ({"train_gpus": "one", "train_launcher": "slurm"}, "gpus (train_gpus) must be a whole"),
        (
            {"train_gpus": "2", "train_nproc": "4", "train_launcher": "slurm"},
            "nproc=4 and gpus=2 disagree",
        ),
        ({"train_exclusive": "sometimes"}, "train_exclusive must be auto, true or false"),
    ],
)
def test_gpus_asked_without_slurm_or_against_nproc_are_refused(inputs: dict, expected: str) -> None:
    (problem,) = input_problems(inputs)
    assert problem.startswith(expected)


def test_gpus_through_slurm_or_its_export_pass() -> None:
    for extra in ({"train_launcher": "slurm"}, {"train_export": "sbatch"}):
        for nproc in ("auto", "2"):
            assert input_problems({"train_gpus": "2", "train_nproc": nproc, **extra}) == []


# --- Slurm's job states ------------------------------------------------------------
def test_scontrol_is_read_into_fields() -> None:
    fields = parse_scontrol(text("scontrol-failed.txt"))
    assert fields["JobState"] == "FAILED"
    assert fields["ExitCode"] == "1:0"
    assert fields["BatchHost"] == "node0"
    assert fields["NodeList"] == "node[0-1]"


PHASES = {
    "PENDING": "queued",
    "CONFIGURING": "queued",
    "RUNNING": RUNNING,
    "COMPLETING": RUNNING,
    "COMPLETED": SUCCEEDED,
    "FAILED": FAILED,
    "NODE_FAIL": FAILED,
    "OUT_OF_MEMORY": FAILED,
    "TIMEOUT": TIMED_OUT,
    "CANCELLED": STOPPED,
    "PREEMPTED": STOPPED,
}


@pytest.mark.parametrize("state", PHASES)
def test_each_slurm_state_has_a_phase(state: str) -> None:
    assert job_phase({"JobState": state}) == PHASES[state]


def test_a_waiting_job_says_what_it_waits_for() -> None:
    fields = parse_scontrol(text("scontrol-pending.txt"))
    states = node_states(fields, "", ["node0", "node1"])
    assert {s.state for s in states.values()} == {RUNNING}
    assert states["node0"].detail == "queued in Slurm: PENDING (Resources)"
    assert judge(states, False).job == JOB_RUNNING


def test_srun_names_the_node_that_failed_first() -> None:
    assert srun_errors(text("srun-killed-workers.out")) == [
        ("node1", "task 1: Exited with exit code 1"),
        ("node0", "task 0: Exited with exit code 1"),
    ]


def test_a_failed_job_fails_the_first_node_and_the_others_were_ended_by_slurm() -> None:
    fields = parse_scontrol(text("scontrol-failed.txt"))
    states = node_states(fields, text("srun-killed-workers.out"), ["node0", "node1"])
    assert list(states) == ["node1", "node0"]
    assert states["node1"].state == FAILED
    assert "task 1: Exited with exit code 1" in states["node1"].detail
    assert states["node0"].state == STOPPED
    assert states["node0"].detail.startswith("ended by Slurm after node1 failed")
    verdict = judge(states, False)
    assert (verdict.job, first_failure(states, verdict.bad_nodes)[0]) == (JOB_FAILED, "node1")


def test_a_failed_job_without_srun_lines_fails_every_node_with_slurms_reason() -> None:
    fields = parse_scontrol(text("scontrol-failed.txt"))
    states = node_states(fields, "", ["node0", "node1"])
    assert {s.state for s in states.values()} == {FAILED}
    assert states["node0"].detail == "Slurm job FAILED, exit code 1:0, NonZeroExitCode"


def test_a_completed_job_succeeded_everywhere() -> None:
    fields = parse_scontrol(text("scontrol-completed.txt"))
    states = node_states(fields, "", ["node0", "node1"])
    assert judge(states, False).job == JOB_SUCCEEDED


def test_a_cancelled_job_is_stopped_and_a_requested_stop_says_so() -> None:
    fields = parse_scontrol(text("scontrol-cancelled.txt"))
    states = node_states(fields, "srun: error: node1: task 1: Killed\n", ["node0", "node1"])
    assert {s.state for s in states.values()} == {STOPPED}
    assert judge(states, True).job == JOB_STOPPED


def test_a_job_out_of_time_timed_out() -> None:
    states = node_states({"JobState": "TIMEOUT"}, "", ["node0", "node1"])
    assert judge(states, False).job == JOB_TIMED_OUT


# --- What is refused before a submit ------------------------------------------------
def test_slurm_missing_on_the_master_is_refused_with_the_playbook_to_run() -> None:
    (problem,) = preflight_problems([], ["node0"], "", has_scontrol=False)
    assert "Slurm is not installed on the master" in problem
    assert "playbooks/slurm.yml" in problem


def test_the_nodes_that_run_slurms_controller_are_named_by_address_or_name() -> None:
    config = text("scontrol-show-config.txt")
    # The sandbox's: SlurmctldHost[0] = node0(10.89.0.147).
    names, addresses = ["node0", "node1"], {"node0": "10.89.0.147", "node1": "10.89.0.9"}
    assert controller_nodes(config, names, addresses) == ["node0"]
    # An inventory name that is not the host's name: its address.
    renamed = {"gpu-a": "10.89.0.9", "b": "10.89.0.147"}
    assert controller_nodes(config, ["gpu-a", "b"], renamed) == ["b"]
    # A SlurmctldHost without an address (slurm.conf written by hand): its name.
    assert controller_nodes("SlurmctldHost[0]          = node1\n", names, addresses) == ["node1"]
    assert controller_nodes("SlurmctldHost[0]          = head\n", names, addresses) == []
    assert controller_nodes("SlurmctldHost[0]          = head\n", names, {}) == []


def test_a_controller_that_does_not_answer_is_refused() -> None:
    ping = "Slurmctld(primary) at node0 is DOWN\n"
    (problem,) = preflight_problems([], ["node0"], ping, has_scontrol=True)
    assert problem.startswith("Slurm's controller does not answer (Slurmctld(primary) at node0")


def test_nodes_slurm_does_not_know_are_named() -> None:
    ping = "Slurmctld(primary) at node0 is UP\n"
    (problem,) = preflight_problems(["node0"], ["node0", "node1"], ping, has_scontrol=True)
    assert problem.startswith("Slurm does not know node1 (its nodes: node0)")
    assert preflight_problems(["node0", "node1"], ["node0", "node1"], ping, True) == []


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({"train_launcher": "pbs"}, "train_launcher must be one of systemd, slurm (got 'pbs')"),
        ({"train_export": "yaml"}, "train_export must be empty or sbatch (got 'yaml')"),
    ],
)
def test_an_unknown_launcher_or_export_is_refused(inputs: dict, expected: str) -> None:
    (problem,) = input_problems(inputs)
    assert problem.startswith(expected)


def test_the_known_launchers_and_exports_pass() -> None:
    for launcher in ("systemd", "slurm"):
        for export in ("", "sbatch"):
            assert input_problems({"train_launcher": launcher, "train_export": export}) == []


def test_a_wait_in_slurms_queue_is_no_silence_of_rank_0() -> None:
    queued = {"slurm": {"state": "PENDING", "reason": "Resources"}, "quiet_for": 900.0}
    running = {"slurm": {"state": "RUNNING", "reason": "None"}, "quiet_for": 12.5}
    assert watch_action._QueueClock.quiet(queued) == 0.0
    assert watch_action._QueueClock.quiet(running) == 12.5
    assert watch_action._QueueClock.quiet({"quiet_for": 3}) == 3.0  # the default launcher


def test_a_cancel_waits_out_completing_unless_a_node_was_lost() -> None:
    """Slurm keeps a job COMPLETING while a node it ran on does not answer: after a loss the
    cancel stops waiting once the job runs nowhere."""
    assert cancel_wait_states([]) == ("PD", "CF", "R", "S", "CG")
    assert cancel_wait_states(["node1"]) == ("PD", "CF", "R", "S")


def test_an_earlier_attempts_job_completing_on_a_lost_node_holds_up_neither_submit_nor_cancel() -> (
    None
):
    """Attempt 1 (Slurm job 2) lost node2: Slurm keeps it COMPLETING until node2 answers. The
    next attempt (job 3, on the other nodes) is submitted beside it, and its cancel waits for
    itself only; stop.yml, which names no job, still waits for both."""
    jobs = parse_squeue_states("2 CG\n3 R\n")
    assert jobs == [("2", "CG"), ("3", "R")]
    assert blocking_jobs([("2", "CG")]) == []
    assert blocking_jobs(jobs) == ["3"]
    assert jobs_to_wait_for([("2", "CG"), ("3", "CG")], [], own_job="3") == ["3"]
    assert jobs_to_wait_for([("2", "CG"), ("3", "CG")], ["node1"], own_job="3") == []
    assert jobs_to_wait_for([("2", "CG"), ("3", "R")], ["node1"], own_job="3") == ["3"]
    assert jobs_to_wait_for([("2", "CG"), ("3", "CG")], []) == ["2", "3"]
    assert jobs_to_wait_for([("2", "PD")], [], own_job="3") == ["2"]
