"""The training user reaches every other member by SSH without a password or a prompt."""

from __future__ import annotations

import shlex

from sandbox_nodes import Node


def test_batchmode_ssh_reaches_the_other_member_as_the_training_user(
    member_pair: tuple[Node, Node],
) -> None:
    source, target = member_pair
    user = source.setting("ssh_trust_user", "ssh_trust")
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    ssh += ["-o", "ConnectTimeout=10", target.address, "hostname"]
    result = source.host.run(shlex.join(["runuser", "-u", user, "--", *ssh]))
    assert (result.rc, result.stderr) == (0, "")
    assert result.stdout.strip() == target.host.check_output("hostname")
