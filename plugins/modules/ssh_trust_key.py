#!/usr/bin/python
"""Ansible module: choose the SSH key type for the training user, from the node's FIPS mode."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

# From the repository (ansible.cfg's module_utils path), else from the installed
# torch_cluster.cluster collection.
try:
    from ansible.module_utils.ssh_key_choice import CHOICES, choose, fips_enabled
except ImportError:
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.ssh_key_choice import (
        CHOICES,
        choose,
        fips_enabled,
    )

DOCUMENTATION = r"""
module: ssh_trust_key
short_description: Choose the SSH key type for the training user, FIPS mode considered
description:
  - Reads the node's FIPS mode from I(fips_file) and returns the key type to create.
  - C(auto) gives ed25519, or ECDSA P-256 on a node in FIPS mode, where OpenSSH refuses ed25519.
  - Fails, naming the reason, when I(key_type) forces ed25519 on a FIPS node.
  - Reads only; changes nothing.
options:
  key_type:
    description: C(auto), C(ed25519), C(ecdsa) (P-256) or C(rsa) (3072 bits).
    type: str
    default: auto
  fips_file:
    description: Where the kernel reports FIPS mode.
    type: path
    default: /proc/sys/crypto/fips_enabled
"""

RETURN = r"""
type:
  description: The key type for C(community.crypto.openssh_keypair).
  type: str
  returned: success
size:
  description: The key size in bits, or null for the type's only size.
  type: int
  returned: success
file:
  description: The key's file name in the user's .ssh folder (id_ed25519, id_ecdsa, id_rsa).
  type: str
  returned: success
fips:
  description: Whether the node is in FIPS mode.
  type: bool
  returned: always
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "key_type": {"type": "str", "default": "auto"},
            "fips_file": {"type": "path", "default": "/proc/sys/crypto/fips_enabled"},
        },
        supports_check_mode=True,
    )
    try:
        with open(module.params["fips_file"], encoding="ascii") as handle:
            text = handle.read()
    except OSError:
        text = None
    fips = fips_enabled(text)
    key, problem = choose(module.params["key_type"], fips)
    if problem:
        module.fail_json(msg=problem, fips=fips, choices=list(CHOICES))
    module.exit_json(changed=False, **key)


if __name__ == "__main__":
    main()
