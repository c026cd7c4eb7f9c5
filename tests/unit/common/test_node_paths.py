"""What the roles and the driver leave on a node, read by its modules
(module_utils/common/node_paths.py), and how a node runs a command as the training user or on a
peer (module_utils/common/ssh.py)."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.node_paths import (
    driver_gpus,
    local_fact,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.ssh import (
    on_node,
    runuser_prefix,
    ssh_argv,
)


def test_the_driver_lists_one_folder_per_gpu(tmp_path: Path) -> None:
    for bus_id in ("0000:17:00.0", "0000:65:00.0"):
        (tmp_path / bus_id).mkdir()
    (tmp_path / "README").write_text("not a GPU")
    assert driver_gpus(str(tmp_path)) == 2
    assert driver_gpus(str(tmp_path / "missing")) == 0


def test_a_local_facts_value_is_read_as_text(tmp_path: Path) -> None:
    fact = tmp_path / "pytorch.fact"
    fact.write_text(json.dumps({"torchrun": "/opt/torch/bin/torchrun", "gpus": 8}))
    assert local_fact(str(fact), "torchrun") == "/opt/torch/bin/torchrun"
    assert local_fact(str(fact), "gpus") == "8"
    assert local_fact(str(fact), "python") == ""


@pytest.mark.parametrize("text", [None, "not json", "[1, 2]"])
def test_a_missing_or_unreadable_fact_has_no_value(tmp_path: Path, text: str | None) -> None:
    fact = tmp_path / "shared_storage.fact"
    if text is not None:
        fact.write_text(text)
    assert local_fact(str(fact), "path") == ""


def test_a_command_runs_as_the_user_through_runuser_unless_it_is_that_user() -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert runuser_prefix(me) == []
    assert runuser_prefix(f"not-{me}") == ["runuser", "-u", f"not-{me}", "--"]


def test_a_command_runs_here_or_over_ssh_on_a_peer() -> None:
    argv = ["python3", "-c", "print(1)"]
    assert on_node(None, argv) == argv
    assert on_node("10.0.0.2", argv) == ssh_argv("10.0.0.2", argv)
