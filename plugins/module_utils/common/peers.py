"""Whether a node reaches its peers over SSH, all of them at once, and why not. Standard library
only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.ssh import ssh_argv


def unreached_peers(
    peers: dict[str, str], as_user: Sequence[str] = (), shared: bool = True, timeout: float = 20
) -> list[str]:
    """One line per peer that `ssh ADDRESS true` (prefixed by as_user, e.g. runuser) does not
    reach, and why; all peers at once. With shared, the connections stay open for later
    polls (the watcher's)."""

    def reach(name: str) -> str:
        try:
            done = subprocess.run(
                [*as_user, *ssh_argv(peers[name], ["true"], shared=shared)],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"{name} ({peers[name]}): no answer within {timeout:.0f} s"
        if done.returncode == 0:
            return ""
        why = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        return f"{name} ({peers[name]}): {why}"

    if not peers:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(peers))) as pool:
        return [why for why in pool.map(reach, peers) if why]
