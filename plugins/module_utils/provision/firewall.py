"""Sources that firewalld's permanent configuration already binds to another zone.

firewalld binds a source (an address or network) to one zone only. A source that another zone
already holds makes the cluster zone fail to load with ZONE_CONFLICT on the next reload, and
firewalld then runs without it, with only a log line. The preflight reads the zone files and
names the other zone before anything changes.
"""

from __future__ import annotations

import ipaddress
import os
import xml.etree.ElementTree as ET


def zone_sources(xml_text: str) -> list[str]:
    """The source addresses of one zone file (<source address="..."/>)."""
    root = ET.fromstring(xml_text)
    return [node.get("address", "") for node in root.iter("source") if node.get("address")]


def read_zone_dir(folder: str) -> dict[str, list[str]]:
    """zone name -> its sources, for every *.xml in FOLDER (empty when FOLDER is absent)."""
    zones = {}
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return zones
    for name in names:
        if not name.endswith(".xml"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            try:
                zones[name[: -len(".xml")]] = zone_sources(handle.read())
            except ET.ParseError:
                continue  # firewalld skips it too
    return zones


def _same(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_network(a, strict=False) == ipaddress.ip_network(b, strict=False)
    except ValueError:
        return a == b


def conflicts(zone: str, wanted: dict[str, str], zones: dict[str, list[str]]) -> list[dict]:
    """Each wanted source (label -> address) that a zone other than ZONE already holds."""
    found = []
    for label, address in wanted.items():
        for other, sources in sorted(zones.items()):
            if other != zone and any(_same(address, source) for source in sources):
                found.append({"source": address, "label": label, "zone": other})
    return found


def conflict_message(host: str, zone: str, found: list[dict], zone_dir: str) -> str:
    parts = [
        f"{item['source']}"
        + (f" ({item['label']})" if item["label"] != item["source"] else "")
        + f" is already bound to firewalld zone '{item['zone']}'"
        for item in found
    ]
    first = found[0]
    return (
        f"{host}: {'; '.join(parts)} in {zone_dir}. firewalld binds a source to one zone only, "
        f"so zone '{zone}' would fail to load with ZONE_CONFLICT and the members would not be "
        f"trusted. Remove the binding (firewall-cmd --permanent --zone={first['zone']} "
        f"--remove-source={first['source']}; firewall-cmd --reload), or set "
        f"firewall_zone: {first['zone']} to use that zone. Nothing was changed."
    )
