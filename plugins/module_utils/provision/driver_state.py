"""What a node says of its NVIDIA driver, and what it must still do before torch can use it: the
loaded driver's version (/proc/driver/nvidia/version), the enabled dnf module stream, the
streams a repository offers, Secure Boot, the components apt's sources enable; then build the
module, load it, or reboot. The nvidia_driver_facts module reads the node and calls these.
Standard library only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import configparser
import re

from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.driver_branch import (
    DNF_MODULE,
)

OK, BUILD, LOAD, REBOOT, NO_HEADERS = "ok", "build", "load", "reboot", "no-headers"


_PROC_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def parse_secure_boot(mokutil: str, efivar: bytes | None) -> str:
    """enabled, disabled or unknown: from `mokutil --sb-state`'s output, else from the
    SecureBoot EFI variable (4 bytes of attributes, then the value)."""
    text = mokutil.lower()
    if "secureboot enabled" in text:
        return "enabled"
    if "secureboot disabled" in text or "not supported" in text:
        return "disabled"
    if efivar is not None and len(efivar) >= 5:
        return "enabled" if efivar[4] == 1 else "disabled"
    return "unknown"


def parse_dnf_module_list(text: str, module: str = DNF_MODULE) -> list[str]:
    """The streams of a module in `dnf module list <module>`'s table, without the [d], [e]
    markers, in order."""
    streams: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == module:
            stream = words[1]
            if stream not in streams:
                streams.append(stream)
    return streams


def parse_proc_version(text: str) -> str:
    """The driver version in /proc/driver/nvidia/version ("" when it names none)."""
    match = _PROC_VERSION.search(text)
    return match.group(1) if match else ""


def parse_dnf_module_state(text: str) -> str:
    """The enabled stream in /etc/dnf/modules.d/nvidia-driver.module ("" when none)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return ""
    if not parser.has_section(DNF_MODULE):
        return ""
    section = parser[DNF_MODULE]
    return section.get("stream", "") if section.get("state", "") == "enabled" else ""


def _one_line_components(text: str, suite: str) -> set[str]:
    components: set[str] = set()
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 3 and words[1] == suite:
            components.update(words[2:])
    return components


def _deb822_components(text: str, suite: str) -> set[str]:
    components: set[str] = set()
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0].isspace() and key:
                fields[key] += " " + line.strip()
                continue
            name, _, value = line.partition(":")
            key = name.strip().lower()
            fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "deb" in fields.get("types", "").split() and suite in fields.get("suites", "").split():
            components.update(fields.get("components", "").split())
    return components


def apt_components(sources: dict[str, str], suite: str) -> set[str]:
    """The components apt's sources enable for `suite` (bookworm), from the texts of
    sources.list and sources.list.d, by file name (*.list one-line, *.sources deb822)."""
    components: set[str] = set()
    for path, text in sources.items():
        if path.endswith(".sources"):
            components |= _deb822_components(text, suite)
        else:
            components |= _one_line_components(text, suite)
    return components


def driver_action(
    installed: str, loaded: str, nouveau_loaded: bool, headers: bool
) -> tuple[str, str]:
    """What the node must do before torch can use the driver, and why.

    installed: the version of the nvidia module built for the running kernel ("" when none);
    loaded: the version of the module in the kernel now ("" when none is loaded).
    """
    if not installed:
        if headers:
            return BUILD, "no nvidia kernel module is built for the running kernel"
        return NO_HEADERS, (
            "no nvidia kernel module is built for the running kernel, and its headers are not "
            "installed"
        )
    if not loaded:
        if nouveau_loaded:
            return REBOOT, "nouveau drives the GPUs now, and the nvidia module loads only at boot"
        return LOAD, "the nvidia module is not loaded"
    if loaded != installed:
        return REBOOT, (
            f"the kernel runs the nvidia module {loaded}, while {installed} is installed (the "
            "libraries would refuse the running module: driver/library version mismatch)"
        )
    return OK, ""


def action_message(name: str, action: str, reason: str, kernel: str, reboot_allowed: bool) -> str:
    """What to tell the user when the node is left in this state ("" when it is ready)."""
    if action == OK:
        return ""
    if action == REBOOT and not reboot_allowed:
        return (
            f"{name}: the NVIDIA driver is installed, but {reason}: the node must reboot before "
            "torch can use it. Reboot it and run provision.yml again, or set "
            "nvidia_driver_reboot: true to let the role reboot it"
        )
    if action == REBOOT:
        return (
            f"{name}: {reason}, even after the role rebooted the node. Look for the nvidia "
            "module's errors in the kernel log (journalctl -k | grep -i nvidia)"
        )
    if action == NO_HEADERS:
        return (
            f"{name}: {reason} ({kernel}): DKMS cannot build the module without them. Install "
            f"the kernel's development files (kernel-devel-{kernel} or linux-headers-{kernel}), "
            "or boot the kernel they are installed for, and run provision.yml again"
        )
    if action == BUILD:
        return (
            f"{name}: {reason} ({kernel}), even after dkms autoinstall. See dkms status and "
            f"the make.log under /var/lib/dkms/, and that /lib/modules/{kernel}/build exists"
        )
    return f"{name}: {reason}, even after modprobe nvidia. See journalctl -k | grep -i nvidia"
