#!/usr/bin/python
"""Ansible module: open TCP connections between every pair of nodes, as NCCL and gloo do."""

from __future__ import annotations

import errno
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.net_probe import (
    path_report,
)

DOCUMENTATION = r"""
module: cluster_health_reach
short_description: Prove that this node and every peer reach each other on the given ports
description:
  - Run on every node at once (one task). Each node listens on its ports (the probe port,
    and the master port on the master) and connects to every peer on that peer's ports, so
    both directions of every pair are tried with real connections through the real firewalls.
  - A connection refused is retried until the peer listens (the peers start within a moment
    of each other); one answered with "no route to host" (what firewalld answers) or never
    answered is blocked. Listening ends when every peer has connected, or at I(deadline).
  - Then the path toward each peer - the interface and source address the kernel picks, that
    interface's MTU, and an ICMP echo of that full size with don't-fragment set - and the
    loopback addresses this node's hostname resolves to.
options:
  nodes:
    description: Every node, name to address.
    type: dict
    required: true
  self_name:
    description: This node's name in I(nodes).
    type: str
    required: true
  master:
    description: The master's name in I(nodes).
    type: str
    required: true
  master_port:
    description: The master port, tried on the master only; 0 leaves it out (something holds it).
    type: int
    required: true
  probe_port:
    description: A high port tried on every node, as NCCL's and gloo's connections use.
    type: int
    required: true
  deadline:
    description: Seconds after which the check ends, answered or not.
    type: float
    default: 10
"""

RETURN = r"""
attempts:
  description: One entry per peer and port, with C(peer), C(port) and C(outcome).
  type: list
  returned: always
listen_errors:
  description: Ports this node could not listen on, and why.
  type: list
  returned: always
path:
  description: C(paths) (per peer, dev, src, mtu, df and own_source) and
    C(loopback_hostname).
  type: dict
  returned: always
"""

CONNECT_TIMEOUT_S = 3


def listen(port: int, expected: set[str], deadline: float, heard: set[str], errors: list) -> None:
    """Accept connections on the port until every expected address has connected."""
    try:
        server = socket.create_server(("", port), reuse_port=False)
    except OSError as error:
        errors.append(f"port {port}: {error.strerror}")
        return
    server.settimeout(0.2)
    with server:
        while time.monotonic() < deadline and not expected <= heard:
            try:
                client, (address, _) = server.accept()
            except socket.timeout:
                continue
            heard.add(address)
            client.close()


def connect(address: str, port: int, deadline: float) -> str:
    """'connected', or why not: refused connections are retried until the deadline."""
    outcome = "refused"
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S):
                return "connected"
        except socket.timeout:
            return "no answer (dropped)"
        except OSError as error:
            if error.errno != errno.ECONNREFUSED:
                return errno.errorcode.get(error.errno, str(error)).replace(
                    "EHOSTUNREACH", "no route to host (rejected)"
                )
            outcome = "refused (nothing listens)"
            time.sleep(0.1)
    return outcome


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "dict", "required": True},
            "self_name": {"type": "str", "required": True},
            "master": {"type": "str", "required": True},
            "master_port": {"type": "int", "required": True},
            "probe_port": {"type": "int", "required": True},
            "deadline": {"type": "float", "default": 10},
        },
        supports_check_mode=True,
    )
    p = module.params

    def ports_of(name: str) -> list[int]:
        return ([p["master_port"]] if name == p["master"] and p["master_port"] else []) + [
            p["probe_port"]
        ]

    peers = {
        name: {"address": address, "ports": ports_of(name)}
        for name, address in p["nodes"].items()
        if name != p["self_name"]
    }
    ports = ports_of(p["self_name"])
    deadline = time.monotonic() + p["deadline"]
    expected = {peer["address"] for peer in peers.values()}
    errors: list[str] = []
    listeners = [
        threading.Thread(target=listen, args=(port, expected, deadline, set(), errors), daemon=True)
        for port in ports
    ]
    for thread in listeners:
        thread.start()
    targets = [
        (name, peer["address"], int(port)) for name, peer in peers.items() for port in peer["ports"]
    ]
    with ThreadPoolExecutor(max_workers=max(1, min(64, len(targets)))) as pool:
        outcomes = list(pool.map(lambda t: connect(t[1], t[2], deadline), targets))
    for thread in listeners:
        thread.join()
    attempts = [
        {"peer": name, "port": port, "outcome": outcome}
        for (name, _, port), outcome in zip(targets, outcomes)
    ]
    addresses = {name: peer["address"] for name, peer in peers.items()}
    path = path_report(p["nodes"][p["self_name"]], addresses)
    module.exit_json(changed=False, attempts=attempts, listen_errors=errors, path=path)


if __name__ == "__main__":
    main()
