"""docs/variables.md is what docs/variables.py makes of the roles' argument specs, and it names
every variable of every role's defaults/main.yml, with the default the role really runs with."""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "variables.md"
DEFAULTS_FILES = sorted(ROOT.glob("roles/*/defaults/main.yml"))


# docs/variables.py is a script, not a module of a package: its functions, as running it
# (not as __main__) defines them.
variables_doc = SimpleNamespace(**runpy.run_path(str(ROOT / "docs" / "variables.py")))


def role_of(defaults_file: Path) -> str:
    return defaults_file.parents[1].name


def load_defaults(defaults_file: Path) -> dict[str, Any]:
    return yaml.safe_load(defaults_file.read_text()) or {}


def test_reference_is_current():
    assert DOC.read_text(encoding="utf-8") == variables_doc.render(ROOT), (
        "docs/variables.md is not what the argument specs say: run make docs"
    )


@pytest.mark.parametrize("defaults_file", DEFAULTS_FILES, ids=role_of)
def test_every_default_is_documented(defaults_file):
    doc = DOC.read_text(encoding="utf-8")
    missing = [name for name in load_defaults(defaults_file) if f"| `{name}` |" not in doc]
    assert not missing, (
        f"{missing} of {defaults_file.relative_to(ROOT)} are not in roles/{role_of(defaults_file)}"
        "/meta/argument_specs.yml (so neither validated nor documented)"
    )


# Ansible validates against a spec's default but runs with defaults/main.yml's value,
# so the reference shows the spec's only while the two agree.
@pytest.mark.parametrize("defaults_file", DEFAULTS_FILES, ids=role_of)
def test_spec_defaults_are_the_role_defaults(defaults_file):
    role = variables_doc.load_role(ROOT, role_of(defaults_file))
    differing = {
        name: (option["default"], role.defaults[name])
        for _, spec in role.entry_points
        for name, option in spec.get("options", {}).items()
        if name in role.defaults
        and option.get("default", role.defaults[name]) != role.defaults[name]
    }
    assert not differing, f"argument spec default, defaults/main.yml value: {differing}"
