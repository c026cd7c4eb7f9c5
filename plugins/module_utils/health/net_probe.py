"""The network path from this node to a peer, as NCCL and gloo will use it, read and probed: which
interface and source address the kernel picks toward the peer, that interface's MTU, whether a
packet of that full size crosses unfragmented, and the names that resolve to a loopback address.
The don't-fragment probe is an ICMP echo sent from a raw socket with path MTU discovery forced
on (the kernel sets DF, as `ping -M do` does): no ping binary needed, root needed. Standard
library and iproute2 only: runs on any node.
"""

from __future__ import annotations

import ipaddress
import json
import os
import select
import socket
import struct
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

IP_HEADER, ICMP_HEADER = 20, 8


# linux/in.h: IP_MTU_DISCOVER's "do": set DF, never fragment locally.
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2


def route_to(address: str) -> dict[str, str]:
    """The kernel's route toward an address: its interface (dev) and source address (prefsrc),
    from `ip -json route get`; {} when there is none."""
    done = subprocess.run(
        ["ip", "-json", "route", "get", address], capture_output=True, text=True, check=False
    )
    try:
        route = json.loads(done.stdout)[0] if done.returncode == 0 else {}
    except (ValueError, IndexError):
        route = {}
    return {"dev": route.get("dev", ""), "src": route.get("prefsrc", "")}


def interface_mtu(dev: str, root: str = "/sys/class/net") -> int | None:
    try:
        with open(os.path.join(root, dev, "mtu")) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(ident: int, sequence: int, payload: bytes) -> bytes:
    header = struct.pack("!BBHHH", 8, 0, 0, ident, sequence)
    return struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, sequence) + payload


def is_reply(packet: bytes, ident: int, sequence: int) -> bool:
    """Whether a raw IPv4 packet is the echo reply to our request."""
    if len(packet) < IP_HEADER + ICMP_HEADER:
        return False
    start = (packet[0] & 0x0F) * 4
    kind, _, _, their_id, their_seq = struct.unpack("!BBHHH", packet[start : start + 8])
    return kind == 0 and their_id == ident and their_seq == sequence


def df_ping(address: str, size: int, tries: int = 3, timeout: float = 1.0) -> str:
    """Send ICMP echoes of `size` bytes in all (IP header included) with DF set: "ok" when one
    is answered, else why not ("no answer", "too big to send here", or the error)."""
    if ipaddress.ip_address(address).version != 4:
        return "skipped (IPv6)"
    ident = os.getpid() & 0xFFFF
    payload = bytes(max(0, size - IP_HEADER - ICMP_HEADER))
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    except OSError as error:
        return f"cannot open a raw socket: {error.strerror}"
    with sock:
        sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
        for sequence in range(1, tries + 1):
            try:
                sock.sendto(echo_request(ident, sequence, payload), (address, 0))
            except OSError as error:
                return "too big to send here" if error.errno == 90 else str(error.strerror)
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select([sock], [], [], left)
                if not ready:
                    break
                packet, (source, _) = sock.recvfrom(65535)
                if source == address and is_reply(packet, ident, sequence):
                    return "ok"
    return "no answer"


def loopback_names(hostname: str) -> list[str]:
    """The loopback addresses the hostname resolves to (an /etc/hosts line "127.0.1.1 name",
    Debian's default): ranks that look their own address up by name would give it to peers."""
    try:
        found = {info[4][0] for info in socket.getaddrinfo(hostname, None)}
    except OSError:
        return []
    return sorted(a for a in found if ipaddress.ip_address(a.split("%")[0]).is_loopback)


def path_report(own: str, peers: Mapping[str, str]) -> dict:
    """This node's side of every path: the route toward each peer, its interface's MTU, and
    a full-size don't-fragment echo to each peer at that MTU."""

    def path(address: str) -> dict:
        route = route_to(address)
        mtu = interface_mtu(route["dev"]) if route.get("dev") else None
        return {
            **route,
            "mtu": mtu,
            "df": df_ping(address, min(mtu, 65535)) if mtu else "no route",
            "own_source": not route.get("src") or route["src"] == own,
        }

    # Every peer at once: a lost echo costs its tries' timeouts, not one per peer in turn.
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(peers)))) as pool:
        paths = dict(zip(peers, pool.map(path, peers.values())))
    return {"paths": paths, "loopback_hostname": loopback_names(socket.gethostname())}
