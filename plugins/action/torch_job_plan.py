"""Action plugin: plan a job's attempt on the controller: its nodes in rank order, the master,
each node's node_rank, and the nodes that must get the code and the data.

Runs on the controller alone (no module, nothing sent to a node); the decisions are
plugins/module_utils/job/attempt_plan.py's.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempt_plan import (
    plan_attempt,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        (
            "nodes",
            "spares",
            "attempt",
            "next_nodes",
            "checks",
            "hosts",
            "code_bytes",
            "code_spread_mb",
            "resume",
        )
    )
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        next_nodes = args.get("next_nodes")
        # A node Ansible could not reach has a result without the module's keys.
        checks = {
            name: check
            for name, check in (args.get("checks") or {}).items()
            if isinstance(check, dict) and "code_current" in check
        }
        try:
            plan = plan_attempt(
                dict(args.get("nodes") or {}),
                list(args.get("spares") or []),
                attempt=int(args.get("attempt", 1)),
                next_nodes=None if next_nodes is None else list(next_nodes),
                checks=checks,
                hosts=list(args.get("hosts") or []),
                code_bytes=int(args.get("code_bytes") or 0),
                code_spread_mb=int(args.get("code_spread_mb", 32)),
                resume=boolean(args.get("resume", False), strict=False),
            )
        except ValueError as error:
            result.update(failed=True, msg=str(error))
            return result
        result.update(changed=False, **plan.as_dict())
        return result
