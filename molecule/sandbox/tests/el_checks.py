"""What the RHEL-family roles leave on a node, read the same way in both EL suites.

molecule/centos (real CentOS Stream 9 and Rocky 9, with the internet) and the sandbox's EL9-like
nodes (test_el9.py: Debian's dnf and rpm, local signed repositories) check the same behaviour
with these functions, each on a testinfra host: the repositories dnf has enabled, the keys rpm
has, the NCCL build installed and locked, and the header and library the compilers and the
loader find.
"""

from __future__ import annotations

import json
import re

from testinfra.host import Host

NCCL_PACKAGES = ("libnccl", "libnccl-devel")
NCCL_HEADER = "/usr/include/nccl.h"
NCCL_LIBRARY = "/usr/lib64/libnccl.so.2"
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"

# The repositories dnf has enabled, from its own configuration (no metadata download), on the
# platform Python that has the dnf bindings.
_ENABLED_REPOS = """
import json, dnf
base = dnf.Base()
base.read_all_repos()
print(json.dumps(sorted(repo.id for repo in base.repos.iter_enabled())))
"""


def enabled_repos(host: Host) -> frozenset[str]:
    return frozenset(json.loads(host.check_output(f"/usr/bin/python3 -c '{_ENABLED_REPOS}'")))


def key_installed(host: Host, fingerprint: str) -> bool:
    """Whether rpm has the key with this fingerprint (rpm names it gpg-pubkey-<last 8 digits>)."""
    key_id = fingerprint.replace(" ", "")[-8:].lower()
    return host.run(f"rpm -q gpg-pubkey-{key_id}").rc == 0


def nccl_build(host: Host, package: str = "libnccl") -> tuple[str, str]:
    """(version, release) of an installed NCCL package, e.g. ("2.30.7", "1+cuda13.0")."""
    installed = host.package(package)
    assert installed.is_installed, f"{package} is not installed"
    return installed.version, installed.release


def nccl_locks(host: Host) -> list[str]:
    return host.file(VERSIONLOCK_LIST).content_string.split()


def lock_entry(package: str, version: str, release: str) -> str:
    """The entry `dnf versionlock add` writes, and the nccl role too."""
    return f"{package}-0:{version}-{release}.*"


def header_version(host: Host) -> str:
    """major.minor.patch as nccl.h declares it."""
    header = host.file(NCCL_HEADER)
    assert header.is_file
    defines = dict(
        re.findall(r"^#define\s+NCCL_(MAJOR|MINOR|PATCH)\s+([0-9]+)", header.content_string, re.M)
    )
    return ".".join(defines.get(part, "?") for part in ("MAJOR", "MINOR", "PATCH"))


def library_version(host: Host) -> str:
    """The version of the library libnccl.so.2 points at."""
    library = host.file(NCCL_LIBRARY)
    assert library.exists
    return library.linked_to.rsplit("/libnccl.so.", 1)[-1]
