"""The nvidia_driver role's choice: which driver branch a CUDA build of torch needs, what is wrong
with the role's inputs on a node (platform, branch, Debian components, dnf module stream, an old
kernel, Secure Boot), and which packages install the driver there. Pure functions of what a node
reports (provision/driver_state.py reads it). Standard library only: it runs on the nodes'
system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import re

# CUDA minor version compatibility: the oldest driver branch that runs every build of a CUDA
# major release (CUDA Toolkit release notes, "CUDA Toolkit and Minimum Required Driver Version
# for CUDA Minor Version Compatibility";
# https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html):
# CUDA 13.x >= 580, 12.x >= 525 (525.60.13), 11.x >= 450 (450.80.02).
MINIMUM_BRANCH = {13: 580, 12: 525, 11: 450}


# A torch build of each CUDA major release, for the way out of a refusal.
VARIANT_OF_MAJOR = {13: "cu130", 12: "cu126", 11: "cu118"}


# The driver branch of Debian's nvidia-driver (non-free), by release: bookworm 535.261.03,
# trixie 550.163.01 (the archive's bookworm/non-free and trixie/non-free indexes).
DEBIAN_BRANCHES = {"bookworm": 535, "trixie": 550}


DEBIAN_MAJORS = {"bookworm": "12", "trixie": "13"}


# nvidia-driver is in non-free, the helpers it depends on (nvidia-kernel-common,
# nvidia-modprobe, nvidia-persistenced) in contrib, its GSP firmware in non-free-firmware.
DEBIAN_COMPONENTS = ("contrib", "non-free", "non-free-firmware")


# The RHEL family releases with a CUDA repository and a path here. EL9 pins the branch with
# a dnf module stream, EL10 (no modularity) with dnf versionlock, as NVIDIA documents:
# https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/kernel-modules.html
RHEL_STREAM_MAJORS = ("9",)


RHEL_LOCK_MAJORS = ("10",)


DNF_MODULE = "nvidia-driver"


_VARIANT = re.compile(r"^cu(\d{2,3})$")


_BRANCH = re.compile(r"^\d{3}$")


def cuda_version(variant: str) -> tuple[int, int] | None:
    """(major, minor) of a torch CUDA variant (cu130 -> (13, 0), cu118 -> (11, 8)); None for
    cpu. ValueError for anything else."""
    if variant == "cpu":
        return None
    match = _VARIANT.match(variant)
    if not match:
        raise ValueError(variant)
    digits = match.group(1)
    return int(digits[:-1]), int(digits[-1])


def minimum_branch(variant: str) -> int | None:
    """The oldest driver branch that runs torch's `variant` build; None for cpu. ValueError
    for a variant that is not cpu or cuXY(Z), or a CUDA major release not in the table."""
    version = cuda_version(variant)
    if version is None:
        return None
    if version[0] not in MINIMUM_BRANCH:
        raise ValueError(variant)
    return MINIMUM_BRANCH[version[0]]


def _cuda_text(variant: str) -> str:
    major, minor = cuda_version(variant) or (0, 0)
    return f"{variant} (CUDA {major}.{minor})"


def _older_variant(branch: int) -> str:
    """The newest torch CUDA build a driver branch runs ("" when none)."""
    fitting = [major for major, minimum in MINIMUM_BRANCH.items() if minimum <= branch]
    return VARIANT_OF_MAJOR[max(fitting)] if fitting else ""


def platform_problem(name: str, os_family: str, distribution: str, release: str, major: str) -> str:
    """Why the role cannot install a driver on this system ("" when it can)."""
    if os_family == "RedHat" and major in RHEL_STREAM_MAJORS + RHEL_LOCK_MAJORS:
        return ""
    if distribution == "Debian" and release in DEBIAN_BRANCHES:
        return ""
    return (
        f"{name}: the nvidia_driver role installs the driver on the RHEL family 9 and 10 and on "
        f"Debian 12 (bookworm) and 13 (trixie), not on {distribution or os_family} "
        f"{major or release}. Set nvidia_driver_enabled: false for this host and install the "
        "driver yourself"
    )


def branch_problems(name: str, branch: str, variant: str) -> list[str]:
    """The inputs' own problems: the branch's form, the variant's, and a branch older than
    the CUDA build of torch needs."""
    problems = []
    if not _BRANCH.match(branch):
        problems.append(
            f"{name}: nvidia_driver_branch is '{branch}'. Expected a driver branch: the first "
            "number of a driver version, e.g. 580 for 580.95.05"
        )
    try:
        minimum = minimum_branch(variant)
    except ValueError:
        return [
            *problems,
            f"{name}: nvidia_driver_cuda_variant is '{variant}'. Expected cpu or a CUDA build "
            f"of torch for CUDA {', '.join(map(str, sorted(MINIMUM_BRANCH)))} "
            "(cu130, cu126, cu118 ...), as in pytorch_cuda_variant",
        ]
    if problems or minimum is None or int(branch) >= minimum:
        return problems
    return [
        f"{name}: nvidia_driver_branch is {branch}, but {_cuda_text(variant)} needs the "
        f"{minimum} driver branch or newer (CUDA minor version compatibility). Set "
        f"nvidia_driver_branch to {minimum} or newer, or use a torch build the {branch} "
        f"branch runs ({_older_variant(int(branch)) or 'none'})"
    ]


def debian_problems(name: str, release: str, variant: str, components: set[str]) -> list[str]:
    """Debian ships one driver branch per release, from non-free: refuse one older than the
    CUDA build of torch needs, and apt sources that lack the components it comes from."""
    problems = []
    shipped = DEBIAN_BRANCHES[release]
    try:
        minimum = minimum_branch(variant)
    except ValueError:
        minimum = None  # branch_problems names the variant
    if minimum is not None and shipped < minimum:
        major = DEBIAN_MAJORS[release]
        problems.append(
            f"{name}: Debian {major} ({release}) ships the NVIDIA driver branch {shipped} "
            f"(nvidia-driver, non-free), older than the {minimum} branch that "
            f"{_cuda_text(variant)} needs. Either set nvidia_driver_enabled: false and install "
            f"a {minimum} or newer driver yourself (for example from NVIDIA's CUDA repository "
            f"for debian{major}), or use a torch build the {shipped} branch runs "
            f"(pytorch_cuda_variant: {_older_variant(shipped)})"
        )
    missing = [component for component in DEBIAN_COMPONENTS if component not in components]
    if missing:
        problems.append(
            f"{name}: Debian's nvidia-driver comes from the {', '.join(DEBIAN_COMPONENTS)} "
            f"components, but the apt sources of {release} list only "
            f"{', '.join(sorted(components)) or 'none'}. Add {' '.join(missing)} to the "
            f"'{release}' entry of /etc/apt/sources.list (or to Components: in its .sources "
            "file), or set nvidia_driver_enabled: false for this host"
        )
    return problems


def stream_problem(name: str, enabled: str, wanted: str) -> str:
    """A different stream of dnf's nvidia-driver module is enabled: the role does not switch
    a node's driver branch behind its back ("" when none or the wanted one is enabled)."""
    if not enabled or not wanted or enabled == wanted.partition(":")[2]:
        return ""
    return (
        f"{name}: dnf's {DNF_MODULE} module has the stream {enabled} enabled, and "
        f"nvidia_driver_branch asks for {wanted}. Switch it yourself (dnf module switch-to "
        f"{wanted} --allowerasing, then reboot), or set nvidia_driver_enabled: false to keep "
        "the driver this node has"
    )


