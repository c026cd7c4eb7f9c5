"""Which dnf repositories a release package defines, and which of them an offline node must not
keep as they come.

epel-release installs more than the `epel` repository: epel-testing (off) and epel-cisco-
openh264 (on, pointing at Cisco's server through Fedora's metalink), each with debuginfo and
source twins. With a local mirror for `epel`, any other enabled repository that still points at
a public metalink or mirrorlist makes every dnf command fail on an air-gapped node (dnf.conf's
skip_if_unavailable=False, EL9's default). These functions read the .repo files and say what to
point at a mirror and what to turn off. Standard library only, Python 3.9: it runs on the nodes.
"""

from __future__ import annotations

import configparser

REMOTE_KEYS = ("metalink", "mirrorlist")


def parse_repo_file(path: str, text: str) -> list[dict[str, object]]:
    """The repositories of one .repo file, in order: file, name, enabled, baseurl, remote
    (a metalink or mirrorlist URL, "" when none)."""
    parser = configparser.RawConfigParser(strict=False)
    try:
        parser.read_string(text, source=path)
    except configparser.Error:
        return []
    sections = []
    for name in parser.sections():
        if name == "main":
            continue
        section = parser[name]
        enabled = section.get("enabled", "1").strip().lower() in ("1", "true", "yes", "on")
        remote = next((section[key].strip() for key in REMOTE_KEYS if section.get(key)), "")
        sections.append(
            {
                "file": path,
                "name": name,
                "enabled": enabled,
                "baseurl": section.get("baseurl", "").strip(),
                "remote": remote,
            }
        )
    return sections


def offline_plan(
    sections: list[dict[str, object]], mirrors: dict[str, str]
) -> dict[str, list[dict[str, object]]]:
    """What a node that uses local mirrors must change in these repositories.

    point: repositories given a mirror in `mirrors` (name: baseurl) that do not use it yet;
    disable: enabled repositories without a mirror that would still reach out to a metalink or
    a mirrorlist. A repository with a baseurl of its own and no metalink is left alone: the site
    chose it.
    """
    point, disable = [], []
    for section in sections:
        mirror = mirrors.get(str(section["name"]), "")
        if mirror:
            if section["baseurl"] != mirror or section["remote"]:
                point.append({**section, "mirror": mirror})
        elif section["enabled"] and section["remote"] and not section["baseurl"]:
            disable.append(section)
    return {"point": point, "disable": disable}


def plan_edits(plan: dict[str, list[dict[str, object]]]) -> list[dict[str, str]]:
    """The plan as one edit per .repo option (file, section, option, value, state), in the
    order to make them: a mirror's baseurl, then its metalink and mirrorlist removed; then
    enabled=0 for each repository to turn off."""
    edits = []
    for section in plan["point"]:
        where = {"file": str(section["file"]), "section": str(section["name"])}
        edits.append(
            {**where, "option": "baseurl", "value": str(section["mirror"]), "state": "present"}
        )
        edits += [{**where, "option": key, "value": "", "state": "absent"} for key in REMOTE_KEYS]
    for section in plan["disable"]:
        edits.append(
            {
                "file": str(section["file"]),
                "section": str(section["name"]),
                "option": "enabled",
                "value": "0",
                "state": "present",
            }
        )
    return edits
