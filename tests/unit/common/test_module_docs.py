"""Every module's documentation is YAML that ansible-doc and ansible-lint can read: a
DOCUMENTATION, EXAMPLES or RETURN that does not parse (a ': ' inside a plain line) leaves the
module undocumented without failing anything else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[3] / "plugins" / "modules").glob("*.py"))


def documentation(path: Path) -> dict[str, str]:
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            name = getattr(node.targets[0], "id", "")
            if name in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
                found[name] = node.value.value
    return found


@pytest.mark.parametrize("path", MODULES, ids=[path.stem for path in MODULES])
def test_a_modules_documentation_parses_and_names_the_module(path: Path) -> None:
    docs = documentation(path)
    assert "DOCUMENTATION" in docs, f"{path.name} has no DOCUMENTATION"
    parsed = {name: yaml.safe_load(text) for name, text in docs.items()}
    assert parsed["DOCUMENTATION"]["module"] == path.stem
    assert parsed["DOCUMENTATION"].get("short_description")
