#!/usr/bin/python
"""Ansible module: check that a node's cluster address is its own, and name its interface."""

from __future__ import annotations

import ipaddress
import json

from ansible.module_utils.basic import AnsibleModule

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
    address, name = module.params["address"], module.params["name"]
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        module.fail_json(
            msg=f"{name}: cluster_address '{address}' is not an IP address. Set cluster_address "
            "(or ansible_host) for this host to the address the other nodes reach it on."
        )
    ip = module.get_bin_path("ip", required=True)
    _, out, _ = module.run_command([ip, "-json", "address", "show"], check_rc=True)
    carriers, addresses = [], []
    for link in json.loads(out):
        for entry in link.get("addr_info", []):
            addresses.append(entry["local"])
            if ipaddress.ip_address(entry["local"].split("%")[0]) == wanted:
                carriers.append(link["ifname"])
    if not carriers:
        module.fail_json(
            msg=f"{name}: cluster_address {address} is not an address of this host (it has "
            f"{', '.join(addresses)}).",
            addresses=addresses,
        )
    module.exit_json(changed=False, interface=carriers[0], addresses=addresses)


if __name__ == "__main__":
    main()
