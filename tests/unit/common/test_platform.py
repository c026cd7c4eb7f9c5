"""Which releases the preflight lets through, from real os-release files."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common import platform
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.platform import (
    RHEL_PLATFORM_PYTHON,
    major_version,
    parse_os_release,
    pinned_interpreter,
    platform_problem,
)

DATA = Path(__file__).parents[1] / "data" / "os-release"


def read(name: str) -> dict[str, str]:
    return parse_os_release((DATA / name).read_text())


@pytest.mark.parametrize(
    ("name", "family", "major"),
    [
        ("centos-stream-9", "rhel", "9"),
        ("rhel-9.6", "rhel", "9"),
        ("almalinux-9.6", "rhel", "9"),
        ("debian-12", "debian", "12"),
        ("ubuntu-24.04", "ubuntu", "24"),
    ],
)
def test_supported_releases_pass(name, family, major):
    fields = read(name)
    assert platform.family(fields) == family
    assert major_version(fields) == major
    assert platform_problem(fields, "node0") is None


@pytest.mark.parametrize("name", ["rocky-8.10", "rhel-8.10", "centos-stream-8"])
def test_el8_is_refused_with_the_python_reason(name):
    problem = platform_problem(read(name), "node1")
    assert problem.startswith("node1: ")
    assert "(EL8) is not supported" in problem
    assert "Python 3.6" in problem
    assert "#82068" in problem
    assert "EL9" in problem
    assert "Nothing was changed" in problem


def test_the_release_is_named_as_its_vendor_names_it():
    problem = platform_problem(read("rocky-8.10"), "gpu3")
    assert "Rocky Linux 8.10 (Green Obsidian)" in problem


def test_el10_is_refused_until_its_path_is_pinned():
    problem = platform_problem(read("centos-stream-10"), "node0")
    assert "EL10 is not supported yet" in problem
    assert "CDF6BA43" in problem


def test_another_system_is_refused_with_the_supported_list():
    problem = platform_problem(read("fedora-42"), "node0")
    assert "Fedora Linux 42 (Server Edition) is not supported" in problem
    assert "Rocky Linux 9" in problem
    assert "Debian 12" in problem


def test_no_os_release_at_all_is_named():
    problem = platform_problem({}, "node0")
    assert "an unknown system" in problem


def test_quoting_and_comments_follow_os_release():
    fields = parse_os_release(
        '# a comment\nNAME=\'Some OS\'\nVERSION_ID="9.2"\nID=rocky\nID_LIKE="rhel centos fedora"\n'
    )
    assert fields["NAME"] == "Some OS"
    assert platform_problem(fields, "n") is None


@pytest.mark.parametrize("name", ["centos-stream-9", "rhel-9.6", "almalinux-9.6"])
def test_the_platform_python_is_pinned_on_the_rhel_family(name):
    assert pinned_interpreter(read(name), "", RHEL_PLATFORM_PYTHON) == "/usr/bin/python3"


@pytest.mark.parametrize("name", ["debian-12", "ubuntu-24.04"])
def test_discovery_is_left_alone_elsewhere(name):
    assert pinned_interpreter(read(name), "", "/usr/bin/python3") == ""


def test_an_interpreter_the_inventory_names_wins():
    fields = read("rhel-9.6")
    assert pinned_interpreter(fields, "/opt/py/bin/python3", "/usr/bin/python3") == ""