def dnf_module_stream(major: str, branch: str) -> str:
    """EL9: the stream of dnf's nvidia-driver module that pins the branch, open kernel
    modules with DKMS ("" elsewhere)."""
    return f"{DNF_MODULE}:{branch}-open" if major in RHEL_STREAM_MAJORS else ""


def versionlock_pattern(major: str, branch: str) -> str:
    """EL10: the dnf versionlock pattern that keeps the branch ("" elsewhere)."""
    return f"*nvidia*{branch}*" if major in RHEL_LOCK_MAJORS else ""


def install_plan(
    os_family: str, major: str, branch: str, kernel: str, persistence: bool
) -> dict[str, object]:
    """What installs the driver: packages, the dnf module stream to enable first (EL9) or the
    versionlock pattern that keeps the branch (EL10).

    RHEL family: the open kernel modules (nvidia-open) from NVIDIA's CUDA repository, built by
    DKMS (from EPEL) against kernel-devel-matched (the kernel-devel of the newest installed
    kernel: the mirrors of Rocky and AlmaLinux drop older kernels' kernel-devel, so
    kernel-devel-<uname -r> of a node that has not rebooted into its newest kernel cannot be
    found; kernel_problem refuses that node first) and kernel-headers (the user-space API
    headers, one version at a time), as NVIDIA's guide installs them. Debian: nvidia-driver
    from non-free, built by DKMS against linux-headers of the running kernel.
    """
    persistenced = ["nvidia-persistenced"] if persistence else []
    if os_family == "Debian":
        return {
            "packages": [f"linux-headers-{kernel}", "nvidia-driver", *persistenced],
            "dnf_module_stream": "",
            "versionlock": "",
        }
    return {
        "packages": [
            "kernel-devel-matched",
            "kernel-headers",
            "dkms",
            "nvidia-open",
            *persistenced,
        ],
        "dnf_module_stream": dnf_module_stream(major, branch),
        "versionlock": versionlock_pattern(major, branch),
    }


