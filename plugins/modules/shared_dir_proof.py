#!/usr/bin/python
"""Ansible module: prove that a folder is shared: every node writes a file, every node reads all."""

from __future__ import annotations

import contextlib
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.mounts import (
    mount_of,
    parse_mountinfo,
)

DOCUMENTATION = r"""
module: shared_dir_proof
short_description: Prove that a folder is shared by every node, and measure it
description:
  - One proof is four steps, the first two and the last run with the same I(path) and I(token).
  - C(phase=write), on every node, writes a file named after the node into
    C(PATH/.torch-cluster-proof/TOKEN/), and reports the mount that holds I(path), its free
    space, and (with I(write_mib)) how fast a file of that size is written and flushed to it.
    Proof folders older than a day, left by an interrupted proof, are removed.
  - C(phase=read), on every node, reads back every node's file, waiting up to I(wait) seconds
    for one that is not there yet.
  - Then the shared_dir_verdict action judges, on the controller, what every node reported.
  - C(phase=remove), on one node, removes the proof's folder.
options:
  phase:
    description: The step.
    type: str
    choices: [write, read, remove]
    required: true
  path:
    description: The folder that must be shared.
    type: path
    required: true
  token:
    description: The proof's name (its folder); the same in every step.
    type: str
    required: true
  node_name:
    description: This node's name (write), whose file it writes.
    type: str
    default: ""
  nodes:
    description: Every node's name, in rank order (read).
    type: list
    elements: str
    default: []
  write_mib:
    description: With C(phase=write), also time writing this many MiB (0 for no measurement).
    type: int
    default: 0
  wait:
    description: With C(phase=read), seconds to wait for a file that is not there yet.
    type: float
    default: 5
"""

RETURN = r"""
ok:
  description: (write) Whether the node's file was written.
  type: bool
  returned: when phase is write
error:
  description: (write, read) Why the step failed on this node.
  type: str
  returned: when phase is write or read
mount:
  description: (write) The mount that holds the path (fstype, source, mount_point, root).
  type: dict
  returned: when phase is write
free_gib:
  description: (write) Free space of the folder's filesystem, in GiB.
  type: float
  returned: when phase is write
write_mb_s:
  description: (write) The write throughput measured with I(write_mib), in MB/s (null without).
  type: float
  returned: when phase is write
seen:
  description: (read) The nodes whose file this node read back.
  type: list
  returned: when phase is read
"""

# Under the folder: one folder per proof, one file per node in it.
PROOF_FOLDER = ".torch-cluster-proof"
MIB = 1 << 20
STALE_SECONDS = 86400


def proof_dir(path: str, token: str) -> str:
    return os.path.join(path, PROOF_FOLDER, token)


def remove_stale(path: str) -> None:
    """Proof folders that an interrupted proof left behind."""
    root = os.path.join(path, PROOF_FOLDER)
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        try:
            if time.time() - entry.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            pass


def write_speed(folder: str, node: str, mib: int) -> float:
    """MB/s of writing mib MiB to a file in folder and flushing it to the server."""
    target = os.path.join(folder, f"{node}.throughput")
    block = os.urandom(MIB)
    started = time.monotonic()
    try:
        with open(target, "wb") as handle:
            for _ in range(mib):
                handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
        seconds = time.monotonic() - started
    finally:
        if os.path.exists(target):
            os.remove(target)
    return mib * MIB / 1e6 / max(seconds, 1e-6)


def write(p: dict) -> dict:
    path, node = p["path"], p["node_name"]
    with open("/proc/self/mountinfo") as handle:
        mount = mount_of(path, parse_mountinfo(handle.read()))
    found: dict = {"ok": False, "error": "", "mount": mount, "free_gib": None, "write_mb_s": None}
    if not os.path.isdir(path):
        found["error"] = f"{path} is not a folder on this node"
        return found
    usage = shutil.disk_usage(path)
    found["free_gib"] = round(usage.free / 2**30, 1)
    folder = proof_dir(path, p["token"])
    try:
        remove_stale(path)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, node), "w") as handle:
            handle.write(f"{p['token']} {node}\n")
            handle.flush()
            os.fsync(handle.fileno())
        if p["write_mib"] > 0:
            found["write_mb_s"] = round(write_speed(folder, node, p["write_mib"]), 1)
    except OSError as error:
        found["error"] = str(error)
        return found
    found["ok"] = True
    return found


def read_back(p: dict) -> dict:
    folder = proof_dir(p["path"], p["token"])
    deadline = time.monotonic() + p["wait"]
    seen: list[str] = []
    while True:
        for node in p["nodes"]:
            if node in seen:
                continue
            try:
                with open(os.path.join(folder, node)) as handle:
                    if handle.read() == f"{p['token']} {node}\n":
                        seen.append(node)
            except OSError:
                pass
        if len(seen) == len(p["nodes"]) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    return {"seen": [node for node in p["nodes"] if node in seen], "error": ""}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "phase": {"type": "str", "required": True, "choices": ["write", "read", "remove"]},
            "path": {"type": "path", "required": True},
            "token": {"type": "str", "required": True},
            "node_name": {"type": "str", "default": ""},
            "nodes": {"type": "list", "elements": "str", "default": []},
            "write_mib": {"type": "int", "default": 0},
            "wait": {"type": "float", "default": 5},
        },
        supports_check_mode=False,
    )
    p = module.params
    if "/" in p["token"] or p["token"] in ("", ".", ".."):
        module.fail_json(msg=f"token must be a plain name (got {p['token']!r})")
    if p["phase"] == "write":
        module.exit_json(changed=True, **write(p))
    if p["phase"] == "read":
        module.exit_json(changed=False, **read_back(p))
    shutil.rmtree(proof_dir(p["path"], p["token"]), ignore_errors=True)
    with contextlib.suppress(OSError):  # the proofs' folder too, once no proof is under way
        os.rmdir(os.path.join(p["path"], PROOF_FOLDER))
    module.exit_json(changed=True)


if __name__ == "__main__":
    main()
