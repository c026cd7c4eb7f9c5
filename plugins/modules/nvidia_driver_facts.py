#!/usr/bin/python
"""Ansible module: read a node's NVIDIA driver state, and judge the nvidia_driver role's inputs."""

from __future__ import annotations

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import read_text
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.driver_branch import (
    install_plan,
    minimum_branch,
    preflight_problems,
    stream_offered_problem,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.driver_state import (
    action_message,
    apt_components,
    driver_action,
    parse_dnf_module_list,
    parse_dnf_module_state,
    parse_proc_version,
    parse_secure_boot,
)

DOCUMENTATION = r"""
module: nvidia_driver_facts
short_description: Read the NVIDIA driver state of a node and check the nvidia_driver role's inputs
description:
  - Read-only. Reads the running kernel, the version of the nvidia module loaded now
    (C(/sys/module/nvidia/version), else C(/proc/driver/nvidia/version)), the version of the
    module built for the running kernel (C(modinfo)), whether nouveau is loaded, whether the
    running kernel's headers are installed (C(/lib/modules/<kernel>/build)), and on Debian the
    components apt's sources enable, on the RHEL family the enabled stream of dnf's
    nvidia-driver module and the installed kernel packages (C(rpm -q kernel-core)), and the
    Secure Boot state (C(mokutil --sb-state), else the SecureBoot EFI variable).
  - With O(offered_streams), also the streams of dnf's nvidia-driver module that the
    configured repositories offer (C(dnf module list)), and whether the branch's is one.
  - Returns the problems that stop the role before it changes anything (a branch older than the
    CUDA build of torch needs, an unsupported system, Debian's branch too old, apt sources
    without non-free, another dnf stream enabled, a running kernel older than the newest
    installed one, Secure Boot without an enrolled DKMS key), the packages that install the
    driver, and what the node must still do before torch can use it (build, load, reboot).
options:
  name:
    description: The node's inventory hostname, for the messages.
    type: str
    required: true
  branch:
    description: The driver branch asked for (nvidia_driver_branch).
    type: str
    default: "580"
  cuda_variant:
    description: The CUDA build of torch the driver must run (cu130, cu126, cpu ...).
    type: str
    default: cu130
  os_family:
    description: Ansible's os_family fact.
    type: str
    default: ""
  distribution:
    description: Ansible's distribution fact.
    type: str
    default: ""
  distribution_release:
    description: Ansible's distribution_release fact (the Debian codename).
    type: str
    default: ""
  distribution_major_version:
    description: Ansible's distribution_major_version fact.
    type: str
    default: ""
  persistence:
    description: Whether the packages include nvidia-persistenced.
    type: bool
    default: true
  reboot_allowed:
    description: Whether the role may reboot the node (only changes the message).
    type: bool
    default: false
  secure_boot_key_enrolled:
    description: Whether DKMS's signing key is enrolled as a Machine Owner Key (Secure Boot).
    type: bool
    default: false
  offered_streams:
    description: Also list the module streams the repositories offer (runs dnf; RHEL family).
    type: bool
    default: false
  module_file:
    description: >-
      The name of the driver's kernel module file for modinfo (C(nvidia); Debian renames it
      C(nvidia-current)). The loaded module is C(nvidia) either way.
    type: str
    default: nvidia
"""

RETURN = r"""
kernel:
  description: The running kernel (uname -r).
  type: str
  returned: always
module_loaded:
  description: Whether the nvidia kernel module is loaded.
  type: bool
  returned: always
driver_version:
  description: The version of the loaded nvidia module, empty when none is loaded.
  type: str
  returned: always
module_version:
  description: The version of the nvidia module built for the running kernel, empty when none.
  type: str
  returned: always
nouveau_loaded:
  description: Whether the nouveau module is loaded.
  type: bool
  returned: always
kernel_headers:
  description: Whether the running kernel's headers are installed (/lib/modules/<kernel>/build).
  type: bool
  returned: always
apt_components:
  description: Debian. The components apt's sources enable for the release.
  type: list
  returned: always
dnf_module_stream:
  description: RHEL family. The enabled stream of dnf's nvidia-driver module, empty when none.
  type: str
  returned: always
minimum_branch:
  description: >-
    The oldest driver branch the CUDA build of torch runs on; null for cpu, or a bad variant.
  type: int
  returned: always
installed_kernels:
  description: RHEL family. The installed kernel-core packages, as VERSION-RELEASE.ARCH.
  type: list
  returned: always
secure_boot:
  description: enabled, disabled or unknown.
  type: str
  returned: always
streams_offered:
  description: With O(offered_streams), the nvidia-driver streams the repositories offer.
  type: list
  returned: always
stream_problem:
  description: With O(offered_streams), why the branch's stream cannot be enabled; empty if it can.
  type: str
  returned: always
problems:
  description: Why the role must not run on this node, one sentence each; empty when it may.
  type: list
  returned: always
install:
  description: >-
    C(packages), C(dnf_module_stream) (EL9) and C(versionlock) (EL10) that install the driver.
  type: dict
  returned: always
action:
  description: >-
    What the node must do before torch can use the driver: ok, build, no-headers, load or reboot.
  type: str
  returned: always
message:
  description: What to tell the user if the node stays in this state; empty when it is ready.
  type: str
  returned: always
"""

EXAMPLES = r"""
- name: Read the driver state and check the inputs
  nvidia_driver_facts:
    name: "{{ inventory_hostname }}"
    branch: "{{ nvidia_driver_branch }}"
    cuda_variant: "{{ nvidia_driver_cuda_variant }}"
    os_family: "{{ ansible_facts.os_family }}"
    distribution: "{{ ansible_facts.distribution }}"
    distribution_release: "{{ ansible_facts.distribution_release }}"
    distribution_major_version: "{{ ansible_facts.distribution_major_version }}"
  register: driver
"""

SYS_MODULE = "/sys/module"
PROC_VERSION = "/proc/driver/nvidia/version"
DNF_MODULE_STATE = "/etc/dnf/modules.d/nvidia-driver.module"
APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list")
APT_DEB822_SOURCES = "/etc/apt/sources.list.d/*.sources"


def read(path: str) -> str:
    """A file's text as UTF-8, whatever the locale ('' where it cannot be read)."""
    return read_text(path, encoding="utf-8", errors="replace")


def loaded_version() -> str:
    return read(f"{SYS_MODULE}/nvidia/version").strip() or parse_proc_version(read(PROC_VERSION))


def built_version(module: AnsibleModule, module_file: str) -> str:
    modinfo = module.get_bin_path("modinfo", opt_dirs=["/usr/sbin", "/sbin"])
    if not modinfo:
        return ""
    rc, out, _ = module.run_command([modinfo, "-F", "version", module_file])
    return out.strip() if rc == 0 else ""


SECURE_BOOT_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def installed_kernels(module: AnsibleModule) -> list[str]:
    rpm = module.get_bin_path("rpm")
    if not rpm:
        return []
    rc, out, _ = module.run_command(
        [rpm, "-q", "kernel-core", "--queryformat", "%{VERSION}-%{RELEASE}.%{ARCH}\\n"]
    )
    return out.split() if rc == 0 else []


def secure_boot(module: AnsibleModule) -> str:
    mokutil = module.get_bin_path("mokutil", opt_dirs=["/usr/sbin", "/sbin"])
    text = module.run_command([mokutil, "--sb-state"])[1] if mokutil else ""
    try:
        with open(SECURE_BOOT_EFIVAR, "rb") as handle:
            efivar = handle.read()
    except OSError:
        efivar = None
    return parse_secure_boot(text, efivar)


def offered(module: AnsibleModule) -> list[str]:
    dnf = module.get_bin_path("dnf")
    if not dnf:
        return []
    rc, out, _ = module.run_command([dnf, "--quiet", "module", "list", "nvidia-driver"])
    return parse_dnf_module_list(out) if rc == 0 else []


def apt_sources() -> dict[str, str]:
    paths = [path for pattern in APT_SOURCES for path in sorted(glob.glob(pattern))]
    paths += sorted(glob.glob(APT_DEB822_SOURCES))
    return {path: read(path) for path in paths}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "branch": {"type": "str", "default": "580"},
            "cuda_variant": {"type": "str", "default": "cu130"},
            "os_family": {"type": "str", "default": ""},
            "distribution": {"type": "str", "default": ""},
            "distribution_release": {"type": "str", "default": ""},
            "distribution_major_version": {"type": "str", "default": ""},
            "persistence": {"type": "bool", "default": True},
            "reboot_allowed": {"type": "bool", "default": False},
            "secure_boot_key_enrolled": {"type": "bool", "default": False},
            "offered_streams": {"type": "bool", "default": False},
            "module_file": {"type": "str", "default": "nvidia"},
        },
        supports_check_mode=True,
    )
    params = module.params
    name = params["name"]
    facts = {
        key: params[key]
        for key in (
            "os_family",
            "distribution",
            "distribution_release",
            "distribution_major_version",
        )
    }
    kernel = os.uname().release
    debian = facts["os_family"] == "Debian"
    components = apt_components(apt_sources(), facts["distribution_release"]) if debian else set()
    stream = "" if debian else parse_dnf_module_state(read(DNF_MODULE_STATE))
    kernels = [] if debian else installed_kernels(module)
    boot = secure_boot(module)
    plan = install_plan(
        facts["os_family"],
        facts["distribution_major_version"],
        params["branch"],
        kernel,
        params["persistence"],
    )
    streams = offered(module) if params["offered_streams"] and not debian else []
    stream_problem = (
        stream_offered_problem(name, str(plan["dnf_module_stream"]), streams)
        if params["offered_streams"]
        else ""
    )

    driver = loaded_version()
    built = built_version(module, params["module_file"])
    nouveau = os.path.isdir(f"{SYS_MODULE}/nouveau")
    headers = os.path.isdir(f"/lib/modules/{kernel}/build")
    action, reason = driver_action(built, driver, nouveau, headers)
    try:
        minimum = minimum_branch(params["cuda_variant"])
    except ValueError:
        minimum = None

    module.exit_json(
        changed=False,
        kernel=kernel,
        module_loaded=bool(driver) or os.path.isdir(f"{SYS_MODULE}/nvidia"),
        driver_version=driver,
        module_version=built,
        nouveau_loaded=nouveau,
        kernel_headers=headers,
        apt_components=sorted(components),
        dnf_module_stream=stream,
        minimum_branch=minimum,
        problems=preflight_problems(
            name,
            params["branch"],
            params["cuda_variant"],
            facts=facts,
            components=components,
            enabled_stream=stream,
            kernel=kernel,
            installed_kernels=kernels,
            secure_boot=boot,
            key_enrolled=params["secure_boot_key_enrolled"],
        ),
        installed_kernels=kernels,
        secure_boot=boot,
        streams_offered=streams,
        stream_problem=stream_problem,
        install=plan,
        action=action,
        message=action_message(name, action, reason, kernel, params["reboot_allowed"]),
    )


if __name__ == "__main__":
    main()
