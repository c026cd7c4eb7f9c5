#!/usr/bin/python
"""Ansible module: the node's system NCCL, and the build that matches torch's NCCL."""

from __future__ import annotations

import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.torch_builds import (
    choose_nccl,
    installed_build,
    installed_query,
    madison_versions,
    report_line,
)

DOCUMENTATION = r"""
module: nccl_package
short_description: Read the system NCCL, and choose the build that matches torch's NCCL
description:
  - Reads the installed libnccl (RPM) or libnccl2 (DEB) from the package database.
  - With I(torch_version) and I(variant), lists the builds the configured CUDA repository
    offers (dnf repoquery, versionlock off; apt-cache madison) and chooses the build of the NCCL
    version that torch bundles, for torch's CUDA major version (its exact minor first). Without
    one, it chooses the newest NCCL built for torch's CUDA version and says that the two differ.
  - Reads only; changes nothing.
options:
  torch_version:
    description: The pinned torch version; empty to only read the installed NCCL.
    type: str
    default: ""
  variant:
    description: torch's CUDA build (cu130, ...).
    type: str
    default: ""
  torch_nccl:
    description: The NCCL version torch uses (C(torch.cuda.nccl.version())), for I(report).
    type: str
    default: ""
"""

RETURN = r"""
installed:
  description: The installed system NCCL (version, release, cuda, package_version), or {}.
  type: dict
  returned: always
choice:
  description: >-
    The build to install (version, release, cuda, package_version, torch_nccl, matches, note),
    or a problem.
  type: dict
  returned: when torch_version is set
report:
  description: One line on torch's NCCL and the system NCCL, and whether they are the same version.
  type: str
  returned: always
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "torch_version": {"type": "str", "default": ""},
            "variant": {"type": "str", "default": ""},
            "torch_nccl": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    has_dnf = bool(shutil.which("rpm") and shutil.which("dnf"))
    query = installed_query(has_dnf)
    if has_dnf:
        available = [
            "dnf", "repoquery", "--quiet", "--disableplugin=versionlock", "--showduplicates",
            "--queryformat", "%{version}-%{release}\n", "libnccl",
        ]  # fmt: skip
    else:
        available = ["apt-cache", "madison", "libnccl2"]
    rc, out, _ = module.run_command(query)
    installed = installed_build(out) if rc == 0 else {}
    result = {
        "changed": False,
        "installed": installed,
        "report": report_line(module.params["torch_nccl"], installed),
    }
    if module.params["torch_version"]:
        rc, out, err = module.run_command(available)
        if rc != 0:
            module.fail_json(msg=f"cannot list the NCCL builds: {' '.join(available)}: {err}")
        versions = madison_versions(out) if available[0] == "apt-cache" else out.splitlines()
        choice = choose_nccl(module.params["torch_version"], module.params["variant"], versions)
        result["choice"] = choice
        if choice.get("problem"):
            module.fail_json(msg=choice["problem"] + ".", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
