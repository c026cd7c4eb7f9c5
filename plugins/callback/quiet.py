"""Stdout callback: Ansible's default output, without the tasks that every host skipped.

The project's playbooks hold many tasks that run only on some nodes or in some setups (the
Slurm launcher, an EL node, a spare). Ansible's default output shows each of them, with a
"skipping" line per host: a train.yml run printed about 200 lines, most of them skips. This
is the default callback with its own display_skipped_hosts option off, unless -v (or more)
is given, which brings today's detail back. Every other option is the default callback's.
"""

from __future__ import annotations

from ansible.plugins.callback.default import CallbackModule as DefaultCallback

DOCUMENTATION = r"""
name: quiet
type: stdout
short_description: Ansible's default output, without skipped tasks unless -v is given
description:
  - The default callback (ansible.builtin.default), with C(display_skipped_hosts) off at
    verbosity 0, so that a task every host skipped prints nothing, not even its banner.
  - With -v or more, skipped hosts are shown as the option says (shown by default).
extends_documentation_fragment:
  - default_callback
  - result_format_callback
"""


# The project's actions that print while they run.
STREAMING = frozenset({"torch_job_watch", "torch_job_log"})


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "quiet"

    def get_option(self, k):
        if k == "display_skipped_hosts" and self._display.verbosity < 1:
            return False
        return super().get_option(k)

    def v2_playbook_on_task_start(self, task, is_conditional):
        super().v2_playbook_on_task_start(task, is_conditional)
        # A task that prints while it runs (the watch of a job, a followed log) has its banner
        # first, not after its lines (the banner of the others waits for a result to show).
        if task.action.rsplit(".", 1)[-1] in STREAMING and self._last_task_banner != task._uuid:
            self._print_task_banner(task)
