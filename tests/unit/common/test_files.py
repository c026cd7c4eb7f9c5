"""Files on disk (module_utils/common/files.py): a file's text or JSON record read back, '' or {}
where there is none, and a file replaced at once."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import (
    newest_mtime_ns,
    read_json,
    read_text,
    replace_text,
    write_json,
)


def test_a_files_text_is_read_and_a_missing_file_has_none(tmp_path: Path) -> None:
    (tmp_path / "fstab").write_text("server:/export /shared nfs defaults 0 0\n")
    assert read_text(str(tmp_path / "fstab")) == "server:/export /shared nfs defaults 0 0\n"
    assert read_text(str(tmp_path / "missing")) == ""
    assert read_text(str(tmp_path)) == ""  # a folder cannot be read as a file


def test_bytes_that_are_not_text_fail_unless_replaced(tmp_path: Path) -> None:
    (tmp_path / "node.log").write_bytes(b"via NET/IB/0 \xff\xfe\n")
    with pytest.raises(UnicodeDecodeError):
        read_text(str(tmp_path / "node.log"), encoding="utf-8")
    text = read_text(str(tmp_path / "node.log"), encoding="utf-8", errors="replace")
    assert text == "via NET/IB/0 \ufffd\ufffd\n"


def test_a_record_is_read_back_as_written(tmp_path: Path) -> None:
    path = str(tmp_path / "runs" / "job-1" / "attempts.json")
    write_json(path, {"job_id": "job-1", "attempts": [{"number": 1}]})
    assert read_json(path) == {"job_id": "job-1", "attempts": [{"number": 1}]}
    assert Path(path).read_text() == json.dumps(read_json(path), indent=2) + "\n"
    assert os.listdir(tmp_path / "runs" / "job-1") == ["attempts.json"]


@pytest.mark.parametrize("text", [None, "", "{not json", '{"attempts": ['])
def test_a_missing_or_broken_record_reads_as_empty(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "attempts.json"
    if text is not None:
        path.write_text(text)
    assert read_json(str(path)) == {}


def test_a_file_is_replaced_at_once_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text("old\n")
    replace_text(str(path), "#!/bin/bash\n", mode=0o755)
    assert path.read_text() == "#!/bin/bash\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert os.listdir(tmp_path) == ["job.sbatch"]  # no .partial left behind


def test_a_folders_newest_file_time_leaves_out_the_skipped_folders(tmp_path: Path) -> None:
    assert newest_mtime_ns(str(tmp_path / "missing")) == 0
    assert newest_mtime_ns(str(tmp_path)) == 0
    (tmp_path / "old.pt").write_text("old")
    os.utime(tmp_path / "old.pt", ns=(10**18, 10**18))
    (tmp_path / "step-1").mkdir()
    (tmp_path / "step-1" / "shard.distcp").write_text("new")
    os.utime(tmp_path / "step-1" / "shard.distcp", ns=(2 * 10**18, 2 * 10**18))
    (tmp_path / ".torch-cluster-incoming").mkdir()
    (tmp_path / ".torch-cluster-incoming" / "copy.pt").write_text("copy")
    os.utime(tmp_path / ".torch-cluster-incoming" / "copy.pt", ns=(3 * 10**18, 3 * 10**18))
    (tmp_path / "link").symlink_to(tmp_path / ".torch-cluster-incoming" / "copy.pt")
    assert newest_mtime_ns(str(tmp_path), skip=(".torch-cluster-incoming",)) == 2 * 10**18
    assert newest_mtime_ns(str(tmp_path)) == 3 * 10**18
