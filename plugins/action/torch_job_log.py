"""Action plugin: show a torch job's log on the controller, and follow it while it runs.

Runs the torch_job_log module on the node (the task's host): once for the last lines, then,
with `follow`, round after round from where the last one ended, until the job's unit there
has stopped. The lines are printed as they come, not wrapped in the task's result.
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

# A round waits this long on the node for new lines before it returns.
ROUND_WAIT_S = 2.0
# Rounds in a row that may fail to reach the node before following stops.
MISSES = 3


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        follow = bool(args.pop("follow", False))
        prefix = str(args.pop("prefix", ""))
        seen = self._execute_module(
            module_name="torch_job_log", module_args={**args, "offset": -1}, task_vars=task_vars
        )
        if seen.get("failed"):
            return {**result, **seen}
        shown = self._show(seen, prefix)
        misses, started = 0, time.monotonic()
        while follow and seen.get("running"):
            try:
                answer = self._execute_module(
                    module_name="torch_job_log",
                    module_args={**args, "offset": seen["offset"], "wait": ROUND_WAIT_S},
                    task_vars=task_vars,
                )
            except AnsibleConnectionFailure as err:
                answer = {"failed": True, "msg": str(err)}
            if answer.get("failed") or answer.get("unreachable"):
                misses += 1
                if misses >= MISSES:
                    display.warning(f"stopped following: {answer.get('msg', 'no answer')}")
                    break
                continue
            misses, seen = 0, answer
            shown += self._show(seen, prefix)
        result.update(
            changed=False,
            lines=shown,
            running=bool(seen.get("running")),
            followed_s=round(time.monotonic() - started, 1) if follow else 0,
        )
        return result

    @staticmethod
    def _show(seen: dict, prefix: str) -> int:
        lines = seen.get("lines") or []
        for line in lines:
            display.display(f"{prefix}{line}")
        return len(lines)
