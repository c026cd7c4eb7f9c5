"""Action plugin: judge the proof that a folder is shared, on the controller, from what every
node reported (the shared_dir_proof module's write and read steps).

Runs on the controller alone (no module, nothing sent to a node): names each node that could
not write to the folder, could not read it, or saw other files there than the rest.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ansible.plugins.action import ActionBase


def _load_shared_storage():
    """plugins/module_utils/shared_storage.py, loaded from beside this plugin (in the
    repository and in the collection alike)."""
    name = "torch_cluster_module_utils_shared_storage"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "module_utils" / "shared_storage.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


shared_storage = _load_shared_storage()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "nodes", "writes", "reads"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        # A node Ansible could not reach has a result without the module's keys.
        writes = {name: r for name, r in (args.get("writes") or {}).items() if "ok" in r}
        reads = {name: r for name, r in (args.get("reads") or {}).items() if "seen" in r}
        problems = shared_storage.proof_problems(
            list(args.get("nodes") or []), args.get("path", ""), writes, reads
        )
        result.update(changed=False, problems=problems)
        return result
