"""firewalld lets the members reach each other on every port, and keeps everyone else out."""

from __future__ import annotations

from launcher import Playbook, recap_changes
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


def test_a_member_bound_to_another_zone_is_refused_naming_that_zone(
    playbook: Playbook, members: list[Node]
) -> None:
    """firewalld binds an address to one zone only (ZONE_CONFLICT): provision.yml names the
    zone and the fix before it changes anything."""
    node, other = members[0], members[-1]
    # firewall-cmd itself refuses the binding now that the cluster zone holds the address; a
    # zone file written by other tooling (or before the cluster zone existed) does not.
    public = "/etc/firewalld/zones/public.xml"
    node.host.run_expect([0], f"cp -a {public} {public}.sandbox-keep || true")
    node.host.run_expect(
        [0], f"test -e {public} || cp /usr/lib/firewalld/zones/public.xml {public}"
    )
    node.host.run_expect(
        [0], f"sed -i 's|</zone>|  <source address=\"{other.address}\"/>\\n</zone>|' {public}"
    )
    try:
        outcome = playbook.run("provision.yml", {}, args=("--tags", "firewall"))
    finally:
        node.host.run_expect(
            [0],
            f"if [ -e {public}.sandbox-keep ]; then mv -f {public}.sandbox-keep {public}; "
            f"else rm -f {public}; fi",
        )
    assert outcome.rc != 0
    expected = f"{node.name}: {other.address} is already bound to firewalld zone 'public'"
    assert expected in outcome.output, outcome.output
    assert "ZONE_CONFLICT" in outcome.output
    assert f"--remove-source={other.address}" in outcome.output
    assert not any(recap_changes(outcome.output).values())
    # Undone: only the cluster zone holds the address.
    zone = node.host.check_output(f"firewall-cmd --permanent --get-zone-of-source={other.address}")
    assert zone == node.setting("firewall_zone", "firewall")
