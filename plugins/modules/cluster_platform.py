#!/usr/bin/python
"""Documentation of the cluster_platform action plugin (nothing of it runs as a module)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_platform
short_description: Refuse an operating system the project does not support, before any module runs
description:
  - An action plugin (plugins/action/common/platform.py). It reads the node's os-release with a
    raw command, so it needs no Python on the node, and decides on the controller.
  - Supported, by os-release ID or ID_LIKE and major version, RHEL 9 and its rebuilds, Debian 12,
    Ubuntu 22.04 and 24.04.
  - EL8 is refused with the reason (ansible-core 2.17 and later run no module on EL8's Python 3.6,
    where its dnf, rpm and firewalld bindings live). EL10 is refused until its path is pinned and
    run.
  - On the RHEL family it records O(rhel_python) as the node's discovered Python interpreter
    (the fact C(discovered_interpreter_python)), unless the inventory sets
    C(ansible_python_interpreter). ansible-core 2.19's discovery prefers python3.12 or 3.11
    when they are installed, and those lack the dnf, rpm, firewalld and SELinux bindings of
    EL9's platform Python.
options:
  path:
    description: The os-release file to read (falls back to C(/usr/lib/os-release)).
    type: str
    default: /etc/os-release
  refuse:
    description: Fail on an unsupported release. False only reads the release and pins the Python.
    type: bool
    default: true
  rhel_python:
    description: The Python that runs modules on the RHEL family.
    type: str
    default: /usr/bin/python3
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
interpreter:
  description: The Python interpreter recorded for the node, empty when discovery is left alone.
  type: str
  returned: always
"""

EXAMPLES = r"""
- name: Refuse an unsupported operating system
  cluster_platform:
"""
