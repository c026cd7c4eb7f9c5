"""Sources another firewalld zone already holds (ZONE_CONFLICT), from zone files."""

from __future__ import annotations

from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.firewall import (
    conflict_message,
    conflicts,
    read_zone_dir,
)

PUBLIC = """<?xml version="1.0" encoding="utf-8"?>
<zone>
  <short>Public</short>
  <service name="ssh"/>
  <source address="10.0.0.12"/>
  <source address="192.168.7.0/24"/>
</zone>
"""
CLUSTER = """<?xml version="1.0" encoding="utf-8"?>
<zone target="ACCEPT">
  <source address="10.0.0.11"/>
  <source address="10.0.0.12"/>
</zone>
"""


def write_zones(tmp_path, **zones):
    for name, text in zones.items():
        (tmp_path / f"{name}.xml").write_text(text)
    (tmp_path / "public.xml.old").write_text("not a zone")
    return str(tmp_path)


def test_a_member_in_another_zone_is_named_with_the_zone(tmp_path):
    zones = read_zone_dir(write_zones(tmp_path, public=PUBLIC))
    wanted = {"10.0.0.11": "10.0.0.11", "10.0.0.12": "10.0.0.12"}
    found = conflicts("torch-cluster", wanted, zones)
    assert found == [{"source": "10.0.0.12", "label": "10.0.0.12", "zone": "public"}]
    message = conflict_message("node0", "torch-cluster", found, str(tmp_path))
    assert message.startswith("node0: 10.0.0.12 is already bound to firewalld zone 'public'")
    assert "ZONE_CONFLICT" in message
    assert "--zone=public --remove-source=10.0.0.12" in message
    assert "firewall_zone: public" in message


def test_the_cluster_zone_itself_is_no_conflict(tmp_path):
    zones = read_zone_dir(write_zones(tmp_path, **{"torch-cluster": CLUSTER}))
    assert conflicts("torch-cluster", {"10.0.0.12": "10.0.0.12"}, zones) == []


def test_networks_compare_as_networks(tmp_path):
    zones = read_zone_dir(write_zones(tmp_path, public=PUBLIC))
    found = conflicts("c", {"192.168.7.0/24": "192.168.7.5/24"}, zones)
    assert [item["zone"] for item in found] == ["public"]


def test_no_zone_folder_means_no_conflict(tmp_path):
    assert read_zone_dir(str(tmp_path / "absent")) == {}


def test_a_broken_zone_file_is_skipped_as_firewalld_skips_it(tmp_path):
    zones = read_zone_dir(write_zones(tmp_path, broken="<zone><source"))
    assert zones == {}
