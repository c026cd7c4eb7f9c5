#!/usr/bin/python
"""Documentation of the cluster_platform action plugin (nothing of it runs as a module)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_platform
short_description: Refuse an operating system the project does not support, before any module runs
description:
  - An action plugin (plugins/action/cluster_platform.py). It reads the node's os-release with a
    raw command, so it needs no Python on the node, and decides on the controller.
  - Supported, by os-release ID or ID_LIKE and major version, RHEL 9 and its rebuilds, Debian 12,
    Ubuntu 22.04 and 24.04.
  - EL8 is refused with the reason (ansible-core 2.17 and later run no module on EL8's Python 3.6,
    where its dnf, rpm and firewalld bindings live). EL10 is refused until its path is pinned and
    run.
options:
  path:
    description: The os-release file to read (falls back to C(/usr/lib/os-release)).
    type: str
    default: /etc/os-release
"""

RETURN = r"""
release:
  description: The release, as its PRETTY_NAME gives it.
  type: str
  returned: always
family:
  description: C(rhel), C(debian), C(ubuntu), or empty for another system.
  type: str
  returned: always
major_version:
  description: The major part of VERSION_ID.
  type: str
  returned: always
"""

EXAMPLES = r"""
- name: Refuse an unsupported operating system
  cluster_platform:
"""
