"""Staging that scales (plugins/modules/wheelhouse_stage.py): root installs only what matches
the controller's checksums, copied into its own folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ansible_collections.torch_cluster.cluster.plugins.modules import wheelhouse_stage

MODULE = Path(__file__).resolve().parents[3] / "plugins" / "modules" / "wheelhouse_stage.py"


def _run(args: dict) -> dict:
    """The module as Ansible runs it: its arguments as JSON on a file, its result on stdout."""
    done = subprocess.run(
        [sys.executable, str(MODULE)],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": args}),
        capture_output=True,
        text=True,
        check=False,
    )
    return json.loads(done.stdout)


def _wheelhouse(folder: Path) -> None:
    folder.mkdir()
    (folder / "torch-2.14.1-cp311-manylinux.whl").write_bytes(b"torch" * 1000)
    (folder / "nvidia").mkdir()
    (folder / "nvidia" / "nccl.whl").write_bytes(b"nccl" * 500)


def test_the_manifest_holds_every_files_sha256(tmp_path: Path) -> None:
    _wheelhouse(tmp_path / "wheels")
    found = _run({"state": "manifest", "src": str(tmp_path / "wheels")})
    assert sorted(found["manifest"]) == ["nvidia/nccl.whl", "torch-2.14.1-cp311-manylinux.whl"]
    assert found["bytes"] == 5000 + 2000
    assert found["manifest"]["nvidia/nccl.whl"] == wheelhouse_stage.sha256(
        str(tmp_path / "wheels" / "nvidia" / "nccl.whl")
    )


def test_a_checked_copy_is_taken_once_and_then_left_as_it_is(tmp_path: Path) -> None:
    _wheelhouse(tmp_path / "incoming")
    wanted = _run({"state": "manifest", "src": str(tmp_path / "incoming")})["manifest"]
    args = {"state": "taken", "src": str(tmp_path / "incoming"), "dest": str(tmp_path / "root"),
            "manifest": wanted}  # fmt: skip
    first = _run(args)
    assert first["changed"] is True
    assert sorted(first["copied"]) == sorted(wanted)
    assert (tmp_path / "root" / "nvidia" / "nccl.whl").read_bytes() == b"nccl" * 500
    assert oct((tmp_path / "root" / "nvidia" / "nccl.whl").stat().st_mode & 0o777) == "0o644"
    again = _run(args)
    assert again["changed"] is False
    assert again["copied"] == []


def test_a_file_changed_on_the_way_is_refused_and_nothing_partial_is_left(tmp_path: Path) -> None:
    """A node's training user could change what it passes on: root installs none of it."""
    _wheelhouse(tmp_path / "controller")
    wanted = _run({"state": "manifest", "src": str(tmp_path / "controller")})["manifest"]
    _wheelhouse(tmp_path / "incoming")
    (tmp_path / "incoming" / "nvidia" / "nccl.whl").write_bytes(b"evil" * 500)
    found = _run({"state": "taken", "src": str(tmp_path / "incoming"),
                  "dest": str(tmp_path / "root"), "manifest": wanted})  # fmt: skip
    assert found["failed"] is True
    assert "nvidia/nccl.whl (checksum differs)" in found["msg"]
    assert not (tmp_path / "root" / "nvidia" / "nccl.whl").exists()
    assert not list((tmp_path / "root").rglob("*.partial"))


def test_a_file_that_a_process_still_holds_open_is_refused(tmp_path: Path) -> None:
    """A writer that opened the file while it was the training user's could change it after
    the check: root does not install it."""
    _wheelhouse(tmp_path / "incoming")
    wanted = _run({"state": "manifest", "src": str(tmp_path / "incoming")})["manifest"]
    with open(tmp_path / "incoming" / "nvidia" / "nccl.whl", "ab"):
        found = _run({"state": "taken", "src": str(tmp_path / "incoming"),
                      "dest": str(tmp_path / "root"), "manifest": wanted})  # fmt: skip
    assert found["failed"] is True
    assert found["bad"] == ["nvidia/nccl.whl (held open by a process)"]
    assert not (tmp_path / "root" / "nvidia" / "nccl.whl").exists()


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    _wheelhouse(tmp_path / "incoming")
    found = _run({"state": "taken", "src": str(tmp_path / "incoming"),
                  "dest": str(tmp_path / "root"), "manifest": {"gone.whl": "0" * 64}})  # fmt: skip
    assert found["failed"] is True
    assert "gone.whl (No such file or directory)" in found["msg"]
