#!/usr/bin/python
"""Ansible module: a wheelhouse's checksums, and a node's verified copy of what peers sent."""

from __future__ import annotations

import errno
import hashlib
import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: wheelhouse_stage
short_description: Checksum a wheelhouse, or take a node's verified copy of what peers sent
description:
  - Staging over the nodes' trust (torch_job_sync phase=spread) lands the wheelhouse in a
    folder of the training user's. Root must not install what that user could have changed
    (one node's compromised user would reach root on every node), so every file is moved into
    root's own folder (no copy, a rename), made root's and read-only to others, refused while
    any process still holds it open (a writer that opened it before could change it), and
    checked against the controller's checksums there; pip installs from that folder only.
  - C(state=manifest) (on the controller) returns the SHA-256 of every file of I(src).
  - C(state=taken) moves every file of I(manifest) from I(src) to I(dest) (root's, mode
    0755, files 0644) and checks it there; across filesystems it copies, checking the bytes
    it copies. A file already in I(dest) with its checksum is left as it is. Fails, naming the
    files, when one is missing, differs or is held open, and leaves none of them in I(dest).
options:
  state:
    description: manifest or taken.
    type: str
    choices: [manifest, taken]
    required: true
  src:
    description: The folder to checksum (manifest), or where the peers' copies are (taken).
    type: path
    required: true
  dest:
    description: With C(state=taken), root's folder that pip installs from.
    type: path
  manifest:
    description: With C(state=taken), the controller's checksums (file name to SHA-256).
    type: dict
    default: {}
"""

RETURN = r"""
manifest:
  description: (manifest) File name (relative to I(src)) to SHA-256.
  type: dict
  returned: always
bytes:
  description: (manifest) The files' size in all.
  type: int
  returned: always
copied:
  description: (taken) The files moved (or copied) and checked.
  type: list
  returned: always
"""

CHUNK = 4 * 2**20


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def manifest(folder: str) -> tuple[dict[str, str], int]:
    found, size = {}, 0
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found[os.path.relpath(path, folder)] = sha256(path)
                size += os.path.getsize(path)
    return found, size


def copy_checked(source: str, target: str, wanted: str) -> bool:
    """Copy source to target through a temporary file, hashing the bytes copied; keep the
    copy only when they have the wanted checksum (source on another filesystem)."""
    partial = f"{target}.partial"
    digest = hashlib.sha256()
    with open(source, "rb") as reader, open(partial, "wb") as writer:
        while block := reader.read(CHUNK):
            digest.update(block)
            writer.write(block)
    if digest.hexdigest() != wanted:
        os.remove(partial)
        return False
    os.chmod(partial, 0o644)
    os.replace(partial, target)
    return True


def held_open(paths: list[str], proc: str = "/proc") -> list[str]:
    """The paths whose file some process holds open (any of its /proc/<pid>/fd): a writer that
    opened it before it became root's could still change it."""
    inodes = {}
    for path in paths:
        found = os.stat(path)
        inodes[(found.st_dev, found.st_ino)] = path
    held = set()
    for pid in os.listdir(proc):
        fds = os.path.join(proc, pid, "fd")
        try:
            names = os.listdir(fds) if pid.isdigit() else []
        except OSError:
            continue
        for name in names:
            try:
                found = os.stat(os.path.join(fds, name))
            except OSError:
                continue
            key = (found.st_dev, found.st_ino)
            if key in inodes:
                held.add(inodes[key])
    return sorted(held)


def move_in(source: str, target: str, wanted: str) -> str:
    """Make the peers' copy root's without copying it: move it into root's folder, make it
    root's and read-only to others, then check it (no process may hold it open by then, so
    nobody else can change it any more). Across filesystems: a checked copy. "" when it is in
    place, else why not."""
    try:
        os.replace(source, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        return "" if copy_checked(source, target, wanted) else "checksum differs"
    os.chown(target, 0, 0)
    os.chmod(target, 0o644)
    why = "held open by a process" if held_open([target]) else ""
    why = why or ("checksum differs" if sha256(target) != wanted else "")
    if why:
        os.remove(target)
    return why


def held(folder: str, name: str, digest: str) -> bool:
    """Whether the folder holds the file with that checksum already."""
    path = os.path.join(folder, name)
    return os.path.isfile(path) and sha256(path) == digest


def take(module: AnsibleModule, src: str, dest: str, wanted: dict[str, str]) -> None:
    bad, copied = [], []
    todo = [name for name, digest in sorted(wanted.items()) if not held(dest, name, digest)]
    if module.check_mode:
        module.exit_json(changed=bool(todo), copied=todo)
    for name in todo:
        source, target = os.path.join(src, name), os.path.join(dest, name)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        try:
            why = move_in(source, target, wanted[name])
        except OSError as error:
            why = str(error.strerror)
        (bad if why else copied).append(f"{name} ({why})" if why else name)
    if bad:
        module.fail_json(
            msg=f"The staged wheelhouse in {src} does not match the controller's: "
            + ", ".join(bad)
            + ". Nothing of it was installed; run provision.yml again.",
            copied=copied,
            bad=bad,
        )
    module.exit_json(changed=bool(copied), copied=copied)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["manifest", "taken"], "required": True},
            "src": {"type": "path", "required": True},
            "dest": {"type": "path"},
            "manifest": {"type": "dict", "default": {}},
        },
        required_if=[("state", "taken", ("dest",))],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "manifest":
        found, size = manifest(p["src"])
        module.exit_json(changed=False, manifest=found, bytes=size)
    if not module.check_mode:
        os.makedirs(p["dest"], mode=0o755, exist_ok=True)
    take(module, p["src"], p["dest"], p["manifest"])


if __name__ == "__main__":
    main()
