"""Which operating systems the project supports, decided from a node's /etc/os-release.

The decision is made before any module runs on the node (the text is read with a raw command):
on EL8 no module of ansible-core 2.19 can run at all, so a check that needs one would fail with
Python's error instead of the reason.
"""

from __future__ import annotations

import shlex

# Supported releases, by family: (os-release ID or ID_LIKE member, major version).
SUPPORTED = {
    "rhel": ("9",),
    "debian": ("12",),
    "ubuntu": ("22", "24"),
}


SUPPORTED_TEXT = (
    "RHEL 9 and its rebuilds (CentOS Stream 9, Rocky Linux 9, AlmaLinux 9), Debian 12, "
    "Ubuntu 22.04 and 24.04"
)


EL8_REASON = (
    "ansible-core 2.17 and later (this project needs 2.19) run no module on Python 3.6, and "
    "EL8's dnf, rpm and firewalld Python bindings exist only for its Python 3.6 "
    "(ansible/ansible#82068 and #83357): every package and firewall task would fail. "
    "Upgrade the node to EL9 (for example with ELevate or a reinstall)"
)


EL10_REASON = (
    "EL10 is not supported yet. NVIDIA's rhel10 CUDA repository is signed with another key "
    "(CDF6BA43) than rhel9's, whose fingerprint this project has not pinned, and no run of "
    "this project on EL10 has been made. Use EL9 on the training nodes"
)


# The Python that runs modules on the RHEL family: the platform Python, the only one with the
# dnf, rpm, firewalld and SELinux bindings. ansible-core 2.19's interpreter discovery takes the
# first of python3.13, 3.12, 3.11, ... before /usr/bin/python3 (INTERPRETER_PYTHON_FALLBACK),
# so on an EL9 node with AppStream's python3.11 or 3.12 (the pytorch role installs 3.11 for
# venvs) modules would run there: dnf respawns itself, ansible.posix.firewalld fails.
RHEL_PLATFORM_PYTHON = "/usr/bin/python3"


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value lines of os-release(5), with shell quoting, into a dict."""
    fields = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        try:
            words = shlex.split(value)
        except ValueError:
            words = [value.strip("\"'")]
        fields[key.strip()] = " ".join(words)
    return fields


def describe(fields: dict[str, str]) -> str:
    """The release as people name it: PRETTY_NAME, or NAME and VERSION_ID."""
    name = fields.get("PRETTY_NAME") or " ".join(
        part for part in (fields.get("NAME", ""), fields.get("VERSION_ID", "")) if part
    )
    return name or "an unknown system (no /etc/os-release)"


def family(fields: dict[str, str]) -> str:
    """'rhel', 'debian' or 'ubuntu' when the release is one of those or built from one."""
    ids = [fields.get("ID", "").lower(), *fields.get("ID_LIKE", "").lower().split()]
    if fields.get("ID", "").lower() == "ubuntu":
        return "ubuntu"
    for known in ("rhel", "debian"):
        if known in ids:
            return known
    if "fedora" in ids and fields.get("ID", "").lower() in ("centos", "rocky", "almalinux"):
        return "rhel"
    return ""


def major_version(fields: dict[str, str]) -> str:
    return fields.get("VERSION_ID", "").split(".")[0]


def platform_problem(fields: dict[str, str], host: str) -> str | None:
    """None when the node's release is supported; otherwise why not, and what to do."""
    release, kind, major = describe(fields), family(fields), major_version(fields)
    if kind == "rhel" and major == "8":
        return f"{host}: {release} (EL8) is not supported. {EL8_REASON}. Nothing was changed."
    if kind == "rhel" and major == "10":
        return f"{host}: {release}: {EL10_REASON}. Nothing was changed."
    if kind and major in SUPPORTED[kind]:
        return None
    return f"{host}: {release} is not supported. Supported: {SUPPORTED_TEXT}. Nothing was changed."


def pinned_interpreter(fields: dict[str, str], explicit: str, platform_python: str) -> str:
    """The interpreter to record as discovered for this node ("" to leave discovery alone):
    the platform Python on the RHEL family, unless the inventory names one itself
    (ansible_python_interpreter), which always wins."""
    if explicit or family(fields) != "rhel":
        return ""
    return platform_python
