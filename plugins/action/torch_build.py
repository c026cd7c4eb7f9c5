"""Action plugin: check that the pinned torch has the chosen CUDA build, on the controller.

The decision and PyTorch's table of builds are in plugins/module_utils/provision/torch_builds.py.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.torch_builds import (
    TORCH_BUILDS,
    cuda_version,
    minor,
    torch_nccl,
    variant_problem,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("torch_version", "variant"))
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        version = str(self._task.args.get("torch_version", ""))
        variant = str(self._task.args.get("variant", ""))
        problem = variant_problem(version, variant)
        if problem:
            result.update(failed=True, msg=problem + ".")
            return result
        result.update(
            changed=False,
            cuda_version=cuda_version(variant),
            torch_nccl=torch_nccl(version, variant) or "",
            variants=list(TORCH_BUILDS.get(minor(version), {})),
        )
        return result
