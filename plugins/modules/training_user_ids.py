#!/usr/bin/python
"""Ansible module: read, on a node, what the choice of the training user's ids needs."""

from __future__ import annotations

import glob
import grp
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import read_text
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.training_user import (
    gpu_access,
    node_ids,
    parse_passwd,
)

DOCUMENTATION = r"""
module: training_user_ids
short_description: Read a node's users, groups and GPU devices for the training user's ids
description:
  - Returns the node's entry for the user I(name), if any, and every user and group the node
    knows, for the training_user_choice action plugin, which chooses one UID and GID for every
    node. Python's C(pwd.getpwall) and C(grp.getgrall) list C(/etc/passwd) and C(/etc/group),
    and a directory service's entries where it enumerates them.
  - Says which of I(gpu_groups) exist on the node, and which groups own C(/dev/nvidia*) and
    C(/dev/dri/*), with a note for each device the user could not open.
  - Reads only; changes nothing.
options:
  name:
    description: The training user.
    type: str
    required: true
  gpu_groups:
    description: The groups the user should join for the GPUs, where they exist.
    type: list
    elements: str
    default: []
  members:
    description: The names of the team's members (training_user_team), whose own entries are read
      the same way.
    type: list
    elements: str
    default: []
"""

RETURN = r"""
user:
  description: The user's entry (uid, gid, home, group (its primary group's name), local (in
    /etc/passwd)), or null where it does not exist.
  type: dict
  returned: always
group:
  description: The GID of the group with the user's name, or null where there is none.
  type: int
  returned: always
users:
  description: Every user the node knows, name to [uid, primary gid].
  type: dict
  returned: always
groups:
  description: Every group the node knows, name to gid.
  type: dict
  returned: always
members:
  description: Each of I(members), name to its own I(user) and I(group), as above.
  type: dict
  returned: always
gpu_groups:
  description: The groups of I(gpu_groups) that exist on the node, which the user joins.
  type: list
  returned: always
gpu_groups_missing:
  description: The groups of I(gpu_groups) that do not exist on the node (skipped).
  type: list
  returned: always
devices:
  description: "[{path, group, mode}] of each GPU device (/dev/nvidia*, /dev/dri/*)."
  type: list
  returned: always
notes:
  description: GPU groups skipped, and devices the user could not open, one sentence each.
  type: list
  returned: always
"""

EXAMPLES = r"""
- name: Read the users, groups and GPU devices of the node
  training_user_ids:
    name: torch
    gpu_groups: [video, render]
  register: __training_user_probe
"""


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def gpu_devices() -> list[dict]:
    """Each character device of /dev/nvidia* and /dev/dri/*: its path, group and mode."""
    devices = []
    for path in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri/*")):
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode):
            mode = f"{stat.S_IMODE(info.st_mode):04o}"
            devices.append({"path": path, "group": group_name(info.st_gid), "mode": mode})
    return devices


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "gpu_groups": {"type": "list", "elements": "str", "default": []},
            "members": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    name, members = module.params["name"], module.params["members"]
    users = [(p.pw_name, p.pw_uid, p.pw_gid, p.pw_dir) for p in pwd.getpwall()]
    groups = [(g.gr_name, g.gr_gid) for g in grp.getgrall()]
    # A directory service that does not enumerate its entries still answers for one name.
    for wanted in (name, *members):
        try:
            found = pwd.getpwnam(wanted)
            users.append((found.pw_name, found.pw_uid, found.pw_gid, found.pw_dir))
        except KeyError:
            pass
        try:
            found_group = grp.getgrnam(wanted)
            groups.append((found_group.gr_name, found_group.gr_gid))
        except KeyError:
            pass
    local = {entry[0] for entry in parse_passwd(read_text("/etc/passwd"))}
    ids = node_ids(name, users, groups, local)
    ids["members"] = {}
    for member in members:
        own = node_ids(member, users, groups, local)
        ids["members"][member] = {"user": own["user"], "group": own["group"]}
    devices = gpu_devices()
    access = gpu_access(name, module.params["gpu_groups"], ids["groups"], devices)
    module.exit_json(changed=False, devices=devices, **ids, **access)


if __name__ == "__main__":
    main()
