#!/usr/bin/python
"""Ansible module: fail when another firewalld zone already holds one of the cluster's sources."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.firewall import (
    conflict_message,
    conflicts,
    read_zone_dir,
)

DOCUMENTATION = r"""
module: firewall_zone_conflicts
short_description: Find sources that another firewalld zone already holds (ZONE_CONFLICT)
description:
  - Reads firewalld's permanent zone files and fails, naming the zone and the fix, when a source
    that I(zone) is to trust is bound to another zone. firewalld would refuse to load I(zone)
    on the next reload (ZONE_CONFLICT), with only a log line.
  - Reads only; changes nothing. Works before firewalld is installed (no zone files, no conflict).
options:
  zone:
    description: The cluster's zone.
    type: str
    required: true
  sources:
    description: The sources the zone is to hold; a list of addresses or networks.
    type: list
    elements: str
    required: true
  host:
    description: This host's inventory hostname, for the message.
    type: str
    required: true
  zone_dir:
    description: Where firewalld keeps its permanent zones.
    type: path
    default: /etc/firewalld/zones
"""

RETURN = r"""
conflicts:
  description: Each source held by another zone, with that zone.
  type: list
  returned: always
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "zone": {"type": "str", "required": True},
            "sources": {"type": "list", "elements": "str", "required": True},
            "host": {"type": "str", "required": True},
            "zone_dir": {"type": "path", "default": "/etc/firewalld/zones"},
        },
        supports_check_mode=True,
    )
    params = module.params
    wanted = {source: source for source in params["sources"]}
    found = conflicts(params["zone"], wanted, read_zone_dir(params["zone_dir"]))
    if found:
        module.fail_json(
            msg=conflict_message(params["host"], params["zone"], found, params["zone_dir"]),
            conflicts=found,
        )
    module.exit_json(changed=False, conflicts=[])


if __name__ == "__main__":
    main()
