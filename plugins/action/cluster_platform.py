"""Action plugin: refuse an unsupported operating system before any module runs on the node.

Reads the node's os-release with a raw command (no Python needed on the node), and decides
on the controller with plugins/module_utils/cluster_platform.py.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

from ansible.plugins.action import ActionBase


def _load_cluster_platform():
    """plugins/module_utils/cluster_platform.py, loaded from beside this plugin (in the
    project and in the collection alike)."""
    name = "torch_cluster_module_utils_cluster_platform"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "module_utils" / "cluster_platform.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


cluster_platform = _load_cluster_platform()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path",))
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
        fields = cluster_platform.parse_os_release(answer.get("stdout", ""))
        problem = cluster_platform.platform_problem(fields, host)
        result.update(
            changed=False,
            release=cluster_platform.describe(fields),
            family=cluster_platform.family(fields),
            major_version=cluster_platform.major_version(fields),
        )
        if problem:
            result.update(failed=True, msg=problem)
        return result
