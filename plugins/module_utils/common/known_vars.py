"""Which variable names the collection's roles and playbooks read; the given names that none of
them reads, with the closest known ones; and the lines of the refusal.

A name that nothing reads is a setting silently lost: `-e train_max_restart=3` (one letter
off) runs with no restarts, and `-e 'train_progress_regex=a b'` sets `a` and leaves `b` in
Ansible's `_raw_params`. The known names are every option of every role's
meta/argument_specs.yml and every name a playbook reads or sets. Controller only:
`read_known` reads the collection's files (YAML, and the playbooks' Jinja for the names they
read), beside the decisions.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, nodes
from jinja2.exceptions import TemplateSyntaxError

# What Ansible's key=value parser leaves over: the words of a -e that are not key=value.
RAW_PARAMS = "_raw_params"
# Registered results and set_fact internals (the Red Hat CoP's `__role_` prefix): never inputs.
INTERNAL_PREFIX = "__"
# Ansible's own variables: every `ansible_*` name, and the special variables without that
# prefix (docs.ansible.com, "Special Variables"). Passing one is Ansible's business, not ours.
ANSIBLE_PREFIX = "ansible_"
ANSIBLE_VARIABLES = frozenset(
    {
        "environment",
        "group_names",
        "groups",
        "hostvars",
        "inventory_dir",
        "inventory_file",
        "inventory_hostname",
        "inventory_hostname_short",
        "omit",
        "play_hosts",
        "playbook_dir",
        "role_name",
        "role_names",
        "role_path",
        "vars",
    }
)
# A task's keys whose strings are bare Jinja expressions, not templates.
_CONDITIONS = frozenset({"when", "that", "changed_when", "failed_when", "until"})
# Names a template uses that are no variable: Jinja's and Ansible's globals, loop variables.
_TEMPLATE_GLOBALS = frozenset(
    {"dict", "lookup", "loop", "namespace", "now", "q", "query", "range", "undef", "zip"}
    | {"true", "false", "none", "True", "False", "None"}
)
# `-e key=value ...`: a word that starts a variable.
_ASSIGNMENT = re.compile(r"([A-Za-z_]\w*)=")
_JINJA = Environment()


def template_names(text: str, expression: bool = False) -> set[str]:
    """The variables a template (or, with expression, a bare Jinja expression) reads."""
    try:
        with warnings.catch_warnings():
            # Jinja decodes a string literal's escapes and warns on a regex's (`'\S+'`).
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = _JINJA.parse("{{ " + text + " }}" if expression else text)
    except TemplateSyntaxError:
        return set()
    names = list(tree.find_all(nodes.Name))
    loaded = {name.name for name in names if name.ctx == "load"}
    local = {name.name for name in names if name.ctx in ("store", "param")}
    return loaded - local - _TEMPLATE_GLOBALS


def data_names(data: Any, key: str = "") -> set[str]:
    """The variables that the templates and conditions in parsed YAML read."""
    if isinstance(data, str):
        return template_names(data, expression=key in _CONDITIONS)
    if isinstance(data, Mapping):
        return {name for k, value in data.items() for name in data_names(value, str(k))}
    if isinstance(data, list):
        return {name for value in data for name in data_names(value, key)}
    return set()


def spec_options(spec: Mapping[str, Any]) -> set[str]:
    """The options of every entry point of a parsed meta/argument_specs.yml."""
    entry_points = (spec or {}).get("argument_specs") or {}
    return {name for entry in entry_points.values() for name in (entry.get("options") or {})}


def set_names(data: Any, prefixes: tuple[str, ...]) -> set[str]:
    """The names that parsed YAML sets: the keys of every `vars:`, and a role entry's
    parameters (its keys with a role's prefix; the others are keywords)."""
    found: set[str] = set()
    if isinstance(data, Mapping):
        if "role" in data:
            found |= {str(k) for k in data if str(k).startswith(prefixes)}
        if isinstance(data.get("vars"), Mapping):
            found |= {str(k) for k in data["vars"]}
        for value in data.values():
            found |= set_names(value, prefixes)
    elif isinstance(data, list):
        for value in data:
            found |= set_names(value, prefixes)
    return found


def playbook_names(plays: Any, prefixes: tuple[str, ...]) -> set[str]:
    """Every name a playbook reads (`nproc | default('auto')`, `train_check`) or sets."""
    return data_names(plays) | set_names(plays, prefixes)


def is_internal(name: str) -> bool:
    return name.startswith(INTERNAL_PREFIX)


def is_ansibles(name: str) -> bool:
    return name.startswith(ANSIBLE_PREFIX) or name in ANSIBLE_VARIABLES


@dataclass(frozen=True)
class Known:
    """The names the collection knows, and the prefixes of its roles (`train_`, `cluster_`)."""

    names: frozenset[str]
    prefixes: tuple[str, ...]

    def unknown(self, given: Iterable[str], every_name: bool = False) -> list[str]:
        """The given names that nothing reads: those with a role's prefix or, with every_name
        (the extra vars of the collection's own playbooks), any name. Ansible's own, the
        internal ones and _raw_params (raw_params_line) are left to others."""
        return sorted(
            name
            for name in set(given)
            if name not in self.names
            and name != RAW_PARAMS
            and not is_internal(name)
            and not is_ansibles(name)
            and (every_name or name.startswith(self.prefixes))
        )

    def closest(self, name: str) -> list[str]:
        """The known names most like a misspelt one (up to three, the closest first, and only
        those about as close as the closest)."""
        matches = difflib.get_close_matches(name, sorted(self.names), n=3, cutoff=0.75)
        ratios = {match: difflib.SequenceMatcher(None, name, match).ratio() for match in matches}
        best = max(ratios.values(), default=0)
        near = [match for match in matches if ratios[match] >= best - 0.05]
        return sorted(near, key=lambda match: (-ratios[match], match))


def read_known(root: Path) -> Known:
    """The names known to the collection at root (the repository or the installed
    collection): every role's argument specs (roles/*/meta/argument_specs.yml) and every
    playbook (playbooks/*.yml)."""
    specs = sorted(root.glob("roles/*/meta/argument_specs.yml"))
    prefixes = tuple(sorted(f"{spec.parents[1].name}_" for spec in specs))
    names: set[str] = set()
    for spec in specs:
        names |= spec_options(yaml.safe_load(spec.read_text(encoding="utf-8")))
    for playbook in sorted(root.glob("playbooks/*.yml")):
        names |= playbook_names(yaml.safe_load(playbook.read_text(encoding="utf-8")), prefixes)
    return Known(frozenset(names), prefixes)


def unknown_line(name: str, where: str, closest: list[str]) -> str:
    """One unknown name: where it was given, and the known names it may have meant."""
    hint = (
        f"did you mean {' or '.join(closest)}?"
        if closest
        else "the roles' variables are in docs/variables.md, the playbooks' at their top."
    )
    return f"{name} ({where}): no role or playbook reads it; {hint}"


def intended(arg: str) -> dict[str, str]:
    """What a `-e key=value ...` with spaces in a value most likely meant: each word that is
    not key=value belongs to the value before it (Ansible makes it _raw_params instead)."""
    starts = [m for m in re.finditer(r"\S+", arg) if _ASSIGNMENT.match(m.group())]
    meant = {}
    for i, start in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(arg)
        key = _ASSIGNMENT.match(start.group())[1]
        value = arg[start.start() + len(key) + 1 : end].strip()
        if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        meant[key] = value
    return meant


def raw_params_line(arg: str, parsed: Mapping[str, Any]) -> str:
    """A -e that Ansible split at its spaces: what arrived, and how to pass it whole."""
    arrived = [f"{key}={_quoted(value)}" for key, value in parsed.items() if key != RAW_PARAMS]
    rest = _quoted(parsed.get(RAW_PARAMS, ""))
    meant = intended(arg)
    if not meant:
        return (
            f"-e {shlex.quote(arg)} is not name=value: it arrived as {RAW_PARAMS}={rest}, which "
            "nothing reads. Pass -e name=value, or a job file: -e @jobs/<name>.yml."
        )
    job_file = "; ".join(f"{key}: {_quoted(value)}" for key, value in meant.items())
    return (
        f"-e {shlex.quote(arg)} arrived split at its spaces, as {', '.join(arrived)} and "
        f"{RAW_PARAMS}={rest}, which nothing reads (-e name=value ends a value at a space). "
        f"Put it in a job file, -e @jobs/<name>.yml, as {job_file} "
        f"or pass it as JSON: -e {shlex.quote(json.dumps(meant))}"
    )


def _quoted(value: Any) -> str:
    """value as a single-quoted YAML scalar, which keeps a backslash a backslash."""
    return "'" + str(value).replace("'", "''") + "'"


def refusal(lines: list[str]) -> str:
    """The message that stops the playbook: each lost input on a line of its own."""
    return "\n".join(
        [
            "Nothing reads these inputs, so they would be silently lost; nothing has run yet:",
            *(f"- {line}" for line in lines),
        ]
    )
