"""SSH trust between the nodes: how a peer's key is authorized, and what a root mesh left.

Every node authorizes the other nodes' user keys with `from="<the members'
addresses>",restrict`: a key copied off the cluster is useless, and the launcher's non-
interactive commands (rsync over ssh, `ssh HOST true`, sftp for sshfs) get no pty, forwarding,
agent, X11 or ~/.ssh/rc.

An earlier version of the ssh_trust role trusted root between the nodes. Moving to an
unprivileged user removes what it added for root, and only that: the marked blocks of root's
authorized_keys and known_hosts, and root's key pair whose public key carries the comment that
the role gave it. Every other line stays byte for byte.

Standard library only: runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable


def authorized_options(addresses: Iterable[str]) -> str:
    """The authorized_keys options for a peer's key: only from ADDRESSES (IPv4 or IPv6), and
    restricted. The addresses are deduplicated and sorted (IPv4 first), so that the line does not
    change with the inventory's order. ValueError names an address that is not an IP address."""
    parsed = set()
    for address in addresses:
        try:
            parsed.add(ipaddress.ip_address(str(address).strip()))
        except ValueError:
            raise ValueError(f"'{address}' is not an IP address") from None
    if not parsed:
        raise ValueError("no address to allow the keys from")
    ordered = sorted(parsed, key=lambda ip: (ip.version, int(ip)))
    return f'from="{",".join(str(ip) for ip in ordered)}",restrict'


def _marker_line(line: str, marker: str) -> bool:
    return line in (marker + "\n", marker)


def without_block(text: str, marker: str) -> tuple[str, int]:
    """TEXT without its blocks marked as blockinfile marks them (MARKER with {mark} for BEGIN
    and END), and the number of entries (lines that are neither blank nor comments) they held.
    A BEGIN without an END after it is no block, as for blockinfile: it stays."""
    begin, end = marker.replace("{mark}", "BEGIN"), marker.replace("{mark}", "END")
    lines = text.splitlines(keepends=True)
    kept: list[str] = []
    entries = 0
    index = 0
    while index < len(lines):
        line = lines[index]
        close = None
        if _marker_line(line, begin):
            close = next(
                (j for j in range(index + 1, len(lines)) if _marker_line(lines[j], end)), None
            )
        if close is None:
            kept.append(line)
            index += 1
            continue
        inside = lines[index + 1 : close]
        entries += sum(1 for item in inside if item.strip() and not item.lstrip().startswith("#"))
        index = close + 1
    return "".join(kept), entries


def public_key_comment(text: str) -> str:
    """The comment of an OpenSSH public key file's key ("" when it has none)."""
    fields = text.strip().split(None, 2)
    return fields[2].strip() if len(fields) == 3 else ""
