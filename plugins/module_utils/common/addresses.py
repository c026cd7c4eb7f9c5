"""A node's own addresses, read now (never from a fact cache), and whether the cluster address is
one of them (and on which interface). Standard library and iproute2 only: runs on any node.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess


def own_addresses() -> list[tuple[str, str]]:
    """(interface, address) of every address of this host, from `ip -json address show`."""
    shown = subprocess.run(
        ["ip", "-json", "address", "show"], capture_output=True, text=True, check=True
    )
    return [
        (link["ifname"], entry["local"])
        for link in json.loads(shown.stdout)
        for entry in link.get("addr_info", [])
    ]


def address_problem(name: str, address: str, owned: list[tuple[str, str]]) -> tuple[str, str]:
    """(the interface that carries address, "") or ("", why it cannot be this host's: one
    sentence, without its full stop)."""
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return "", (
            f"{name}: cluster_address '{address}' is not an IP address. Set cluster_address "
            "(or ansible_host) for this host to the address the other nodes reach it on"
        )
    for interface, local in owned:
        if ipaddress.ip_address(local.split("%")[0]) == wanted:
            return interface, ""
    return "", (
        f"{name}: cluster_address {address} is not an address of this host (it has "
        f"{', '.join(local for _, local in owned)})"
    )
