#!/usr/bin/python
"""Ansible module: the team's people in Slurm's accounting (a cluster, an account, a user each)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.slurm_people import (
    account_changes,
    parse_parsable2,
    sacctmgr_commands,
)

DOCUMENTATION = r"""
module: slurm_associations
short_description: Give each of the team's people an association in Slurm's accounting
description:
  - Runs where sacctmgr reaches slurmdbd (the Slurm controller). Adds the cluster where the
    database lacks it, the account, and an association of each of I(users) with that account,
    which is what AccountingStorageEnforce=associations lets run jobs and what fair share
    counts usage by.
  - Adds only. A person with an association in the account who is not in I(users) is
    reported in C(unlisted), not removed.
  - Check mode reports what it would add.
options:
  cluster:
    description: The cluster's name (slurm.conf's ClusterName).
    type: str
    required: true
  account:
    description: The account the people belong to.
    type: str
    required: true
  users:
    description: The people, by user name.
    type: list
    elements: str
    required: true
"""

RETURN = r"""
added:
  description: What was added (or would be, in check mode), as sacctmgr command lines.
  type: list
  returned: always
unlisted:
  description: People with an association in the account whom I(users) does not name.
  type: list
  returned: always
"""

EXAMPLES = r"""
- name: Give the team's people an association each
  slurm_associations:
    cluster: torch
    account: team
    users: [torch, alice, bob]
"""


def sacctmgr_rows(module: AnsibleModule, what: list[str], width: int) -> list[list[str]]:
    """sacctmgr show WHAT, as rows of WIDTH fields; fails the module when sacctmgr does."""
    rc, out, err = module.run_command(
        ["sacctmgr", "--noheader", "--parsable2", "show", *what], check_rc=False
    )
    if rc != 0:
        module.fail_json(msg=f"sacctmgr show {' '.join(what)} failed: {err.strip() or out.strip()}")
    return parse_parsable2(out, width)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "cluster": {"type": "str", "required": True},
            "account": {"type": "str", "required": True},
            "users": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    cluster, account = module.params["cluster"], module.params["account"]
    clusters = [row[0] for row in sacctmgr_rows(module, ["cluster", "format=cluster"], 1)]
    accounts = [row[0] for row in sacctmgr_rows(module, ["account", "format=account"], 1)]
    associations = sacctmgr_rows(
        module, ["associations", f"cluster={cluster}", "format=account,user"], 2
    )
    changes = account_changes(
        clusters, accounts, associations,
        cluster=cluster, account=account, users=module.params["users"],
    )  # fmt: skip
    commands = sacctmgr_commands(changes, cluster=cluster, account=account)
    if not module.check_mode:
        for command in commands:
            rc, out, err = module.run_command(command, check_rc=False)
            if rc != 0:
                module.fail_json(
                    msg=f"{' '.join(command)} failed: {err.strip() or out.strip()}",
                    added=[],
                )
    module.exit_json(
        changed=changes.changed,
        added=[" ".join(command) for command in commands],
        unlisted=changes.unlisted,
    )


if __name__ == "__main__":
    main()
