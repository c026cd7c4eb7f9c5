"""The doc fragments (plugins/doc_fragments/): every module that extends one documents, as
ansible-doc merges them, exactly the options its argument spec takes, with the same type,
elements, default and requiredness; and each fragment's options are those of the argument spec
that goes with it."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.node_paths import (
    node_paths_argument_spec,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempts import (
    attempt_argument_spec,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.logs import (
    progress_argument_spec,
)

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
COLLECTION = "ansible_collections.torch_cluster.cluster.plugins"
EXTENDING = sorted(
    path.stem
    for path in (ROOT / "plugins" / "modules").glob("*.py")
    if "extends_documentation_fragment:" in path.read_text()
)
SPECS = {
    "job_attempt": attempt_argument_spec,
    "node_paths": node_paths_argument_spec,
    "progress_lines": progress_argument_spec,
}
FIELDS = ("type", "elements", "default", "required")


def fields(option: dict[str, Any]) -> dict[str, Any]:
    """What an option's documentation and its argument spec must agree on."""
    found = {key: option[key] for key in FIELDS if key in option}
    return {**found, "required": bool(found.get("required"))}


@pytest.fixture(scope="module")
def merged_docs() -> dict[str, dict[str, Any]]:
    """Each extending module's documentation, fragments merged, as ansible-doc shows it."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    names = [f"torch_cluster.cluster.{name}" for name in EXTENDING]
    done = subprocess.run(
        [BIN / "ansible-doc", "-j", *names],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {name.rsplit(".", 1)[1]: found["doc"] for name, found in json.loads(done.stdout).items()}


def argument_spec(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """The argument spec the module's main() gives AnsibleModule."""
    module = importlib.import_module(f"{COLLECTION}.modules.{name}")

    class Given(Exception):
        pass

    def capture(argument_spec: dict, **_: object) -> None:
        raise Given(argument_spec)

    monkeypatch.setattr(module, "AnsibleModule", capture)
    with pytest.raises(Given) as given:
        module.main()
    return given.value.args[0]


def test_fragments_are_used() -> None:
    assert EXTENDING
    sources = "".join(
        (ROOT / "plugins" / "modules" / f"{name}.py").read_text() for name in EXTENDING
    )
    used = set(re.findall(r"- torch_cluster\.cluster\.(\w+)", sources))
    assert {path.stem for path in (ROOT / "plugins" / "doc_fragments").glob("*.py")} <= used


@pytest.mark.parametrize("name", EXTENDING)
def test_a_module_documents_every_option_it_takes(
    name: str, merged_docs: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    documented = {key: fields(option) for key, option in merged_docs[name]["options"].items()}
    taken = {key: fields(option) for key, option in argument_spec(name, monkeypatch).items()}
    assert documented == taken


@pytest.mark.parametrize("fragment", sorted(SPECS))
def test_a_fragment_documents_its_argument_spec(fragment: str) -> None:
    module = importlib.import_module(f"{COLLECTION}.doc_fragments.{fragment}")
    options = yaml.safe_load(module.ModuleDocFragment.DOCUMENTATION)["options"]
    assert {key: fields(option) for key, option in options.items()} == {
        key: fields(option) for key, option in SPECS[fragment]().items()
    }
