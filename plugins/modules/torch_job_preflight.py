#!/usr/bin/python
"""Ansible module: check that a node can take its part of a torchrun job, changing nothing."""

from __future__ import annotations

import os
import pwd
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.addresses import (
    address_problem,
    own_addresses,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.digests import (
    subtrees_digest,
    tree_digest,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import read_text
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.node_paths import (
    driver_gpus,
    local_fact,
    node_paths_argument_spec,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.peers import (
    unreached_peers,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.proc import (
    port_listeners,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.ssh import runuser_prefix
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.inputs import NPROC
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    RUNNING,
    UNIT_PROPERTIES,
    parse_properties,
    unit_state,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.mounts import (
    missing_mount,
    resolve_shared_dir,
)

DOCUMENTATION = r"""
module: torch_job_preflight
short_description: Check that a node can take its part of a torchrun job
description:
  - "One round trip per node for every check the launch needs, each failure named with what to
    do about it. Nothing on the node changes, but for one repair: the shared_storage role's
    mount, listed in /etc/fstab but not mounted (its mount at boot failed), is mounted again."
  - The node's address is one of its own (read now, never from a fact cache); the node is
    provisioned (its torchrun exists); I(nproc) is a positive integer or auto, and
    not more than the node's GPUs; no unit of the job runs; on the master, the rendezvous port
    is free and the training user reaches every other node over SSH (the watcher needs it).
  - Reports whether the node's copies of the code and the data match the controller's, so
    that the launch copies only what changed.
options:
  node_name:
    description: This node's inventory hostname, for the messages.
    type: str
    required: true
  address:
    description: The address the other nodes reach this node on; it must be one of its own.
    type: str
    required: true
  job_id:
    description: The job's id.
    type: str
    required: true
  unit:
    description: The job's unit name.
    type: str
    required: true
  nproc:
    description: Processes on this node, a positive integer or auto.
    type: raw
    default: auto
  port:
    description: On the master, the rendezvous port that must be free; 0 elsewhere.
    type: int
    default: 0
  peers:
    description:
      - On the master, the other nodes (name to address).
      - The training user must reach each of them over SSH.
    type: dict
    default: {}
  user:
    description: The training user.
    type: str
    default: root
  writable:
    description: Folders a confined job is given to write to; each must exist.
    type: list
    elements: path
    default: []
  code_dir:
    description: Where this version of the code is staged on the node.
    type: path
    required: true
  code_digest:
    description: The controller's tree_digest of the code.
    type: str
    required: true
  data_dir:
    description: The node's data folder.
    type: path
    required: true
  data_names:
    description: The entries of the controller's data folder.
    type: list
    elements: str
    default: []
  data_digest:
    description: The controller's digest of those entries (paths, sizes, times).
    type: str
    default: ""
  shared_dir:
    description:
      - The job's shared folder (train_shared_dir). C(auto) takes the shared_storage role's mount
        from I(shared_fact) when the node has one, else none; empty for none; else a folder that
        must exist on the node.
    type: str
    default: auto
  fstab:
    description:
      - The node's fstab. With I(shared_dir=auto), the shared_storage role's mount that it lists
        and that is not mounted (its mount at boot failed) is mounted again, with a warning.
    type: path
    default: /etc/fstab
  mountinfo:
    description: The node's mount table.
    type: path
    default: /proc/self/mountinfo
extends_documentation_fragment:
  - torch_cluster.cluster.node_paths
"""

RETURN = r"""
interface:
  description: The interface that carries I(address).
  type: str
  returned: success
torchrun:
  description: The training environment's torchrun.
  type: str
  returned: success
nproc:
  description: The number of processes this node starts.
  type: int
  returned: success
gpus:
  description: The GPUs the driver lists.
  type: int
  returned: success
code_current:
  description: Whether the node has this version of the code, intact.
  type: bool
  returned: success
data_current:
  description: Whether the node's data has the controller's files (paths, sizes and times).
  type: bool
  returned: success
shared_dir:
  description: The job's shared folder on this node, resolved (empty for none).
  type: str
  returned: success
remounted:
  description: Whether the shared_storage role's mount was missing and was mounted again.
  type: bool
  returned: success
"""


def environment_problems(node: str, torchrun: str, fact: str) -> list[str]:
    if not torchrun:
        return [
            f"{node} is not provisioned: it has no training environment (no {fact}, the pytorch "
            "role's local fact). Run playbooks/provision.yml for it first"
        ]
    if not os.access(torchrun, os.X_OK):
        return [
            f"{node}: {torchrun} is missing: the training environment is broken or gone. Run "
            "playbooks/provision.yml for this node"
        ]
    return []


def nproc_problems(node: str, given: str, nproc: int, gpus: int) -> list[str]:
    if not NPROC.match(given):
        return [f"{node}: nproc must be a positive integer or auto (got {given!r})"]
    if gpus and nproc > gpus:
        return [
            f"{node} has {gpus} GPU(s) but nproc is {nproc}: a GPU node runs at most one "
            "process per GPU (set nproc for this host, or leave it out for one per GPU)"
        ]
    return []


def unit_problems(module: AnsibleModule, node: str, unit: str, job_id: str) -> list[str]:
    rc, out, err = module.run_command(
        ["systemctl", "show", unit, f"--property={','.join(UNIT_PROPERTIES)}"]
    )
    if rc != 0:
        return [f"{node}: systemctl show {unit} failed: {err.strip()}"]
    if unit_state(parse_properties(out)).state == RUNNING:
        return [
            f"Job {job_id} is already running on {node} (unit {unit}). Stop it with: "
            f"ansible-playbook playbooks/stop.yml -e job_id={job_id}"
        ]
    return []


def port_problems(node: str, port: int) -> list[str]:
    users = port_listeners(port) if port else []
    if not users:
        return []
    return [
        f"Port {port} is already in use on the master {node} ({', '.join(users)}). Stop what "
        "listens there, or choose another cluster_master_port (and provision again)"
    ]


def user_problems(node: str, user: str, peers: dict[str, str]) -> list[str]:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return [f"{node}: the training user {user!r} (train_user) does not exist"]
    # The connections it opens are the ones the watcher then uses.
    unreached = unreached_peers(peers, runuser_prefix(user))
    if not unreached:
        return []
    return [
        f"the master {node} cannot reach every node over SSH as {user}, which the watcher "
        f"needs: {'; '.join(unreached)}. Run playbooks/provision.yml (the ssh_trust role), with "
        "train_user equal to ssh_trust_user"
    ]


def shared_folder(node: str, given: str, fact: str) -> tuple[str, list[str]]:
    """The job's shared folder on this node (train_shared_dir resolved), and why it cannot be."""
    path = resolve_shared_dir(given, fact)
    if not path or os.path.isdir(path):
        return path, []
    return path, [
        f"{node}: the shared folder {path} (train_shared_dir) is not there: mount it on every "
        "node (playbooks/provision.yml with shared_storage_source or shared_storage_server), or "
        "set train_shared_dir to '' to run without one"
    ]


def mount_again(
    module: AnsibleModule, node: str, path: str, fstab: str, mountinfo: str
) -> tuple[bool, list[str]]:
    """The shared_storage role's mount, when /etc/fstab has it and it is not mounted (a mount
    that failed at boot, such as sshfs refused while the node had another address): mounted
    again from fstab. Whether it was, and why it could not be."""
    if not missing_mount(path, read_text(fstab), read_text(mountinfo)):
        return False, []
    if module.check_mode:
        module.warn(f"{node}: the shared folder {path} is not mounted; a run would mount it again")
        return False, []
    try:
        done = subprocess.run(
            ["mount", path], capture_output=True, text=True, timeout=60, check=False
        )
        error = done.stderr.strip() if done.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as failure:
        error = str(failure)
    if error or missing_mount(path, read_text(fstab), read_text(mountinfo)):
        return False, [
            f"{node}: the shared folder {path} is not mounted, and mounting it again from "
            f"/etc/fstab failed ({error or 'nothing mounted'}); a node that came back on another "
            "address is refused by the others: see Troubleshooting"
        ]
    module.warn(
        f"{node}: the shared folder {path} was not mounted (its mount at boot failed); it is "
        "mounted again from /etc/fstab"
    )
    return True, []


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "node_name": {"type": "str", "required": True},
            "address": {"type": "str", "required": True},
            "job_id": {"type": "str", "required": True},
            "unit": {"type": "str", "required": True},
            **node_paths_argument_spec(),
            "nproc": {"type": "raw", "default": "auto"},
            "port": {"type": "int", "default": 0},
            "peers": {"type": "dict", "default": {}},
            "user": {"type": "str", "default": "root"},
            "code_dir": {"type": "path", "required": True},
            "code_digest": {"type": "str", "required": True},
            "data_dir": {"type": "path", "required": True},
            "data_names": {"type": "list", "elements": "str", "default": []},
            "data_digest": {"type": "str", "default": ""},
            "shared_dir": {"type": "str", "default": "auto"},
            "writable": {"type": "list", "elements": "path", "default": []},
            "fstab": {"type": "path", "default": "/etc/fstab"},
            "mountinfo": {"type": "path", "default": "/proc/self/mountinfo"},
        },
        supports_check_mode=True,
    )
    p = module.params
    node = p["node_name"]
    torchrun = local_fact(p["environment_fact"], "torchrun")
    gpus = driver_gpus(p["gpu_dir"])
    given = str(p["nproc"])
    nproc = 0 if not NPROC.match(given) else (gpus or 1) if given == "auto" else int(given)
    interface, wrong_address = address_problem(node, p["address"], own_addresses())
    remounted, remount_problems = (
        mount_again(module, node, resolve_shared_dir("auto", p["shared_fact"]), p["fstab"],
                    p["mountinfo"])
        if p["shared_dir"] == "auto"
        else (False, [])
    )  # fmt: skip
    shared_dir, shared_problems = shared_folder(node, p["shared_dir"], p["shared_fact"])
    problems = [
        *([wrong_address] if wrong_address else []),
        *environment_problems(node, torchrun, p["environment_fact"]),
        *nproc_problems(node, given, nproc, gpus),
        *unit_problems(module, node, p["unit"], p["job_id"]),
        *port_problems(node, p["port"]),
        *user_problems(node, p["user"], p["peers"]),
        *remount_problems,
        *shared_problems,
        *[
            f"{node}: {path} (train_writable_paths) is not a folder here; a confined job "
            "cannot be given a path that does not exist"
            for path in p["writable"]
            if not os.path.isdir(path)
        ],
    ]
    if problems:
        module.fail_json(msg="; ".join(problems) + ".", problems=problems)
    module.exit_json(
        changed=remounted,
        remounted=remounted,
        interface=interface,
        torchrun=torchrun,
        nproc=nproc,
        gpus=gpus,
        code_current=tree_digest(p["code_dir"]) == p["code_digest"],
        data_current=bool(p["data_names"])
        and subtrees_digest(p["data_dir"], p["data_names"]) == p["data_digest"],
        shared_dir=shared_dir,
    )


if __name__ == "__main__":
    main()
