"""The training user reaches every other member by SSH without a password or a prompt."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest
from launcher import Playbook
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


FIPS_FILE = "/run/fips_enabled.sandbox-test"


@pytest.fixture
def fips_file(members: list[Node]) -> Iterator[str]:
    """A file that reads like /proc/sys/crypto/fips_enabled in FIPS mode (the sandbox's kernel
    has no FIPS support, so /proc/sys/crypto does not exist to bind-mount over)."""
    for node in members:
        node.host.run_expect([0], f"printf '1\\n' > {FIPS_FILE}")
    yield FIPS_FILE
    for node in members:
        node.host.run(f"rm -f {FIPS_FILE}")


def test_a_node_in_fips_mode_gets_an_ecdsa_key(member: Node, fips_file: str) -> None:
    choice = member.host.ansible("ssh_trust_key", f"fips_file={fips_file}", check=False)
    assert (choice["type"], choice["size"], choice["file"], choice["fips"]) == (
        "ecdsa",
        256,
        "id_ecdsa",
        True,
    )
    # The real kernel file of the sandbox says no FIPS: ed25519.
    choice = member.host.ansible("ssh_trust_key", check=False)
    assert (choice["type"], choice["fips"]) == ("ed25519", False)


def test_ed25519_forced_on_a_node_in_fips_mode_is_refused(member: Node, fips_file: str) -> None:
    answer = member.host.ansible(
        "ssh_trust_key", f"key_type=ed25519 fips_file={fips_file}", check=False
    )
    # testinfra hands a module's failure back as its result (without "failed").
    assert "type" not in answer
    assert "FIPS mode" in answer["msg"]
    assert "refuses ed25519" in answer["msg"]


def home(node: Node) -> str:
    user = node.setting("ssh_trust_user", "ssh_trust")
    return node.host.check_output(f"getent passwd {shlex.quote(user)}").split(":")[5]


def ssh_with_key(source: Node, target: Node, key: str) -> tuple[int, str]:
    """ssh from SOURCE to TARGET as the training user, offering only the key file KEY."""
    user = source.setting("ssh_trust_user", "ssh_trust")
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    ssh += ["-o", "IdentitiesOnly=yes", "-i", f"{home(source)}/.ssh/{key}"]
    ssh += ["-o", "ConnectTimeout=10", target.address, "hostname"]
    # ssh's own failure is exit status 255, which testinfra takes for its connection's: the
    # status comes back on the last line instead.
    result = source.host.run(shlex.join(["runuser", "-u", user, "--", *ssh]) + "; echo $?")
    *output, status = result.stdout.strip().splitlines()
    return int(status), "\n".join(output).strip()


def test_forcing_ecdsa_keys_makes_the_nodes_trust_them_and_auto_goes_back(
    playbook: Playbook, members: list[Node]
) -> None:
    """The FIPS choice, forced: every node gets an ECDSA P-256 key and the others accept it and
    no longer the old ed25519 one; auto then brings ed25519 back."""
    ecdsa = playbook.run(
        "provision.yml", {"ssh_trust_key_type": "ecdsa"}, args=("--tags", "ssh_trust")
    )
    try:
        assert ecdsa.rc == 0, ecdsa.output
        for source in members:
            for target in members:
                if source != target:
                    assert ssh_with_key(source, target, "id_ecdsa") == (
                        0,
                        target.host.check_output("hostname"),
                    )
                    assert ssh_with_key(source, target, "id_ed25519")[0] != 0
            public = source.host.file(f"{home(source)}/.ssh/id_ecdsa.pub").content_string
            assert public.startswith("ecdsa-sha2-nistp256 ")
    finally:
        back = playbook.run("provision.yml", {}, args=("--tags", "ssh_trust"))
        for node in members:
            node.host.run(f"rm -f {home(node)}/.ssh/id_ecdsa {home(node)}/.ssh/id_ecdsa.pub")
    assert back.rc == 0, back.output
    for source in members:
        for target in members:
            if source != target:
                assert ssh_with_key(source, target, "id_ed25519")[0] == 0
