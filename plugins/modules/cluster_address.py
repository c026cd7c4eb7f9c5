#!/usr/bin/python
"""Ansible module: check that a node's cluster address is its own, and name its interface."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.addresses import (
    address_problem,
    own_addresses,
)

DOCUMENTATION = r"""
module: cluster_address
short_description: Check that the cluster address is one of this host's, and find its interface
description:
  - Reads the host's addresses now (C(ip -json address show)), never from a fact cache, where a
    node rebuilt with a new address would still have its old one.
  - Fails, naming the host's real addresses, when I(address) is not an IP address or not one
    of them. Returns the interface that carries it (for NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME).
options:
  address:
    description: The address the other nodes reach this host on.
    type: str
    required: true
  name:
    description: This host's inventory hostname, for the messages.
    type: str
    required: true
"""

RETURN = r"""
interface:
  description: The interface that carries I(address).
  type: str
  returned: success
addresses:
  description: Every address of the host.
  type: list
  returned: always
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "address": {"type": "str", "required": True},
            "name": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    owned = own_addresses()
    interface, problem = address_problem(module.params["name"], module.params["address"], owned)
    addresses = [local for _, local in owned]
    if problem:
        module.fail_json(msg=f"{problem}.", addresses=addresses)
    module.exit_json(changed=False, interface=interface, addresses=addresses)


if __name__ == "__main__":
    main()