_SEGMENT = re.compile(r"~|\d+|[A-Za-z]+")


def _segment_order(x: str, y: str) -> int:
    """One segment of rpmvercmp: `~` first, digits newer than letters, numbers by value."""
    if x == "~" or y == "~":
        return (y == "~") - (x == "~")
    if x.isdigit() != y.isdigit():
        return 1 if x.isdigit() else -1
    if x.isdigit():
        return (int(x) > int(y)) - (int(x) < int(y))
    return (x > y) - (x < y)


def rpm_version_compare(left: str, right: str) -> int:
    """rpm's version comparison (rpmvercmp) of two version strings: -1, 0 or 1. Digit runs
    compare as numbers and are newer than letter runs, letter runs compare as text, `~` sorts
    before anything, and of two otherwise equal strings the longer is newer. Enough for
    kernel versions such as 5.14.0-570.12.1.el9_5.x86_64."""
    a, b = _SEGMENT.findall(left), _SEGMENT.findall(right)
    for x, y in zip(a, b):
        if x != y:
            return _segment_order(x, y)
    if len(a) == len(b):
        return 0
    tail = (a if len(a) > len(b) else b)[min(len(a), len(b))]
    sign = 1 if len(a) > len(b) else -1
    return -sign if tail == "~" else sign


def kernel_problem(name: str, running: str, installed: list[str]) -> str:
    """The node runs an older kernel than the newest one installed ("" when it does not, or
    when no kernel package is installed, as in a container). kernel-devel-matched is the
    newest kernel's, and the mirrors no longer carry the running kernel's kernel-devel: the
    module would be built for the kernel of the next boot only. Reboot first."""
    if not installed or not running:
        return ""
    newest = installed[0]
    for version in installed[1:]:
        if rpm_version_compare(version, newest) > 0:
            newest = version
    if rpm_version_compare(newest, running) <= 0:
        return ""
    return (
        f"{name}: the node runs the kernel {running}, but {newest} is installed and newer: it "
        "has not rebooted since a kernel update. The driver is built by DKMS against "
        "kernel-devel-matched, the newest kernel's development files (the mirrors of Rocky "
        f"and AlmaLinux no longer carry kernel-devel-{running}), so the module would not "
        f"load before a reboot. Reboot the node into {newest} first, then run provision.yml "
        "again. Nothing was changed"
    )


