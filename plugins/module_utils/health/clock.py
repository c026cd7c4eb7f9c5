"""A peer's clock against this node's, measured over one open connection (Cristian's method).
Standard library only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time

# Run on the peer: its clock, once for each line it reads.
CLOCK_ECHO = "import sys, time\nfor _ in sys.stdin: print(repr(time.time()), flush=True)"


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
