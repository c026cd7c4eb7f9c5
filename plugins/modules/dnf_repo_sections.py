#!/usr/bin/python
"""Ansible module: the repositories a package's .repo files define, and an offline plan."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.dnf_repos import (
    offline_plan,
    parse_repo_file,
    plan_edits,
)

DOCUMENTATION = r"""
module: dnf_repo_sections
short_description: Read the repositories that packages install, and plan them for local mirrors
description:
  - Lists the C(.repo) files of each installed package in I(packages) (C(rpm -ql)) and reads
    every repository they define. A package that is not installed contributes nothing.
  - Returns the repositories to point at a mirror (those named in I(mirrors) that do not use it
    yet) and those to turn off (enabled, no mirror, and still reaching out to a public metalink
    or mirrorlist), which would make every dnf command fail on a node without the internet.
  - Read-only; runs in check mode.
options:
  packages:
    description: Release packages whose repositories to read, e.g. C(epel-release).
    type: list
    elements: str
    required: true
  mirrors:
    description: Repository id to local mirror baseurl.
    type: dict
    default: {}
"""

RETURN = r"""
sections:
  description: Every repository read (file, name, enabled, baseurl, remote).
  type: list
  returned: always
point:
  description: Repositories to point at their mirror (with C(mirror)).
  type: list
  returned: always
disable:
  description: Enabled repositories without a mirror that still use a metalink or mirrorlist.
  type: list
  returned: always
edits:
  description: >-
    The plan as .repo option edits (file, section, option, value, state), for
    community.general.ini_file.
  type: list
  returned: always
"""

EXAMPLES = r"""
- name: Plan epel-release's repositories for a local mirror
  dnf_repo_sections:
    packages: [epel-release]
    mirrors:
      epel: https://mirror.example.com/epel/9/Everything/$basearch/
  register: plan
"""


def repo_files(module: AnsibleModule, package: str) -> list[str]:
    rpm = module.get_bin_path("rpm")
    if not rpm:
        return []
    rc, out, _ = module.run_command([rpm, "-ql", package])
    if rc != 0:
        return []
    return [path for path in out.splitlines() if path.endswith(".repo") and os.path.isfile(path)]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "required": True},
            "mirrors": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    sections = []
    for package in module.params["packages"]:
        for path in repo_files(module, package):
            with open(path, encoding="utf-8", errors="replace") as handle:
                sections += parse_repo_file(path, handle.read())
    mirrors = {str(k): str(v) for k, v in module.params["mirrors"].items() if v}
    plan = offline_plan(sections, mirrors)
    module.exit_json(changed=False, sections=sections, edits=plan_edits(plan), **plan)


if __name__ == "__main__":
    main()
