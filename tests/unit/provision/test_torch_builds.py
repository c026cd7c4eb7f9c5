"""PyTorch's CUDA variants per release, and the system NCCL build matched to torch's."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.torch_builds import (
    choose_nccl,
    installed_build,
    madison_versions,
    parse_builds,
    report_line,
    torch_nccl,
    variant_problem,
)

WHEELHOUSE = Path(__file__).resolve().parents[3] / ".cache" / "wheelhouse"


@pytest.mark.parametrize(
    ("version", "variant"),
    [
        ("2.14.1", "cu130"),
        ("2.14.1", "cu126"),
        ("2.14.1", "cu132"),
        ("2.14.1", "cpu"),
        ("2.11.0", "cu128"),
        ("2.7.1", "cu118"),
        ("2.99.0", "cu999"),
    ],
)
def test_variants_that_exist_pass(version, variant):
    assert variant_problem(version, variant) is None


def test_cu128_with_a_torch_that_no_longer_ships_it_names_the_choices():
    problem = variant_problem("2.14.1", "cu128")
    assert problem.startswith("torch 2.14.1 has no cu128 build")
    assert "PyTorch 2.14 ships cu126, cu130, cu132, cpu" in problem


@pytest.mark.parametrize("variant", ["cuda13", "cu13.0", "CU130", "", "rocm7.2"])
def test_a_variant_that_is_not_a_variant_is_named(variant):
    assert "expected cpu or cuXYZ" in variant_problem("2.14.1", variant)


def test_a_torch_version_that_is_not_a_version_is_named():
    assert "expected a version" in variant_problem("latest", "cu130")


def test_the_table_agrees_with_the_pinned_torch_wheel():
    """The NCCL of the table is the nvidia-nccl wheel that the real torch wheel requires."""
    wheels = sorted(WHEELHOUSE.glob("torch-*.whl"))
    if not wheels:
        pytest.skip("no torch wheel in .cache/wheelhouse (make wheelhouse)")
    for wheel in wheels:
        version = wheel.name.split("-")[1]
        with zipfile.ZipFile(wheel) as archive:
            meta = archive.read(f"torch-{version}.dist-info/METADATA").decode()
        cuda = re.search(r"^Requires-Dist: cuda-toolkit\[[^]]*\]==([0-9]+)\.([0-9]+)", meta, re.M)
        nccl = re.search(r"^Requires-Dist: nvidia-nccl-cu[0-9]+==([0-9.]+)", meta, re.M)
        variant = f"cu{cuda.group(1)}{cuda.group(2)}"
        assert variant_problem(version, variant) is None
        assert torch_nccl(version, variant) == nccl.group(1)


DNF = [
    "2.27.5-1+cuda12.9",
    "2.28.9-1+cuda13.0",
    "2.30.7-1+cuda13.2",
    "2.30.7-1+cuda12.9",
    "2.29.3-1+cuda13.1",
    "2.30.7-1+cuda13.3",
]


def test_the_build_of_torchs_nccl_is_chosen_for_torchs_cuda_major():
    choice = choose_nccl("2.14.1", "cu130", DNF)
    assert choice["matches"] is True
    assert choice["package_version"] == "2.30.7-1+cuda13.3"
    assert choice["torch_nccl"] == "2.30.7"


def test_the_exact_cuda_minor_is_preferred_when_it_exists():
    choice = choose_nccl("2.14.1", "cu130", [*DNF, "2.30.7-1+cuda13.0"])
    assert choice["package_version"] == "2.30.7-1+cuda13.0"


def test_without_torchs_nccl_the_newest_for_its_cuda_is_chosen_and_the_difference_said():
    choice = choose_nccl("2.14.1", "cu130", ["2.27.3-1+cuda13.0", "2.28.9-1+cuda13.0"])
    assert choice["matches"] is False
    assert choice["package_version"] == "2.28.9-1+cuda13.0"
    assert "system NCCL 2.28.9 differs from the NCCL torch bundles (2.30.7)" in choice["note"]


def test_no_build_for_the_cuda_version_is_a_problem():
    choice = choose_nccl("2.14.1", "cu130", ["2.27.5-1+cuda12.9"])
    assert "no libnccl built for CUDA 13.0" in choice["problem"]


def test_the_cpu_build_has_no_nccl_to_match():
    assert "CPU build" in choose_nccl("2.14.1", "cpu", DNF)["problem"]


def test_apt_madison_and_junk_lines_are_read():
    text = " libnccl2 | 2.30.7-1+cuda13.2 | https://x/debian12/x86_64  Packages\ngarbage\n"
    assert parse_builds(madison_versions(text)) == [("2.30.7", "1", "13.2")]


def test_the_installed_nccl_is_read_from_the_package_database():
    assert installed_build("2.28.9-1+cuda13.0\n")["cuda"] == "13.0"
    assert installed_build("package libnccl is not installed\n") == {}


def test_both_nccls_are_reported_and_a_difference_is_said():
    system = installed_build("2.28.9-1+cuda13.0")
    line = report_line("2.30.7", system)
    assert line == ("NCCL: torch's 2.30.7, system libnccl 2.28.9 (CUDA 13.0): DIFFERENT versions")
    same = report_line("2.28.9", system)
    assert same.endswith("the same version")
    assert report_line("2.30.7", {}).endswith("no system NCCL installed")
