"""Action plugin: refuse an unsupported operating system before any module runs on the node.

Reads the node's os-release with a raw command (no Python needed on the node), and decides
on the controller with plugins/module_utils/common/platform.py.
"""

from __future__ import annotations

import shlex

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.platform import (
    RHEL_PLATFORM_PYTHON,
    describe,
    family,
    major_version,
    parse_os_release,
    pinned_interpreter,
    platform_problem,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "refuse", "rhel_python"))
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        path = self._task.args.get("path") or "/etc/os-release"
        # os-release(5): /etc/os-release, else /usr/lib/os-release.
        command = f"cat {shlex.quote(path)} 2>/dev/null || cat /usr/lib/os-release"
        answer = self._low_level_execute_command(command)
        host = task_vars.get("inventory_hostname", "this host")
        if answer.get("rc") != 0:
            result.update(
                failed=True,
                msg=f"{host}: cannot read {path} or /usr/lib/os-release to check the "
                f"operating system: {answer.get('stderr', '').strip()}",
            )
            return result
        fields = parse_os_release(answer.get("stdout", ""))
        refuse = boolean(self._task.args.get("refuse", True), strict=False)
        problem = platform_problem(fields, host) if refuse else None
        # Recorded as the discovered interpreter (a fact), so discovery never runs on this
        # node and every later module of the play (and of later plays, through the fact
        # cache) uses it. An ansible_python_interpreter of the inventory still wins.
        pinned = pinned_interpreter(
            fields,
            str(task_vars.get("ansible_python_interpreter") or ""),
            self._task.args.get("rhel_python") or RHEL_PLATFORM_PYTHON,
        )
        if pinned:
            result["ansible_facts"] = {"discovered_interpreter_python": pinned}
        result.update(
            interpreter=pinned,
            changed=False,
            release=describe(fields),
            family=family(fields),
            major_version=major_version(fields),
        )
        if problem:
            result.update(failed=True, msg=problem)
        return result
