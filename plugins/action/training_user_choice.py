"""Action plugin: choose the training user's UID and GID, once, for every node, on the
controller, from what the training_user_ids module read on each node.

Runs on the controller alone (no module, nothing sent to a node), before anything changes:
refuses, naming each node and its ids, users whose ids disagree, ids that something else has,
and inputs the role cannot use.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.team import (
    choose_member_ids,
    member_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.training_user import (
    choose_ids,
    input_problems,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("name", "uid", "gid", "id_min", "home", "shell", "probes", "members"))
    _supports_check_mode = True
    _NUMBERS = (("uid", 0), ("gid", 0), ("id_min", 2000))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        try:
            uid, gid, id_min = (int(args.get(key, default)) for key, default in self._NUMBERS)
        except (TypeError, ValueError):
            result.update(
                failed=True,
                msg="training_user_uid, training_user_gid and training_user_id_min must be "
                f"whole numbers, got {args.get('uid')!r}, {args.get('gid')!r}, "
                f"{args.get('id_min')!r}",
            )
            return result
        name, home = str(args.get("name", "")), str(args.get("home") or "")
        problems = input_problems(
            name, home=home, shell=str(args.get("shell", "")), uid=uid, gid=gid, id_min=id_min
        )
        members = list(args.get("members") or [])
        problems += member_problems(members, name)
        choice, chosen = None, {}
        probes = dict(args.get("probes") or {})
        if not problems:
            # A node Ansible could not reach has a result without the module's keys.
            choice, problems = choose_ids(name, probes, uid=uid, gid=gid, id_min=id_min, home=home)
        if choice is not None and members:
            taken = {name: (choice["uid"], choice["gid"])}
            chosen, problems = choose_member_ids(members, probes, taken, id_min=id_min)
        result["changed"] = False
        if problems:
            result.update(failed=True, problems=problems, msg=" ".join(f"{p}." for p in problems))
        else:
            result.update(choice, members=chosen)
        return result
