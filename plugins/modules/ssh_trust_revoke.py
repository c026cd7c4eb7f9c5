#!/usr/bin/python
"""Ansible module: remove what an earlier ssh_trust role added for root (a root mesh)."""

from __future__ import annotations

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.ssh_key_type import (
    KEY_TYPES,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.ssh_trust import (
    public_key_comment,
    without_block,
)

DOCUMENTATION = r"""
module: ssh_trust_revoke
short_description: Remove the root mesh that an earlier ssh_trust role set up
description:
  - In I(ssh_dir) (root's C(~/.ssh)), removes the blocks marked with I(marker) from
    C(authorized_keys) and C(known_hosts), and the key pairs C(id_ed25519), C(id_ecdsa) and
    C(id_rsa) whose public key's comment is exactly I(key_comment).
  - Every other line of those files stays byte for byte; their owner, mode and SELinux label are
    kept. A key pair with another comment (an administrator's own) is left alone.
  - In check mode, reports what it would remove and changes nothing.
options:
  ssh_dir:
    description: The folder to clean.
    type: path
    default: ~root/.ssh
  marker:
    description: The blocks' marker, with C({mark}) for BEGIN and END (blockinfile's).
    type: str
    required: true
  key_comment:
    description: The comment the role gave the key pair it created (C(root@<inventory_hostname>)).
    type: str
    required: true
"""

RETURN = r"""
removed:
  description: What was removed (in check mode, what would be), one line per file or key pair.
  type: list
  elements: str
  returned: always
"""


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return None


def _write(module: AnsibleModule, path: str, text: str) -> None:
    """Replace PATH's content at once, keeping its owner, mode and SELinux label."""
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".ssh_trust_revoke.")
    with os.fdopen(handle, "wb") as out:
        out.write(text.encode("utf-8", "surrogateescape"))
    module.add_cleanup_file(temporary)
    module.atomic_move(temporary, path)


def revoke(module: AnsibleModule, removed: list[str]) -> None:
    """Remove the blocks and the key pair from module.params["ssh_dir"], listing each in REMOVED."""
    ssh_dir, marker = module.params["ssh_dir"], module.params["marker"]
    comment = module.params["key_comment"]
    begin = marker.replace("{mark}", "BEGIN")
    for name, what in (("authorized_keys", "key(s)"), ("known_hosts", "host key(s)")):
        # Through a link, the file it points to is cleaned and the link stays.
        path = os.path.realpath(os.path.join(ssh_dir, name))
        text = _read(path)
        if text is None:
            continue
        kept, entries = without_block(text, marker)
        if kept != text:
            removed.append(f"{path}: {entries} {what} in the '{begin}' block")
            if not module.check_mode:
                _write(module, path, kept)
    for _, _, name in KEY_TYPES.values():
        private = os.path.join(ssh_dir, name)
        text = _read(private + ".pub")
        if text is None or public_key_comment(text) != comment:
            continue
        removed.append(f"{private}, {private}.pub: the key pair {comment}")
        if not module.check_mode:
            for path in (private, private + ".pub"):
                if os.path.lexists(path):
                    os.unlink(path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "ssh_dir": {"type": "path", "default": "~root/.ssh"},
            "marker": {"type": "str", "required": True},
            "key_comment": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    removed: list[str] = []
    try:
        revoke(module, removed)
    except OSError as error:
        module.fail_json(msg=f"{module.params['ssh_dir']}: {error}", removed=removed)
    module.exit_json(changed=bool(removed), removed=removed)


if __name__ == "__main__":
    main()
