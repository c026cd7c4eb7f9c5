"""firewalld lets the members reach each other on every port, and keeps everyone else out."""

from __future__ import annotations

from sandbox_nodes import Connection, Listen, Node

# What a host gets from firewalld's default zone for a port it does not open.
REJECTED = Connection("EHOSTUNREACH")


def test_firewalld_is_running_and_enabled(member: Node) -> None:
    assert member.host.check_output("firewall-cmd --state") == "running"
    assert member.host.service("firewalld").is_enabled


def test_member_reaches_a_random_high_port_of_another_member(
    member_pair: tuple[Node, Node], listen: Listen
) -> None:
    source, target = member_pair
    listener = listen(target)
    assert listener.connect_from(source) == listener.welcome


def test_other_member_reaches_the_master_port(
    other_member: Node, master: Node, master_port: int, listen: Listen
) -> None:
    listener = listen(master, master_port)
    assert listener.connect_from(other_member) == listener.welcome


def test_outsider_is_rejected_on_a_random_high_port(
    member: Node, outsider: Node, listen: Listen
) -> None:
    listener = listen(member)
    assert listener.connect_from(outsider) == REJECTED


def test_outsider_is_rejected_on_the_master_port(
    master: Node, master_port: int, outsider: Node, listen: Listen
) -> None:
    listener = listen(master, master_port)
    assert listener.connect_from(outsider) == REJECTED


def test_outsider_reaches_ssh(member: Node, outsider: Node) -> None:
    connection = outsider.connect(member.address, 22)
    assert connection.connected
    assert connection.data.startswith("SSH-2.0-")
