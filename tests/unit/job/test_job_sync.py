"""Keeping output folders in step without a shared filesystem (plugins/module_utils/job/sync.py):
which copy wins, who sends to whom, and what rsync says it moved."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.proc import open_files
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.sync import (
    INCOMING,
    LIST_SCRIPT,
    after_gathering,
    fanout_rounds,
    lacking,
    newest_copies,
    rsync_stats,
    settled_files,
    unchanged,
)
from ansible_collections.torch_cluster.cluster.plugins.modules import torch_job_sync

ORDER = ["node0", "node1", "node2"]


def test_the_newest_copy_of_each_file_is_fetched_to_the_master() -> None:
    listings = {
        "node0": {"snapshot.pt": [100, 50], "log.txt": [5, 10]},
        "node1": {"snapshot.pt": [100, 70], "extra.txt": [1, 1]},
        "node2": {"snapshot.pt": [100, 60], "log.txt": [5, 10]},
    }
    assert newest_copies(listings, ORDER) == {"node1": ["extra.txt", "snapshot.pt"]}


def test_a_master_that_lost_its_folder_gets_every_file_back() -> None:
    listings = {"node0": {}, "node1": {"snapshot.pt": [9, 5]}, "node2": {"snapshot.pt": [9, 5]}}
    # Equal copies: the first in rank order sends it.
    assert newest_copies(listings, ORDER) == {"node1": ["snapshot.pt"]}


def test_nothing_is_fetched_when_the_master_holds_the_newest_copies() -> None:
    listings = {"node0": {"a": [1, 9]}, "node1": {"a": [1, 9]}, "node2": {"a": [2, 3]}}
    assert newest_copies(listings, ORDER) == {}


def test_after_gathering_the_master_holds_the_fetched_versions() -> None:
    listings = {"node0": {"a": [1, 1], "b": [1, 1]}, "node1": {"a": [2, 2]}}
    assert after_gathering(listings, "node0", {"node1": ["a"]}) == {"a": [2, 2], "b": [1, 1]}


@pytest.mark.parametrize(
    ("listing", "needs"),
    [
        ({"a": [1, 1], "b": [2, 2]}, False),
        ({"a": [1, 1]}, True),
        ({"a": [1, 1], "b": [2, 3]}, True),
    ],
)
def test_a_node_needs_the_files_it_lacks_or_holds_in_another_version(
    listing: dict, needs: bool
) -> None:
    assert lacking(listing, {"a": [1, 1], "b": [2, 2]}) is needs


@pytest.mark.parametrize(
    ("targets", "rounds"),
    [
        (1, [[("m", "t1")]]),
        (3, [[("m", "t1")], [("m", "t2"), ("t1", "t3")]]),
        (
            7,
            [
                [("m", "t1")],
                [("m", "t2"), ("t1", "t3")],
                [("m", "t4"), ("t1", "t5"), ("t2", "t6"), ("t3", "t7")],
            ],
        ),
    ],
)
def test_the_nodes_that_have_the_files_double_each_round(targets: int, rounds: list) -> None:
    assert fanout_rounds("m", [f"t{i}" for i in range(1, targets + 1)]) == rounds


def test_fifty_nodes_take_six_rounds_and_the_master_sends_six_copies() -> None:
    rounds = fanout_rounds("node0", [f"node{i}" for i in range(1, 50)])
    assert len(rounds) == 6
    assert sum(sender == "node0" for pairs in rounds for sender, _ in pairs) == 6
    receivers = [receiver for pairs in rounds for _, receiver in pairs]
    assert sorted(receivers) == sorted(f"node{i}" for i in range(1, 50))


def test_rsync_stats_are_read_from_rsyncs_own_summary() -> None:
    text = (Path(__file__).parents[1] / "data" / "rsync-stats-3.2.7.txt").read_text()
    assert rsync_stats(text) == {"files": 1, "sent": 3_000_841, "received": 38}
    assert rsync_stats("") == {"files": 0, "sent": 0, "received": 0}


def test_the_listing_script_lists_regular_files_with_size_and_time(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.pt").write_bytes(b"12345")
    (tmp_path / "link").symlink_to(tmp_path / "sub" / "a.pt")
    done = subprocess.run(
        [sys.executable, "-c", LIST_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    listing = json.loads(done.stdout)
    assert list(listing) == ["sub/a.pt"]
    assert listing["sub/a.pt"] == [5, (tmp_path / "sub" / "a.pt").stat().st_mtime_ns]
    missing = subprocess.run(
        [sys.executable, "-c", LIST_SCRIPT, str(tmp_path / "none")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(missing.stdout) == {}


def test_while_a_job_runs_only_settled_files_that_no_process_holds_travel() -> None:
    second = 1_000_000_000
    listing = {"old.pt": [10, 1 * second], "new.pt": [10, 99 * second], "open.pt": [10, 1 * second]}
    assert settled_files(listing, 100 * second, 5, ["open.pt"]) == {"old.pt": [10, second]}


def test_a_copy_is_kept_only_when_its_file_did_not_change_while_it_travelled() -> None:
    before = {"a.pt": [10, 1], "b.pt": [10, 1], "c.pt": [10, 1]}
    after = {"a.pt": [10, 1], "b.pt": [12, 2]}
    assert unchanged(before, after, ["a.pt", "b.pt", "c.pt"]) == ["a.pt"]


def test_the_files_a_process_holds_open_are_found(tmp_path) -> None:
    folder = tmp_path / "output"
    folder.mkdir()
    (folder / "closed.pt").write_text("x")
    with open(folder / "snapshot.pt", "w") as handle:
        handle.write("being written")
        assert open_files(str(folder)) == ["snapshot.pt"]
    assert open_files(str(folder)) == []


# --- torch_job_sync's copy while a job runs, with real rsync ---------------------------------
# Every "node" is a folder on this machine. An `ssh` first on PATH runs the command here, with
# the job's folder path (or another node's folder, in a command one node runs toward the next)
# turned into the receiving node's own folder: rsync, the listing and the settling scripts are
# the real ones; only the network hop is left out.
SSH_SHIM = r"""#!/usr/bin/env python3
import os, re, subprocess, sys
args = sys.argv[1:]
while args[0].startswith("-"):
    args = args[2:] if args[0] in ("-o", "-i", "-p", "-l") else args[1:]