def secure_boot_problem(name: str, state: str, key_enrolled: bool) -> str:
    """Secure Boot is on and DKMS's signing key is not said to be enrolled ("" otherwise)."""
    if state != "enabled" or key_enrolled:
        return ""
    return (
        f"{name}: Secure Boot is enabled. The nvidia module that DKMS builds is signed only "
        "with DKMS's own key (/var/lib/dkms/mok.pub), which the firmware does not trust until "
        "it is enrolled as a Machine Owner Key, so the kernel would refuse to load it. Either "
        "turn Secure Boot off in the firmware, or enrol the key once on this node: "
        "`dkms generate_mok` (if /var/lib/dkms/mok.pub is missing), `mokutil --import "
        "/var/lib/dkms/mok.pub` with a one-time password, reboot and confirm the key in the "
        "MOK manager at the console; then set nvidia_driver_secure_boot_key_enrolled: true "
        "and run provision.yml again. Nothing was changed"
    )


def stream_offered_problem(name: str, wanted: str, offered: list[str]) -> str:
    """The repository does not offer the stream to enable ("" when it does). A mirror made
    without the repository's module metadata (modules.yaml) offers no stream at all, and
    nvidia-open then stays hidden."""
    stream = wanted.partition(":")[2]
    if not wanted or stream in offered:
        return ""
    if not offered:
        return (
            f"{name}: the CUDA repository offers no stream of dnf's {DNF_MODULE} module, so "
            f"{wanted} cannot be enabled and nvidia-open stays hidden. A local mirror must "
            "carry the repository's module metadata: copy repodata/*modules.yaml* along with "
            "the packages (reposync --download-metadata does), or add it with modifyrepo_c "
            "after createrepo_c. Nothing was installed"
        )
    return (
        f"{name}: the CUDA repository offers the streams {', '.join(offered)} of dnf's "
        f"{DNF_MODULE} module, not {stream}. Set nvidia_driver_branch to one it offers, or "
        "update the mirror. Nothing was installed"
    )


def preflight_problems(
    name: str,
    branch: str,
    variant: str,
    *,
    facts: dict[str, str],
    components: set[str],
    enabled_stream: str,
    kernel: str = "",
    installed_kernels: list[str] | None = None,
    secure_boot: str = "unknown",
    key_enrolled: bool = False,
) -> list[str]:
    """Everything that stops the role on this node before it changes anything. `facts` holds
    os_family, distribution, distribution_release and distribution_major_version (Ansible's);
    `components` what apt's sources enable for the Debian release; `enabled_stream` the
    stream of dnf's nvidia-driver module enabled now; `kernel` the running kernel and
    `installed_kernels` the kernel packages' versions (RHEL family); `secure_boot` enabled,
    disabled or unknown, and `key_enrolled` whether DKMS's key is enrolled as a MOK."""
    platform = platform_problem(
        name,
        facts.get("os_family", ""),
        facts.get("distribution", ""),
        facts.get("distribution_release", ""),
        facts.get("distribution_major_version", ""),
    )
    problems = branch_problems(name, branch, variant)
    if platform:
        return [platform, *problems]
    boot = secure_boot_problem(name, secure_boot, key_enrolled)
    problems += [boot] if boot else []
    if facts.get("os_family") == "Debian":
        return problems + debian_problems(name, facts["distribution_release"], variant, components)
    wanted = dnf_module_stream(facts.get("distribution_major_version", ""), branch)
    stream = stream_problem(name, enabled_stream, wanted)
    old_kernel = kernel_problem(name, kernel, installed_kernels or [])
    return problems + [problem for problem in (stream, old_kernel) if problem]
