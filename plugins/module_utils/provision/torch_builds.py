"""PyTorch's CUDA builds: which variants each release ships, and the NCCL each one bundles.

From the Release Compatibility Matrix in pytorch/pytorch's RELEASE.md (stable and experimental
CUDA builds alike: both are published on download.pytorch.org). The NCCL versions are those of
the nvidia-nccl-cu* wheel each build requires; torch uses that copy, never the system's.
"""

from __future__ import annotations

import re

# torch minor release -> {variant: NCCL version the build bundles, or None where not recorded}
TORCH_BUILDS = {
    "2.14": {"cu126": "2.29.3", "cu130": "2.30.7", "cu132": "2.30.7", "cpu": None},
    "2.13": {"cu126": "2.29.3", "cu130": "2.29.7", "cu132": "2.29.7", "cpu": None},
    "2.12": {"cu126": "2.29.3", "cu130": "2.29.7", "cu132": "2.29.7", "cpu": None},
    "2.11": {"cu126": "2.28.9", "cu128": "2.28.9", "cu130": "2.28.9", "cpu": None},
    "2.10": {"cu126": "2.27.5", "cu128": "2.27.5", "cu130": "2.28.9", "cpu": None},
    "2.9": {"cu126": None, "cu128": None, "cu130": None, "cpu": None},
    "2.8": {"cu126": None, "cu128": None, "cu129": None, "cpu": None},
    "2.7": {"cu118": None, "cu126": None, "cu128": None, "cpu": None},
    "2.6": {"cu118": None, "cu124": None, "cu126": None, "cpu": None},
}


VARIANT = re.compile(r"^(cpu|cu[0-9]{3})$")


VERSION = re.compile(r"^([0-9]+)\.([0-9]+)(\.[0-9]+)?([+.].*)?$")


def minor(torch_version: str) -> str:
    match = VERSION.match(torch_version or "")
    return f"{match.group(1)}.{match.group(2)}" if match else ""


def cuda_version(variant: str) -> str:
    """'13.0' for cu130, '' for cpu."""
    return "" if variant == "cpu" else f"{variant[2:-1]}.{variant[-1]}"


def variant_problem(torch_version: str, variant: str) -> str | None:
    """Why VARIANT cannot be installed with torch TORCH_VERSION; None when it can."""
    if not VARIANT.match(variant or ""):
        return f"pytorch_cuda_variant is '{variant}'; expected cpu or cuXYZ (cu130 is CUDA 13.0)"
    release = minor(torch_version)
    if not release:
        return f"pytorch_torch_version is '{torch_version}'; expected a version such as 2.14.1"
    builds = TORCH_BUILDS.get(release)
    if builds is None or variant in builds:
        return None  # a release newer than this table: PyTorch's index decides
    return (
        f"torch {torch_version} has no {variant} build: PyTorch {release} ships "
        f"{', '.join(builds)}. Set pytorch_cuda_variant to one of them"
    )


def torch_nccl(torch_version: str, variant: str) -> str | None:
    """The NCCL version the build bundles, where recorded."""
    return TORCH_BUILDS.get(minor(torch_version), {}).get(variant)


_BUILD = re.compile(r"^([0-9]+\.[0-9]+\.[0-9]+)-([0-9A-Za-z.]+)\+cuda([0-9]+\.[0-9]+)$")


def parse_builds(lines: list[str]) -> list[tuple[str, str, str]]:
    """NVIDIA's package versions ('2.30.7-1+cuda13.2') as (nccl, release, cuda), unique."""
    found = []
    for line in lines:
        match = _BUILD.match(line.strip())
        if match and match.groups() not in found:
            found.append(match.groups())
    return found


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"[0-9]+", version))


def choose_nccl(torch_version: str, variant: str, available: list[str]) -> dict:
    """The system NCCL build to install: the same NCCL version as torch's, built for torch's CUDA
    major (its exact minor first), when the repository has one; otherwise the newest NCCL built
    for torch's CUDA version, with a note that the two differ."""
    cuda = cuda_version(variant)
    wanted = torch_nccl(torch_version, variant)
    builds = parse_builds(available)
    result = {"torch_nccl": wanted or "", "cuda": cuda}
    if not cuda:
        return result | {"problem": "torch is the CPU build: there is no NCCL to match"}
    major = cuda.split(".")[0]
    same_major = [build for build in builds if build[2].split(".")[0] == major]

    def rank(build: tuple[str, str, str]) -> tuple:
        return (build[2] == cuda, _key(build[2]), _key(build[1]))

    matching = [build for build in same_major if wanted and build[0] == wanted]
    if matching:
        build = max(matching, key=rank)
        note = f"system NCCL {build[0]} (CUDA {build[2]}) is the NCCL torch bundles"
        return result | _build(build) | {"matches": True, "note": note}
    for_cuda = [build for build in builds if build[2] == cuda]
    if not for_cuda:
        return result | {
            "problem": (
                f"the CUDA repository has no libnccl built for CUDA {cuda} "
                f"(torch {torch_version} {variant}); set nccl_version and nccl_cuda_version"
            )
        }
    build = max(for_cuda, key=lambda item: (_key(item[0]), _key(item[1])))
    note = (
        f"system NCCL {build[0]} differs from the NCCL torch bundles "
        f"({wanted or 'not recorded for this build'}): the repository has no "
        f"{wanted or 'matching'} build for CUDA {major}.x. Training uses torch's copy; "
        "anything built against the system copy (nccl-tests, extensions) tests another NCCL"
    )
    return result | _build(build) | {"matches": False, "note": note}


def _build(build: tuple[str, str, str]) -> dict:
    return {
        "version": build[0],
        "release": build[1],
        "cuda": build[2],
        "package_version": f"{build[0]}-{build[1]}+cuda{build[2]}",
    }


def installed_query(has_dnf: bool) -> list[str]:
    """The command that prints the installed system NCCL's VERSION-RELEASE."""
    if has_dnf:
        return ["rpm", "-q", "--queryformat", "%{VERSION}-%{RELEASE}\n", "libnccl"]
    return ["dpkg-query", "--show", "--showformat", "${Version}\n", "libnccl2"]


def installed_build(text: str) -> dict:
    """The system NCCL from the package database's 'VERSION-RELEASE' of libnccl / libnccl2
    ('2.28.9-1+cuda13.0'), or {} when it is not installed."""
    builds = parse_builds(text.splitlines())
    return _build(builds[0]) if builds else {}


def madison_versions(text: str) -> list[str]:
    """The version column of `apt-cache madison` lines ('libnccl2 | 2.30.7-1+cuda13.2 | URL')."""
    return [line.split("|")[1].strip() for line in text.splitlines() if line.count("|") >= 2]


def report_line(torch_nccl: str, system: dict) -> str:
    """One line on both NCCLs of a node, and whether they are the same version."""
    if not system:
        return f"NCCL: torch's {torch_nccl or 'none'}; no system NCCL installed"
    same = "the same version" if system["version"] == torch_nccl else "DIFFERENT versions"
    return (
        f"NCCL: torch's {torch_nccl or 'none'}, system libnccl {system['version']} "
        f"(CUDA {system['cuda']}): {same}"
    )
