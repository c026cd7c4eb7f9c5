"""docs/architecture.md names code that exists: every path, function and test in its behaviour
tables and its worked paths is there, and its tree of plugins/module_utils/ lists every file."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
TEXT = PAGE.read_text(encoding="utf-8")

# The folders of the repository that a reference on the page starts with.
ROOTS = ("plugins/", "roles/", "tests/", "molecule/", "playbooks/", "docs/", "train/", "sandbox/")
# `tests/unit/job/test_verdict.py::test_the_verdict_follows_the_nodes`
TEST = re.compile(r"(?P<path>[\w./-]+\.py)::(?P<name>\w+)")
# `plugins/module_utils/job/watch.py:watch_round`, or a method: `...torch_job_sync.py:Sync.after`
DEFINITION = re.compile(r"(?P<path>[\w./-]+\.py):(?P<name>\w+(?:\.\w+)?)")
PATH = re.compile(r"[\w./-]+")
CODE = re.compile(r"`([^`]+)`")
# The behaviour tables: their header's first cell is "Behaviour"; the other four columns (task
# file, module or action plugin, module_utils function, test) hold only references.
COLUMNS = 5


def table_rows() -> list[list[str]]:
    rows, inside = [], False
    for line in TEXT.splitlines():
        if not line.startswith("|"):
            inside = False
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] == "Behaviour":
            inside = True
        elif inside and not set(cells[0]) <= set("-: "):
            rows.append(cells)
    return rows


def is_reference(text: str) -> bool:
    """A path of the repository, `path.py:name` or `test_file.py::test_name`."""
    patterns = (TEST, DEFINITION, PATH)
    return text.startswith(ROOTS) and any(pattern.fullmatch(text) for pattern in patterns)


ROWS = table_rows()
# Every reference in the four code columns, by its row's behaviour.
TABLE_REFS = [(row[0], ref) for row in ROWS for cell in row[1:] for ref in CODE.findall(cell)]
# Elsewhere on the page (the text, the worked paths), what looks like a reference is one; the
# fenced blocks (the flow diagram, the tree) are left out.
PROSE = re.sub(r"^ *```.*?^ *```", "", TEXT, flags=re.DOTALL | re.MULTILINE)
PAGE_REFS = [ref for ref in CODE.findall(PROSE) if is_reference(ref)]
REFS = sorted({ref for _, ref in TABLE_REFS} | set(PAGE_REFS))


def split(ref: str) -> tuple[str, str, str]:
    """(kind, path, name) of a reference: a test, a definition in a file, or a path."""
    for kind, pattern in (("test", TEST), ("definition", DEFINITION)):
        found = pattern.fullmatch(ref)
        if found:
            return kind, found["path"], found["name"]
    return "path", ref, ""


@cache
def defined_names(path: str) -> frozenset[str]:
    """A file's top-level functions, classes and assigned names, and `Class.member` for each
    class's methods and attributes."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"), filename=path)
    names: set[str] = set()

    def assigned(node: ast.stmt) -> list[str]:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        return [target.id for target in targets if isinstance(target, ast.Name)]

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        names.update(assigned(node))
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}.{member.name}")
                names.update(f"{node.name}.{name}" for name in assigned(member))
    return frozenset(names)


def test_the_page_maps_at_least_35_behaviours() -> None:
    assert len(ROWS) >= 35, f"{PAGE.name} has {len(ROWS)} behaviour rows, fewer than 35"


def test_every_row_has_a_behaviour_and_its_four_code_columns() -> None:
    bad = [row[0] or "(no behaviour)" for row in ROWS if len(row) != COLUMNS or not row[0]]
    assert not bad, f"rows without {COLUMNS} columns in {PAGE.name}: {bad}"


def test_the_code_columns_hold_only_references() -> None:
    bad = [f"{behaviour}: `{ref}`" for behaviour, ref in TABLE_REFS if not is_reference(ref)]
    assert not bad, f"not a path, path.py:function or test_file.py::test in {PAGE.name}: {bad}"


def test_every_named_path_exists() -> None:
    missing = [ref for ref in REFS if not (ROOT / split(ref)[1]).exists()]
    assert not missing, f"{PAGE.name} names paths that do not exist: {missing}"


def test_every_named_function_is_defined_in_its_file() -> None:
    named = [split(ref) for ref in REFS]
    missing = [
        f"{path}:{name}"
        for kind, path, name in named
        if kind == "definition" and (ROOT / path).is_file() and name not in defined_names(path)
    ]
    assert not missing, f"{PAGE.name} names functions that their files lack: {missing}"


def test_every_named_test_exists_in_its_file() -> None:
    named = [split(ref) for ref in REFS]
    missing = [
        f"{path}::{name}"
        for kind, path, name in named
        if kind == "test"
        and (ROOT / path).is_file()
        and not any(found.split(".")[-1] == name for found in defined_names(path))
    ]
    assert not missing, f"{PAGE.name} names tests that their files lack: {missing}"


def module_utils_tree() -> list[str]:
    """The files of the page's tree of plugins/module_utils/, as paths."""
    block = re.search(r"^```\n(plugins/module_utils/\n.*?)^```", TEXT, re.DOTALL | re.MULTILINE)
    assert block, f"{PAGE.name} has no tree of plugins/module_utils/ (a block starting so)"
    files, package = [], ""
    for line in block[1].splitlines()[1:]:
        words = line.lstrip("│├└─ ").split()
        if words and words[0].endswith("/"):
            package = words[0]
        elif words and words[0].endswith(".py"):
            files.append(f"plugins/module_utils/{package}{words[0]}")
    return files


def test_every_module_utils_file_is_in_the_tree() -> None:
    on_disk = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "plugins" / "module_utils").glob("*/*.py")
        if path.name != "__init__.py"
    }
    missing = sorted(on_disk - set(module_utils_tree()))
    assert not missing, f"files missing from the tree in {PAGE.name}: {missing}"


def test_every_file_of_the_tree_exists() -> None:
    missing = [path for path in module_utils_tree() if not (ROOT / path).is_file()]
    assert not missing, f"{PAGE.name}'s tree lists files that do not exist: {missing}"
