"""Action plugin: refuse, before anything runs, inputs that nothing would read.

Runs on the controller alone (nothing is sent to a node). It reads each -e of the command
line apart (ansible.context.CLIARGS: key=value, JSON, or a job file given as @path) and the
variables of the hosts it is given (their inventory's group_vars and host_vars, through
hostvars), and asks plugins/module_utils/common/known_vars.py which of them no role or
playbook of the collection reads. The collection's roles and playbooks sit beside plugins/,
in the repository as in an installed collection.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ansible import context
from ansible.errors import AnsibleError
from ansible.parsing.splitter import parse_kv
from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.known_vars import (
    RAW_PARAMS,
    Known,
    raw_params_line,
    read_known,
    refusal,
    unknown_line,
)

COLLECTION_ROOT = Path(__file__).resolve().parents[2]
# The files Ansible's host_group_vars plugin reads in group_vars/ and host_vars/.
VARS_SUFFIXES = ("", ".yml", ".yaml", ".json")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "all_extra_vars"))
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        known = read_known(COLLECTION_ROOT)
        every_name = bool(self._task.args.get("all_extra_vars", False))
        hosts = [str(host) for host in self._task.args.get("hosts") or []]
        lines = self._extra_var_lines(known, every_name) + self._host_lines(known, task_vars, hosts)
        if lines:
            result.update(failed=True, msg=refusal(lines), lost=lines)
        else:
            result.update(
                changed=False, msg="Every input given is one that a role or playbook reads"
            )
        return result

    def _extra_var_lines(self, known: Known, every_name: bool) -> list[str]:
        """Each -e of the command line on its own: _raw_params, and names nothing reads."""
        lines = []
        for arg in (str(arg) for arg in context.CLIARGS.get("extra_vars") or ()):
            if not arg:
                continue
            if arg.startswith("@"):
                # Ansible refused a file that is not a mapping before any play.
                path = arg[1:]
                data, where = self._loader.load_from_file(path), f"the job file {shown(Path(path))}"
            elif arg[0] in "[{":
                data, where = self._loader.load(arg), f"-e {shorten(arg)}"
            else:
                data, where = parse_kv(arg), f"-e {shorten(arg)}"
            names = [str(name) for name in data]
            if RAW_PARAMS in names:
                lines.append(raw_params_line(arg, data))
            lines += [
                unknown_line(name, where, known.closest(name))
                for name in known.unknown(names, every_name)
            ]
        return lines

    def _host_lines(self, known: Known, task_vars: dict, hosts: list[str]) -> list[str]:
        """The hosts' variables with a role's prefix that nothing reads, each once with the
        files that set it and the hosts it reaches (the extra vars are checked apart)."""
        extra_names = {str(name) for name in load_extra_vars(self._loader)}
        lost: dict[tuple[str, str], list[str]] = {}
        for host in hosts:
            variables = task_vars["hostvars"].raw_get(host)
            if not isinstance(variables, Mapping):  # no such host in the inventory
                continue
            names = [str(name) for name in variables if str(name) not in extra_names]
            for name in known.unknown(names):
                files = self._files_setting(task_vars, host, variables, name)
                lost.setdefault((name, files), []).append(host)
        return [
            unknown_line(name, f"set in {files} for {', '.join(on)}", known.closest(name))
            for (name, files), on in lost.items()
        ]

    def _files_setting(self, task_vars: dict, host: str, variables: dict, name: str) -> str:
        """The inventory files that set a name for a host: its group_vars and host_vars
        beside each inventory source and the playbook."""
        groups = ["all", *variables.get("group_names", [])]
        folders = {Path(str(task_vars.get("playbook_dir", ".")))}
        for source in task_vars.get("ansible_inventory_sources") or []:
            path = Path(str(source))
            folders.add(path if path.is_dir() else path.parent)
        candidates = [
            base / kind / f"{owner}{suffix}"
            for base in sorted(folders)
            for kind, owners in (("group_vars", groups), ("host_vars", [host]))
            for owner in owners
            for suffix in VARS_SUFFIXES
        ]
        files = {
            shown(path): None
            for candidate in candidates
            for path in (sorted(candidate.rglob("*")) if candidate.is_dir() else [candidate])
            if path.is_file() and name in self._top_level_names(path)
        }
        return ", ".join(files) or "the inventory"

    def _top_level_names(self, path: Path) -> set[str]:
        """The variables a group_vars or host_vars file sets."""
        try:
            data = self._loader.load_from_file(str(path))
        except AnsibleError:  # not a vars file Ansible reads: it names no variable
            return set()
        return {str(name) for name in data} if isinstance(data, dict) else set()


def shown(path: Path) -> str:
    """A path as the message shows it: relative to the current folder when inside it (a
    linked group_vars folder, as the sandbox's, shows the file to edit)."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(Path.cwd()))
    except ValueError:
        return str(resolved)


def shorten(arg: str, limit: int = 80) -> str:
    """A -e as the message shows it: whole when short."""
    return arg if len(arg) <= limit else arg[: limit - 3] + "..."
