"""firewalld runs, and the cluster's zone holds exactly the members' addresses (at runtime and
permanently), accepts everything from them and lists the master port."""

from __future__ import annotations

import pytest
from el_nodes import Node


def firewall_cmd(member: Node, *args: str) -> str:
    zone = member.setting("firewall_zone", "firewall")
    return member.host.check_output(" ".join(["firewall-cmd", f"--zone={zone}", *args]))


def test_firewalld_is_running_and_enabled(member: Node) -> None:
    assert member.host.check_output("firewall-cmd --state") == "running"
    assert member.host.service("firewalld").is_enabled


@pytest.mark.parametrize("config", ["runtime", "permanent"])
def test_zone_holds_the_members_addresses(member: Node, members: list[Node], config: str) -> None:
    args = ["--list-sources"] + (["--permanent"] if config == "permanent" else [])
    assert set(firewall_cmd(member, *args).split()) == {node.address for node in members}


def test_zone_accepts_all_traffic_from_its_sources(member: Node) -> None:
    assert firewall_cmd(member, "--permanent", "--get-target") == "ACCEPT"


def test_zone_lists_the_master_port(member: Node) -> None:
    port = member.setting("cluster_master_port", "cluster")
    assert f"{port}/tcp" in firewall_cmd(member, "--list-ports").split()
