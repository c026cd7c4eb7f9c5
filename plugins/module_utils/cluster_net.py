"""A node's own addresses, read now (never from a fact cache), and the interface that
carries the cluster address, and a peer's clock against this node's. Standard library and
iproute2 only: runs on any node."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess
import threading
import time

# Run on the peer: its clock, once for each line it reads.
CLOCK_ECHO = "import sys, time\nfor _ in sys.stdin: print(repr(time.time()), flush=True)"


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


def clock_offset(argv: list[str], exchanges: int = 5, timeout: float = 20) -> float | None:
    """The peer's clock minus this node's, in seconds, None without an answer. argv runs
    CLOCK_ECHO on the peer (over SSH). Once it runs, each exchange sends a line and reads the
    peer's time back; the peer read its clock about halfway through the exchange, so the
    exchange with the shortest round trip is the most exact (Cristian's method). The SSH
    handshake and the peer's start are outside every exchange but the first, which is left
    out: timed around them, a loaded node's clock seemed a second off."""
    try:
        peer = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
    except OSError:
        return None
    killer = threading.Timer(timeout, peer.kill)
    killer.start()
    samples = []
    try:
        for _ in range(exchanges + 1):
            sent = time.time()
            peer.stdin.write("\n")
            peer.stdin.flush()
            line = peer.stdout.readline()
            received = time.time()
            samples.append((received - sent, float(line) - (sent + received) / 2))
    except (OSError, ValueError):
        return None  # no answer, or killed at the timeout
    finally:
        killer.cancel()
        with contextlib.suppress(OSError):
            peer.stdin.close()
        peer.kill()
        peer.wait()
    return min(samples[1:])[1]
