"""Job inputs, progress lines in the log, the digests that decide what to copy, SSH."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.addresses import (
    address_problem,
    own_addresses,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.digests import (
    subtrees_digest,
    tree_digest,
    tree_size,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.peers import (
    unreached_peers,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.proc import (
    job_processes,
    port_listeners,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.ssh import ssh_argv
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.inputs import (
    input_problems,
    one_or_more,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.log_reader import (
    LogScan,
    scan_log,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.logs import (
    progress_matcher,
    rank_line,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.result_files import (
    matching_files,
    rsync_filters,
)

GOOD = {
    "job_id": "mnist-1",
    "nproc": "auto",
    "train_timeout": "0",
    "train_max_restarts": "2",
    "train_watch_interval": "25",
    "train_user": "ml",
    "ssh_trust_user": "ml",
    "nodes": ["node0", "node1"],
    "hosts": ["node1", "node0"],
    "train_result_files": ["metrics.json", "*.pt", "logs/**"],
    "train_output_copies": "1",
    "train_shared_dir": "auto",
    "train_code_spread_mb": "32",
}
BAD = {
    "job_id": ("bad id!", "job_id must be 1 to 64 letters"),
    "nproc": ("0", "nproc must be a positive integer or auto (got '0')"),
    "train_timeout": ("-5", "train_timeout must be a whole number, 0 or more (got '-5')"),
    "train_max_restarts": ("two", "train_max_restarts must be a whole number"),
    "train_code_spread_mb": ("-1", "train_code_spread_mb must be a whole number, 0 or more"),
    "train_watch_interval": ("0", "train_watch_interval must be a whole number of seconds"),
    "train_progress_regex": ("step=(", "train_progress_regex is not a regular expression"),
    "train_follow_max_lines": ("0", "train_follow_max_lines must be a whole number of lines"),
    "train_user": ("ops", "train_user (ops) must be ssh_trust_user (ml)"),
    "train_writable_paths": (["/data/cache", "cache"], "train_writable_paths must hold absolute"),
    "hosts": (["node0", "node2"], "node2 not in train_nodes (node0, node1)"),
    "train_result_files": (["*.pt", "../secrets"], "must be relative to the output folder"),
    "train_output_copies": ("0", "train_output_copies must be a whole number, 1 or more"),
    "train_shared_dir": ("shared", "train_shared_dir must be auto, empty, or an absolute path"),
}  # fmt: skip


def test_good_inputs_have_no_problems() -> None:
    assert input_problems(GOOD) == []


@pytest.mark.parametrize("name", list(BAD))
def test_each_bad_input_is_named_alone(name: str) -> None:
    value, words = BAD[name]
    problems = input_problems({**GOOD, name: value})
    assert len(problems) == 1
    assert words in problems[0]
    others = [other for other in BAD if other != name]
    assert not any(other in problems[0] for other in others)


@pytest.mark.parametrize("value", ["1", "3", 3])
def test_a_count_of_one_or_more_passes(value: object) -> None:
    assert one_or_more({"train_limit_nofile": value}, "train_limit_nofile") == []
    assert one_or_more({}, "train_limit_nofile") == []  # unset: 1


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_count_below_one_is_named_with_its_unit_and_why(value: str) -> None:
    problems = one_or_more({"copies": value}, "copies", "nodes", ": one keeps the output")
    assert problems == [
        f"copies must be a whole number of nodes, 1 or more (got {value!r}): one keeps the output"
    ]
    assert one_or_more({"copies": value}, "copies") == [
        f"copies must be a whole number, 1 or more (got {value!r})"
    ]


def test_root_as_the_training_user_is_refused_unless_allowed() -> None:
    as_root = {**GOOD, "train_user": "root", "ssh_trust_user": "root"}
    (problem,) = input_problems(as_root)
    assert problem.startswith("train_user is root: every job would run as root on every node")
    assert "cluster_allow_root: true" in problem
    assert input_problems({**as_root, "allow_root": True}) == []


@pytest.mark.parametrize("shared", ["auto", "", "/lustre/jobs"])
def test_the_shared_folder_is_auto_none_or_a_path(shared: str) -> None:
    assert input_problems({**GOOD, "train_shared_dir": shared}) == []


def test_an_empty_job_id_is_one_to_be_made_up() -> None:
    assert input_problems({**GOOD, "job_id": ""}) == []


def test_without_ssh_trust_user_in_the_inventory_train_user_is_free() -> None:
    # The preflight then proves the SSH trust as train_user on the master instead.
    assert input_problems({**GOOD, "ssh_trust_user": "", "train_user": "ops"}) == []


def write(path: Path, text: str) -> None:
    with path.open("a") as log:
        log.write(text)


def test_the_newest_progress_line_of_rank_0_and_where_to_read_on(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    matches = progress_matcher(["progress "], r"^Epoch \d+ \|")
    write(
        log,
        "=== torch-cluster: job j, attempt 1 ===\n"
        "W1203 09:23:43.871000 1565 torch/distributed/run.py:982] progress of torchrun\n"
        "[rank0]: start\n[rank0]: progress step=1\n[rank1]: Epoch 9 | from rank 1\n"
        "[rank0]: noise\n[rank0]: Epoch 3 | loss 0.5\n[rank0]: partial li",
    )
    scan = scan_log(str(log), 0, matches)
    assert (scan.progress, scan.last_line) == ("Epoch 3 | loss 0.5", "Epoch 3 | loss 0.5")
    assert scan.offset == log.stat().st_size - len("[rank0]: partial li")
    write(
        log, "ne\n[rank0]: progress step=2\n[rank0]: [rank0]: Traceback (most recent call last):\n"
    )
    later = scan_log(str(log), scan.offset, matches)
    assert (later.progress, later.offset) == ("progress step=2", log.stat().st_size)
    assert later.last_line == "Traceback (most recent call last):"
    assert scan_log(str(log), later.offset, matches).progress == ""


def test_a_line_tells_which_rank_wrote_it() -> None:
    assert rank_line("[rank12]: Epoch 3") == (12, "Epoch 3")
    assert rank_line("[rank2]: [rank2]: ValueError: boom") == (2, "ValueError: boom")
    assert rank_line("E1203 09:23:51.353000 1565 api.py:1002] failed (exitcode: 1)") is None


def test_a_log_read_from_a_later_offset_skips_earlier_runs(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    write(log, "[rank0]: progress old run\n")
    start = log.stat().st_size
    write(log, "[rank0]: no progress yet\n")
    assert scan_log(str(log), start, progress_matcher(["progress "])).progress == ""


def test_a_replaced_log_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    write(log, "[rank0]: progress new\n")
    assert scan_log(str(log), 10_000, progress_matcher(["progress "])).progress == "progress new"


def test_a_missing_log_has_no_progress(tmp_path: Path) -> None:
    assert scan_log(str(tmp_path / "none"), 5, progress_matcher(["p"])) == LogScan("", "", 5)


def make_tree(root: Path) -> None:
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "main.py").write_text("print(1)\n")
    (root / "pkg" / "util.py").write_text("x = 1\n")
    (root / "pkg" / "__pycache__" / "util.pyc").write_bytes(b"\0")


def test_the_code_digest_follows_paths_and_contents_not_caches(tmp_path: Path) -> None:
    make_tree(tmp_path / "a")
    make_tree(tmp_path / "b")
    digest = tree_digest(str(tmp_path / "a"))
    assert digest == tree_digest(str(tmp_path / "b"))
    (tmp_path / "b" / "pkg" / "__pycache__" / "other.pyc").write_bytes(b"1")
    assert tree_digest(str(tmp_path / "b")) == digest
    (tmp_path / "b" / "pkg" / "util.py").write_text("x = 2\n")
    assert tree_digest(str(tmp_path / "b")) != digest
    assert tree_digest(str(tmp_path / "missing")) == ""


def test_the_code_size_counts_what_the_digest_counts(tmp_path: Path) -> None:
    make_tree(tmp_path / "a")
    assert tree_size(str(tmp_path / "a")) == len("print(1)\n") + len("x = 1\n")
    (tmp_path / "a" / "big.bin").write_bytes(b"\0" * 5000)
    assert tree_size(str(tmp_path / "a")) == 5000 + 15
    assert tree_size(str(tmp_path / "missing")) == 0


def test_the_data_digest_covers_only_the_controllers_entries(tmp_path: Path) -> None:
    source, node = tmp_path / "source", tmp_path / "node"
    for root in (source, node):
        make_tree(root)
        for path in root.rglob("*"):
            os.utime(path, (1_000_000, 1_000_000))
    names = sorted(os.listdir(source))
    digest = subtrees_digest(str(source), names)
    (node / "prepared-by-the-node").write_text("other data")
    assert subtrees_digest(str(node), names) == digest
    os.utime(node / "main.py", (2_000_000, 2_000_000))
    assert subtrees_digest(str(node), names) != digest
    assert subtrees_digest(str(node), [*names, "absent"]) == ""


def test_ssh_to_a_peer_never_prompts_and_passes_one_shell_word_per_argument() -> None:
    argv = ssh_argv("10.0.0.2", ["tail", "-n", "30", "/var/log/a b.log"])
    assert argv[0] == "ssh"
    assert {"BatchMode=yes", "StrictHostKeyChecking=yes"} <= set(argv)
    assert argv[-2:] == ["10.0.0.2", "tail -n 30 '/var/log/a b.log'"]
    assert "ControlMaster=auto" not in ssh_argv("h", ["true"], shared=False)


def test_a_jobs_processes_are_found_by_their_job_id() -> None:
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env={**os.environ, "TORCH_JOB_ID": "unit-test-job"},
    )
    try:
        found = job_processes("unit-test-job")
        assert [line.split()[0] for line in found] == [str(sleeper.pid)]
        assert job_processes("unit-test-job-2") == []
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_port_in_use_names_its_process() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        found = port_listeners(port)
        assert len(found) == 1
        assert found[0].split()[0] == str(os.getpid())
        assert "python" in found[0]
    assert port_listeners(port) == []


OWNED = [("lo", "127.0.0.1"), ("eth0", "10.89.0.2"), ("eth0", "fe80::1%eth0"), ("ib0", "fd00::5")]


@pytest.mark.parametrize(
    ("address", "interface", "words"),
    [
        ("10.89.0.2", "eth0", ""),
        ("fd00:0::5", "ib0", ""),
        ("10.89.0.9", "", "node0: cluster_address 10.89.0.9 is not an address of this host (it has "
         "127.0.0.1, 10.89.0.2, fe80::1%eth0, fd00::5)"),
        ("node0.example", "", "node0: cluster_address 'node0.example' is not an IP address"),
    ],
)  # fmt: skip
def test_the_cluster_address_must_be_the_nodes_own(
    address: str, interface: str, words: str
) -> None:
    found, problem = address_problem("node0", address, OWNED)
    assert found == interface
    assert words in problem if words else problem == ""


def test_this_hosts_addresses_are_read_from_iproute2() -> None:
    owned = own_addresses()
    assert ("lo", "127.0.0.1") in owned


def test_a_peer_that_ssh_cannot_reach_is_named_with_the_reason() -> None:
    # Nothing here trusts this host: refused, or an unknown host key, never a prompt.
    found = unreached_peers({"ghost": "127.0.0.1"}, shared=False, timeout=20)
    assert len(found) == 1
    assert found[0].startswith("ghost (127.0.0.1): ")
    assert unreached_peers({}) == []


@pytest.mark.parametrize("pattern", ["/etc/passwd", "../x", "logs/../../x", "a\\..\\b"])
def test_a_result_pattern_outside_the_output_folder_is_refused(pattern: str) -> None:
    problems = input_problems({**GOOD, "train_result_files": [pattern]})
    assert problems == [
        f"train_result_files must be relative to the output folder and stay in it (got {pattern!r})"
    ]


def test_result_patterns_match_files_inside_the_output_folder_only(tmp_path: Path) -> None:
    out = tmp_path / "output"
    (out / "logs" / "deep").mkdir(parents=True)
    for name in ("metrics.json", "snapshot.pt", "logs/a.txt", "logs/deep/b.txt", "other.bin"):
        (out / name).write_text("x")
    (tmp_path / "secret.pt").write_text("x")
    (out / "link.pt").symlink_to(tmp_path / "secret.pt")
    patterns = ["metrics.json", "*.pt", "logs/**", "missing.txt"]
    assert matching_files(str(out), patterns) == [
        "logs/a.txt",
        "logs/deep/b.txt",
        "metrics.json",
        "snapshot.pt",
    ]


def test_rsync_fetches_exactly_the_listed_files(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    for name in ("metrics.json", "odd[1]*.pt", "logs/deep/b.txt", "logs/other.txt", "big.bin"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text("x")
    wanted = ["logs/deep/b.txt", "metrics.json", "odd[1]*.pt"]
    options = rsync_filters(wanted)
    subprocess.run(["rsync", "-a", *options, f"{source}/", f"{target}/"], check=True)
    copied = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert copied == wanted
    assert not (target / "logs" / "other.txt").exists()