host, command = args[0], " ".join(args[1:])
root = os.environ["SHIM_ROOT"]
mine = os.path.join(root, host)
command = command.replace(os.environ["SHIM_FOLDER"], mine)
command = re.sub(re.escape(root) + r"/[A-Za-z0-9_-]+", mine, command)
if "--server" in command and "SHIM_SLOW" in os.environ:
    import time; time.sleep(float(os.environ["SHIM_SLOW"]))  # a slow network
done = subprocess.run(["sh", "-c", command])
# After an rsync into a receiver: the master's checkpoint is rewritten SHIM_CHANGES times in
# all, as a training script saving its next snapshot would while the copy travels.
if "--server" in command and "SHIM_CHANGES" in os.environ:
    count = os.environ["SHIM_COUNT"]
    made = int(open(count).read()) if os.path.exists(count) else 0
    if made < int(os.environ["SHIM_CHANGES"]):
        path = os.path.join(os.environ["SHIM_FOLDER"], "snapshot.pt")
        with open(path, "w") as out:
            out.write(f"version {made + 2}")
        old = os.stat(path).st_mtime_ns - 30 * 10**9 + made
        os.utime(path, ns=(old, old))
        open(count, "w").write(str(made + 1))
sys.exit(done.returncode)
"""


@pytest.fixture
def two_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The master's output folder (holding snapshot.pt, settled) and node1's empty one."""
    if not shutil.which("rsync"):
        pytest.skip("rsync is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(SSH_SHIM)
    (bin_dir / "ssh").chmod(0o755)
    master = tmp_path / "master" / "output"
    master.mkdir(parents=True)
    (tmp_path / "nodes" / "node1").mkdir(parents=True)
    snapshot = master / "snapshot.pt"
    snapshot.write_text("version 1")
    old = snapshot.stat().st_mtime_ns - 60 * 10**9
    os.utime(snapshot, ns=(old, old))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SHIM_FOLDER", str(master))
    monkeypatch.setenv("SHIM_ROOT", str(tmp_path / "nodes"))
    monkeypatch.setenv("SHIM_COUNT", str(tmp_path / "changes"))
    return master, tmp_path / "nodes" / "node1"


def _during(master: Path, tries: int = 3, max_seconds: float = 0) -> dict:
    module = torch_job_sync
    sync = module.Sync(
        {
            "folder": str(master),
            "nodes": {"node0": "master", "node1": "node1"},
            "timeout": 10,
            "max_seconds": max_seconds,
        }
    )
    found = sync.during(copies=1, settle=0.2, tries=tries)
    return {**found, "problems": sync.problems, "transfers": sync.transfers}


def test_a_copy_while_the_job_runs_reaches_the_next_node(two_folders) -> None:
    master, node1 = two_folders
    found = _during(master)
    assert (node1 / "snapshot.pt").read_text() == "version 1"
    assert found["holders"] == ["node1"]
    assert found["problems"] == []
    assert not (node1 / INCOMING).exists()


def test_a_copy_cut_short_by_max_seconds_says_so_and_the_next_one_finishes(
    two_folders, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch gives a copy at most a few seconds a call, so that its rounds (and every
    node's fence heartbeat) never wait on a big checkpoint's transfer."""
    master, node1 = two_folders
    monkeypatch.setenv("SHIM_SLOW", "5")
    began = time.monotonic()
    found = _during(master, max_seconds=1)
    assert time.monotonic() - began < 3
    assert found["incomplete"] is True
    assert found["holders"] == []
    assert found["problems"] == []  # cut short is not a failure: it goes on next time
    assert not (node1 / "snapshot.pt").exists()
    monkeypatch.delenv("SHIM_SLOW")
    found = _during(master, max_seconds=10)
    assert (found["incomplete"], found["holders"]) == (False, ["node1"])
    assert (node1 / "snapshot.pt").read_text() == "version 1"


def test_a_checkpoint_rewritten_while_it_travelled_is_sent_again(
    two_folders, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lost-master failure: the only copy made while the job ran was dropped on node1
    because rank 0 saved its next snapshot meanwhile, yet node1 was named as holding it."""
    master, node1 = two_folders
    monkeypatch.setenv("SHIM_CHANGES", "1")
    found = _during(master)
    assert (node1 / "snapshot.pt").read_text() == "version 2"
    assert found["holders"] == ["node1"]
    assert found["problems"] == []
    assert len(found["transfers"]) == 2


def test_a_checkpoint_too_new_to_travel_is_copied_once_it_has_settled(two_folders) -> None:
    """The lost-master failure seen in CI: rank 0 saved its snapshot about every 2 s, so at
    most looks it was under a second old and not sent; every copy moved 0 files, and node0
    was still named as holding the master's files."""
    master, node1 = two_folders
    (master / "snapshot.pt").write_text("just saved")  # modified now: not settled yet
    found = _during(master)
    assert (node1 / "snapshot.pt").read_text() == "just saved"
    assert found["holders"] == ["node1"]
    assert found["problems"] == []


def test_a_checkpoint_that_keeps_changing_leaves_no_holder_and_says_why(
    two_folders, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, node1 = two_folders
    (node1 / "snapshot.pt").write_text("older")
    monkeypatch.setenv("SHIM_CHANGES", "5")
    found = _during(master, tries=2)
    assert found["holders"] == []
    assert found["problems"] == [
        "node1: snapshot.pt kept changing (being written, or changed while it travelled) "
        "through 2 looks; its older copy is kept"
    ]
    assert (node1 / "snapshot.pt").read_text() == "older"
    assert not (node1 / INCOMING).exists()


def test_staging_spreads_one_nodes_folder_in_rounds_that_double_the_holders(
    two_folders,
) -> None:
    """The controller sent the wheelhouse to one node; it reaches five others in three rounds
    (1 -> 2 -> 4 -> 6 holders), each sender a node that already has it, every file intact."""
    master, node1 = two_folders
    (master / "torch-2.14.1-cp311.whl").write_bytes(os.urandom(50_000))
    nodes = {"seed": "seed", **{f"node{i}": f"node{i}" for i in range(1, 6)}}
    for name in list(nodes)[2:]:
        (node1.parent / name).mkdir()
    (node1 / "torch-2.14.1-cp311.whl").write_bytes(b"an older, torn copy")
    sync = torch_job_sync.Sync({"folder": str(master), "nodes": nodes, "timeout": 10})
    found = sync.spread()
    assert sync.problems == []
    assert found["rounds"] == 3
    assert sorted(found["holders"]) == sorted(list(nodes)[1:])
    senders = [(t["from"], t["to"]) for t in sync.transfers]
    assert [pair for pair in senders if pair[0] == "seed"] == [
        ("seed", "node1"), ("seed", "node2"), ("seed", "node4")
    ]  # fmt: skip
    for name in list(nodes)[1:]:
        for path in master.iterdir():
            assert (node1.parent / name / path.name).read_bytes() == path.read_bytes(), name


def test_data_spreads_only_the_controllers_names_from_node_to_node(two_folders) -> None:
    """train_data_src's top-level names travel; what a node prepared itself stays its own."""
    master, node1 = two_folders
    (master / "MNIST" / "raw").mkdir(parents=True)
    (master / "MNIST" / "raw" / "train-images").write_bytes(os.urandom(20_000))
    (master / "prepared.pt").write_bytes(b"made on the seed by the prepare command")
    nodes = {"seed": "seed", "node1": "node1", "node2": "node2"}
    (node1.parent / "node2").mkdir()
    sync = torch_job_sync.Sync({"folder": str(master), "nodes": nodes, "timeout": 10})
    found = sync.spread(["MNIST"])
    assert sync.problems == []
    assert found["rounds"] == 2
    for name in ("node1", "node2"):
        folder = node1.parent / name
        copy = folder / "MNIST" / "raw" / "train-images"
        assert copy.read_bytes() == (master / "MNIST" / "raw" / "train-images").read_bytes()
        assert not (folder / "prepared.pt").exists()
        assert not (folder / "snapshot.pt").exists()
