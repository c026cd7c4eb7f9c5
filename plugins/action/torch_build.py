"""Action plugin: check that the pinned torch has the chosen CUDA build, on the controller.

The decision and PyTorch's table of builds are in plugins/module_utils/torch_builds.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ansible.plugins.action import ActionBase


def _load_torch_builds():
    name = "torch_cluster_module_utils_torch_builds"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "module_utils" / "torch_builds.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


torch_builds = _load_torch_builds()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("torch_version", "variant"))
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        version = str(self._task.args.get("torch_version", ""))
        variant = str(self._task.args.get("variant", ""))
        problem = torch_builds.variant_problem(version, variant)
        if problem:
            result.update(failed=True, msg=problem + ".")
            return result
        result.update(
            changed=False,
            cuda_version=torch_builds.cuda_version(variant),
            torch_nccl=torch_builds.torch_nccl(version, variant) or "",
            variants=list(torch_builds.TORCH_BUILDS.get(torch_builds.minor(version), {})),
        )
        return result
