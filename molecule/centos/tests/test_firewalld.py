"""firewalld lets the members reach each other on every port, keeps everyone else out (the
outsider: a container on their network that is not a member) and leaves the site's own rules (ssh)
as they were. Proven with real connections, not read from firewalld's configuration."""

from __future__ import annotations

from el_nodes import Connection, Node

# What a host gets from firewalld for a port that the zone of its address does not open: an
# ICMP "administratively prohibited", which the client's kernel reports as "No route to host".
REJECTED = Connection("EHOSTUNREACH")


def test_firewalld_is_running_and_enabled(member: Node) -> None:
    assert member.host.check_output("firewall-cmd --state") == "running"
    assert member.host.service("firewalld").is_enabled


def test_member_reaches_a_random_high_port_of_another_member(
    member_pair: tuple[Node, Node], high_port: int
) -> None:
    source, target = member_pair
    with target.listening(high_port) as welcome:
        assert source.connect(target.address, high_port) == welcome


def test_other_member_reaches_the_master_port(
    other_member: Node, master: Node, master_port: int
) -> None:
    with master.listening(master_port) as welcome:
        assert other_member.connect(master.address, master_port) == welcome


def test_outsider_is_rejected_on_a_random_high_port(
    member: Node, outsider: Node, high_port: int
) -> None:
    with member.listening(high_port):
        assert outsider.connect(member.address, high_port) == REJECTED


def test_outsider_is_rejected_on_the_master_port(
    master: Node, master_port: int, outsider: Node
) -> None:
    with master.listening(master_port):
        assert outsider.connect(master.address, master_port) == REJECTED


def test_outsider_reaches_ssh(member: Node, outsider: Node) -> None:
    connection = outsider.connect(member.address, 22)
    assert connection.connected
    assert connection.data.startswith("SSH-2.0-")


# Last: it reloads firewalld. What the role made permanent is what runs after a reload (or a
# reboot): the members still reach each other.
def test_members_reach_each_other_after_firewalld_reloads(
    member_pair: tuple[Node, Node], high_port: int
) -> None:
    source, target = member_pair
    target.host.run_expect([0], "firewall-cmd --reload")
    with target.listening(high_port) as welcome:
        assert source.connect(target.address, high_port) == welcome
