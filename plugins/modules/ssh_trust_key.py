#!/usr/bin/python
"""Ansible module: choose the SSH key type for the training user, from the node's FIPS mode,
and the options that the other nodes authorize the key with."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.ssh_key_type import (
    CHOICES,
    choose,
    fips_enabled,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.ssh_trust import (
    authorized_options,
)

DOCUMENTATION = r"""
module: ssh_trust_key
short_description: Choose the SSH key type for the training user, FIPS mode considered
description:
  - Reads the node's FIPS mode from I(fips_file) and returns the key type to create.
  - C(auto) gives ed25519, or ECDSA P-256 on a node in FIPS mode, where OpenSSH refuses ed25519.
  - Fails, naming the reason, when I(key_type) forces ed25519 on a FIPS node.
  - With I(peers), also returns the authorized_keys options for the members' keys, which allow
    them only from the members' addresses and C(restrict) them (no pty, forwarding, agent, X11
    or user rc).
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
  peers:
    description: Every member's name to its IP address (IPv4 or IPv6), this node's included.
    type: dict
    default: {}
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
authorized_options:
  description: >-
    The authorized_keys options for a member's key, e.g. C(from="10.0.0.1,10.0.0.2",restrict):
    every member's address, once, IPv4 first, in numeric order.
  type: str
  returned: when peers is not empty
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "key_type": {"type": "str", "default": "auto"},
            "fips_file": {"type": "path", "default": "/proc/sys/crypto/fips_enabled"},
            "peers": {"type": "dict", "default": {}},
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
    peers = module.params["peers"]
    if peers:
        try:
            key["authorized_options"] = authorized_options(peers.values())
        except ValueError as error:
            module.fail_json(msg=f"ssh_trust_peers: {error}", fips=fips)
    module.exit_json(changed=False, **key)


if __name__ == "__main__":
    main()
