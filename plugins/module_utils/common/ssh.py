"""How a node reaches its peers over the training user's SSH trust (set up by the ssh_trust role):
never a prompt, never an unknown host key, one shared connection per peer. Standard library
only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import os
import pwd
import shlex
from collections.abc import Sequence

# The one place that says how a node reaches its peers (the trust that the
# ssh_trust role set up): never a prompt, never an unknown host key.
SSH_OPTIONS = (
    "-o", "BatchMode=yes",
    "-o", "StrictHostKeyChecking=yes",
    "-o", "ConnectTimeout=4",
    # A peer that stops answering drops the connection within about 6 s.
    "-o", "ServerAliveInterval=2",
    "-o", "ServerAliveCountMax=2",
)  # fmt: skip


# One connection per peer and local user, reused by later polls and rounds.
SSH_SHARED = (
    "-o", "ControlMaster=auto",
    "-o", "ControlPath=/tmp/torch-job-ssh-%i-%C",
    "-o", "ControlPersist=60",
)  # fmt: skip


def ssh_argv(address: str, argv: Sequence[str], shared: bool = True) -> list[str]:
    """The command that runs argv on the node at address (one shell word per argument)."""
    return ["ssh", *SSH_OPTIONS, *(SSH_SHARED if shared else ()), address, shlex.join(argv)]


def on_node(address: str | None, argv: list[str]) -> list[str]:
    """The command that runs argv here (address None) or on the node at address."""
    return argv if address is None else ssh_argv(address, argv)


def runuser_prefix(user: str) -> list[str]:
    """The prefix that runs a command as user, whose SSH trust reaches the peers (none when
    this process runs as that user already)."""
    return [] if pwd.getpwuid(os.geteuid()).pw_name == user else ["runuser", "-u", user, "--"]
