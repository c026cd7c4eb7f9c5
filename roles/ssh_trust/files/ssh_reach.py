#!/usr/bin/env python3
"""Prove passwordless SSH from this node to each given peer, all at once.

    ssh_reach.py NAME=ADDRESS ...

Runs `ssh -o BatchMode=yes -o StrictHostKeyChecking=yes ADDRESS true` to every peer in
parallel, as the user it runs as. Prints one line per peer and exits 1 if any of them
failed, so that a cluster of N nodes needs one task per node instead of N - 1.
Only the standard library: it runs on the system Python of any node.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

OPTIONS = ("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10")


def reach(peer: str) -> tuple[str, str]:
    name, _, address = peer.partition("=")
    try:
        done = subprocess.run(
            ["ssh", *OPTIONS, address, "true"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return peer, f"FAILED {name} ({address}): no answer within 30 s"
    if done.returncode != 0:
        why = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        return peer, f"FAILED {name} ({address}): {why}"
    return peer, f"ok {name} ({address})"


def main(peers: list[str]) -> int:
    if not peers or any("=" not in peer for peer in peers):
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    with ThreadPoolExecutor(max_workers=min(32, len(peers))) as pool:
        lines = [line for _, line in pool.map(reach, peers)]
    print("\n".join(lines))
    return 1 if any(line.startswith("FAILED") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
