"""Action plugin: check a job's inputs and its code and data on the controller, before any node.

Runs on the controller alone (no module, nothing sent to a node): the job's inputs, each
wrong one named with its rule; the code folder and script; the data folder; and the
digests that tell each node whether its copies of the code and data are current (the
torch_job_preflight module compares them), so that the launch copies only what changed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from ansible.plugins.action import ActionBase


def _load(stem: str):
    """plugins/module_utils/<stem>.py: the launcher's logic. Modules get it through
    Ansible's module_utils path; a controller-side plugin of a project that is not a
    collection loads it from beside itself."""
    name = f"torch_cluster_module_utils_{stem}"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "module_utils" / f"{stem}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


torch_job = _load("torch_job")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("code_dir", "script", "data_src", "inputs", "flight_recorder_dir"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        code_dir, script = args.get("code_dir", ""), args.get("script", "")
        data_src = args.get("data_src", "")
        problems = torch_job.input_problems(args.get("inputs") or {})
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
            code_digest=torch_job.tree_digest(code_dir),
            code_bytes=torch_job.tree_size(code_dir),
            data_names=data_names,
            data_digest=torch_job.subtrees_digest(data_src, data_names) if data_src else "",
            # NCCL's flight recorder on every job, dumping into that folder on each node.
            flight_recorder_env=torch_job.flight_recorder_env(args["flight_recorder_dir"])
            if args.get("flight_recorder_dir")
            else {},
        )
        return result
