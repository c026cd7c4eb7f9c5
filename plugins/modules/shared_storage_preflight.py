#!/usr/bin/python
"""Ansible module: check, read-only, that a node can mount the cluster's shared folder."""

from __future__ import annotations

import os
import pwd
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import read_text
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.mounts import (
    fstab_entry,
    mount_of,
    mount_point_problem,
    parse_mountinfo,
    source_host,
)

DOCUMENTATION = r"""
module: shared_storage_preflight
short_description: Check, read-only, that a node can mount the cluster's shared folder
description:
  - The mount point holds no files that a mount would hide, and nothing else is mounted there
    (or named for it in C(/etc/fstab)); the same source mounted there by an earlier run is fine.
  - The source's server answers on its port (a TCP connection from this node), unless I(port)
    is 0.
  - Returns the training user's UID and GID, which must be the same on every node.
options:
  path:
    description: The mount point.
    type: path
    required: true
  source:
    description: What is mounted there (C(server:/export)), as C(/etc/fstab) will name it.
    type: str
    required: true
  port:
    description: The TCP port the source's server answers on; 0 skips the check.
    type: int
    default: 0
  timeout:
    description: Seconds to wait for the server to answer.
    type: float
    default: 5
  user_missing_ok:
    description:
      - A missing I(user) is no problem (another role creates it first, with the same ids on
        every node); its UID and GID are then -1.
    type: bool
    default: false
  user:
    description: The training user.
    type: str
    default: root
"""

RETURN = r"""
problems:
  description: One sentence per reason the node cannot mount the folder (empty when it can).
  type: list
  returned: always
mounted:
  description: Whether the source is mounted at the path already.
  type: bool
  returned: always
uid:
  description: The training user's UID (-1 when the user does not exist).
  type: int
  returned: always
gid:
  description: The training user's primary GID (-1 when the user does not exist).
  type: int
  returned: always
"""


def answers(host: str, port: int, timeout: float) -> str:
    """ "" when host accepts a TCP connection on port, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return ""
    except OSError as error:
        return error.strerror or type(error).__name__


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "source": {"type": "str", "required": True},
            "port": {"type": "int", "default": 0},
            "timeout": {"type": "float", "default": 5},
            "user": {"type": "str", "default": "root"},
            "user_missing_ok": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    mount = mount_of(path, parse_mountinfo(read_text("/proc/self/mountinfo")))
    fstab = fstab_entry(path, read_text("/etc/fstab"))
    entries = os.listdir(path) if os.path.isdir(path) else None
    problems = []
    if os.path.lexists(path) and not os.path.isdir(path):
        problems.append(f"{path} exists and is not a folder")
    why = mount_point_problem(
        path, expected_source=p["source"], fstab=fstab, mount=mount, entries=entries
    )
    if why:
        problems.append(why)
    mounted = bool(fstab) and fstab["source"] == p["source"] and mount.get("mount_point") == path
    if p["port"] and not mounted:
        host = source_host(p["source"])
        if not host:
            problems.append(
                f"shared_storage_source {p['source']!r} names no server to check: set "
                "shared_storage_port: 0 to skip the check"
            )
        else:
            refused = answers(host, p["port"], p["timeout"])
            if refused:
                problems.append(
                    f"the source {p['source']} does not answer: {host} port {p['port']}: {refused}"
                )
    try:
        user = pwd.getpwnam(p["user"])
        uid, gid = user.pw_uid, user.pw_gid
    except KeyError:
        uid = gid = -1
        if not p["user_missing_ok"]:
            problems.append(f"the training user {p['user']} does not exist")
    module.exit_json(changed=False, problems=problems, mounted=mounted, uid=uid, gid=gid)


if __name__ == "__main__":
    main()
