#!/usr/bin/python
"""Ansible module: a wheelhouse's checksums, and a node's verified copy of what peers sent."""

from __future__ import annotations

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: wheelhouse_stage
short_description: Checksum a wheelhouse, or take a node's verified copy of what peers sent
description:
  - Staging over the nodes' trust (torch_job_sync phase=spread) lands the wheelhouse in a
    folder of the training user's. Root must not install what that user could have changed
    (one node's compromised user would reach root on every node), so every file is checked
    against the controller's checksums while root copies it into its own folder, and pip
    installs from that copy only.
  - C(state=manifest) (on the controller) returns the SHA-256 of every file of I(src).
  - C(state=taken) copies every file of I(manifest) from I(src) to I(dest) (root's, mode
    0755, files 0644), checking each one's SHA-256 on the bytes it copies; a file already in
    I(dest) with its checksum is left as it is. Fails, naming the files, when one is missing
    or differs, and leaves no partial file behind.
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
  description: (taken) The files copied and checked.
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
    copy only when they have the wanted checksum."""
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
            ok = copy_checked(source, target, wanted[name])
        except OSError as error:
            bad.append(f"{name} ({error.strerror})")
            continue
        (copied if ok else bad).append(name if ok else f"{name} (checksum differs)")
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
