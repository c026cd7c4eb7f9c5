"""Action plugin: check a job's inputs and its code and data on the controller, before any node.

Runs on the controller alone (no module, nothing sent to a node): the job's inputs, each
wrong one named with its rule; the code folder and script; the data folder; and the
digests that tell each node whether its copies of the code and data are current (the
torch_job_preflight module compares them), so that the launch copies only what changed.
"""

from __future__ import annotations

import os

from ansible.plugins.action import ActionBase
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.digests import (
    subtrees_digest,
    tree_digest,
    tree_size,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.flight_recorder import (
    flight_recorder_env,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.inputs import input_problems


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("code_dir", "script", "data_src", "inputs", "flight_recorder_dir"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        code_dir, script = args.get("code_dir", ""), args.get("script", "")
        data_src = args.get("data_src", "")
        problems = input_problems(args.get("inputs") or {})
        if not os.path.isfile(os.path.join(code_dir, script)):
            problems.append(
                f"The training script {os.path.join(code_dir, script)} does not exist on the "
                "controller (train_code_dir, train_script)"
            )
        if data_src and not os.path.isdir(data_src):
            problems.append(
                f"The data folder train_data_src={data_src} does not exist on the controller"
            )
        if problems:
            result.update(failed=True, msg="; ".join(problems) + ".", problems=problems)
            return result
        data_names = sorted(os.listdir(data_src)) if data_src else []
        result.update(
            changed=False,
            code_digest=tree_digest(code_dir),
            code_bytes=tree_size(code_dir),
            data_names=data_names,
            data_digest=subtrees_digest(data_src, data_names) if data_src else "",
            # NCCL's flight recorder on every job, dumping into that folder on each node.
            flight_recorder_env=flight_recorder_env(args["flight_recorder_dir"])
            if args.get("flight_recorder_dir")
            else {},
        )
        return result
