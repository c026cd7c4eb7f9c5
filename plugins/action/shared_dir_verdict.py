"""Action plugin: judge the proof that a folder is shared, on the controller, from what every
node reported (the shared_dir_proof module's write and read steps).

Runs on the controller alone (no module, nothing sent to a node): names each node that could
not write to the folder, could not read it, or saw other files there than the rest.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.proof import (
    proof_problems,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "nodes", "writes", "reads"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        # A node Ansible could not reach has a result without the module's keys.
        writes = {name: r for name, r in (args.get("writes") or {}).items() if "ok" in r}
        reads = {name: r for name, r in (args.get("reads") or {}).items() if "seen" in r}
        problems = proof_problems(
            list(args.get("nodes") or []), args.get("path", ""), writes, reads
        )
        result.update(changed=False, problems=problems)
        return result
