"""The nvidia_driver role's decisions: branch minimums, refusals, packages, what a node must do."""

from __future__ import annotations

import re

import pytest
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.driver_branch import (
    DEBIAN_COMPONENTS,
    install_plan,
    kernel_problem,
    minimum_branch,
    preflight_problems,
    rpm_version_compare,
    secure_boot_problem,
    stream_offered_problem,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.driver_state import (
    BUILD,
    LOAD,
    NO_HEADERS,
    OK,
    REBOOT,
    action_message,
    apt_components,
    driver_action,
    parse_dnf_module_list,
    parse_dnf_module_state,
    parse_proc_version,
    parse_secure_boot,
)

EL9 = {
    "os_family": "RedHat",
    "distribution": "Rocky",
    "distribution_release": "Blue Onyx",
    "distribution_major_version": "9",
}
EL10 = {**EL9, "distribution": "AlmaLinux", "distribution_major_version": "10"}
BOOKWORM = {
    "os_family": "Debian",
    "distribution": "Debian",
    "distribution_release": "bookworm",
    "distribution_major_version": "12",
}
TRIXIE = {**BOOKWORM, "distribution_release": "trixie", "distribution_major_version": "13"}
UBUNTU = {
    "os_family": "Debian",
    "distribution": "Ubuntu",
    "distribution_release": "noble",
    "distribution_major_version": "24",
}
NON_FREE = {"main", "contrib", "non-free", "non-free-firmware"}


def problems(branch="580", variant="cu130", facts=EL9, components=NON_FREE, stream=""):
    return preflight_problems(
        "node0", branch, variant, facts=facts, components=components, enabled_stream=stream
    )


@pytest.mark.parametrize(
    ("variant", "minimum"),
    [
        ("cu130", 580),
        ("cu132", 580),
        ("cu129", 525),
        ("cu126", 525),
        ("cu121", 525),
        ("cu118", 450),
        ("cpu", None),
    ],
)
def test_minimum_branch_follows_cuda_minor_version_compatibility(variant, minimum):
    assert minimum_branch(variant) == minimum


@pytest.mark.parametrize("variant", ["cu", "cu1", "cu102", "rocm6.2", "CU130", "cu1300", ""])
def test_a_variant_that_is_not_cpu_or_a_known_cuda_build_is_refused(variant):
    with pytest.raises(ValueError, match=f"^{re.escape(variant)}$"):
        minimum_branch(variant)
    assert any(f"nvidia_driver_cuda_variant is '{variant}'" in p for p in problems(variant=variant))


@pytest.mark.parametrize(
    ("branch", "variant", "minimum"),
    [("535", "cu130", 580), ("575", "cu130", 580), ("470", "cu126", 525), ("418", "cu118", 450)],
)
def test_a_branch_older_than_the_cuda_build_needs_is_refused_naming_both(branch, variant, minimum):
    [problem] = problems(branch=branch, variant=variant)
    assert problem.startswith(f"node0: nvidia_driver_branch is {branch}, but {variant}")
    assert f"needs the {minimum} driver branch or newer" in problem


def test_the_refusal_names_the_torch_build_the_branch_runs():
    [problem] = problems(branch="535", variant="cu130")
    assert "(cu126)" in problem


@pytest.mark.parametrize(
    ("branch", "variant"),
    [("580", "cu130"), ("590", "cu130"), ("525", "cu126"), ("580", "cu118"), ("450", "cpu")],
)
def test_a_branch_new_enough_passes(branch, variant):
    assert problems(branch=branch, variant=variant) == []


@pytest.mark.parametrize("branch", ["58", "580.95.05", "latest", "r580", ""])
def test_a_branch_that_is_not_three_digits_is_refused(branch):
    [problem] = problems(branch=branch)
    assert f"nvidia_driver_branch is '{branch}'" in problem


@pytest.mark.parametrize(
    ("facts", "variant", "shipped", "minimum", "way_out"),
    [(BOOKWORM, "cu130", 535, 580, "cu126"), (TRIXIE, "cu130", 550, 580, "cu126")],
)
def test_debian_refuses_a_cuda_build_its_branch_cannot_run(
    facts, variant, shipped, minimum, way_out
):
    [problem] = problems(variant=variant, facts=facts)
    release = facts["distribution_release"]
    assert f"ships the NVIDIA driver branch {shipped}" in problem
    assert f"older than the {minimum} branch that {variant} (CUDA 13.0) needs" in problem
    assert f"Debian {facts['distribution_major_version']} ({release})" in problem
    assert "nvidia_driver_enabled: false" in problem
    assert f"pytorch_cuda_variant: {way_out}" in problem


@pytest.mark.parametrize(
    ("facts", "variant"), [(BOOKWORM, "cu126"), (TRIXIE, "cu128"), (BOOKWORM, "cpu")]
)
def test_debian_accepts_a_cuda_build_its_branch_runs(facts, variant):
    assert problems(variant=variant, facts=facts) == []


@pytest.mark.parametrize(
    ("components", "missing"),
    [
        ({"main"}, "contrib non-free non-free-firmware"),
        ({"main", "non-free-firmware"}, "contrib non-free"),
        ({"main", "contrib", "non-free"}, "non-free-firmware"),
        (set(), "contrib non-free non-free-firmware"),
    ],
)
def test_debian_apt_sources_without_non_free_are_named(components, missing):
    [problem] = problems(variant="cu126", facts=BOOKWORM, components=components)
    assert "comes from the contrib, non-free, non-free-firmware components" in problem
    assert f"Add {missing} to the 'bookworm' entry" in problem


@pytest.mark.parametrize(
    ("facts", "shown"),
    [
        (UBUNTU, "Ubuntu 24"),
        ({**EL9, "distribution_major_version": "8"}, "Rocky 8"),
        (
            {**BOOKWORM, "distribution_release": "bullseye", "distribution_major_version": "11"},
            "Debian 11",
        ),
        ({"os_family": "Suse", "distribution": "SLES"}, "SLES"),
    ],
)
def test_an_unsupported_system_is_refused(facts, shown):
    [problem] = problems(facts=facts)
    assert f"not on {shown}" in problem
    assert "nvidia_driver_enabled: false" in problem


@pytest.mark.parametrize(
    ("stream", "refused"),
    [("", False), ("580-open", False), ("575-open", True), ("580-dkms", True), ("latest", True)],
)
def test_el9_refuses_another_enabled_driver_stream(stream, refused):
    found = problems(stream=stream)
    assert bool(found) == refused
    if refused:
        assert f"has the stream {stream} enabled" in found[0]
        assert "dnf module switch-to nvidia-driver:580-open" in found[0]


def test_el10_has_no_module_streams_to_refuse():
    assert problems(facts=EL10, stream="575-open") == []


KERNEL = "5.14.0-611.5.1.el9_7.x86_64"


# kernel-devel-matched, not kernel-devel-<uname -r>: the mirrors drop older kernels' kernel-devel.
DEVEL = ["kernel-devel-matched", "kernel-headers", "dkms", "nvidia-open"]


@pytest.mark.parametrize(
    ("family", "major", "persistence", "plan"),
    [
        (
            "RedHat",
            "9",
            True,
            {
                "packages": [*DEVEL, "nvidia-persistenced"],
                "dnf_module_stream": "nvidia-driver:580-open",
                "versionlock": "",
            },
        ),
        (
            "RedHat",
            "10",
            False,
            {"packages": DEVEL, "dnf_module_stream": "", "versionlock": "*nvidia*580*"},
        ),
        (
            "Debian",
            "12",
            True,
            {
                "packages": [f"linux-headers-{KERNEL}", "nvidia-driver", "nvidia-persistenced"],
                "dnf_module_stream": "",
                "versionlock": "",
            },
        ),
    ],
    ids=["el9", "el10-no-persistence", "debian"],
)
def test_install_plan_per_system(family, major, persistence, plan):
    assert install_plan(family, major, "580", KERNEL, persistence) == plan


@pytest.mark.parametrize(
    ("installed", "loaded", "nouveau", "headers", "action"),
    [
        ("580.95.05", "580.95.05", False, True, OK),
        ("580.95.05", "", False, True, LOAD),
        ("580.95.05", "", True, True, REBOOT),
        ("580.105.08", "580.95.05", False, True, REBOOT),
        ("580.95.05", "535.261.03", False, False, REBOOT),
        ("", "", False, True, BUILD),
        ("", "", False, False, NO_HEADERS),
        ("", "580.95.05", False, True, BUILD),
    ],
    ids=[
        "loaded",
        "not-loaded",
        "nouveau-holds-the-gpus",
        "newer-installed",
        "older-loaded",
        "not-built",
        "no-headers",
        "not-built-for-this-kernel",
    ],
)
def test_what_the_node_must_do_before_torch_can_use_the_driver(
    installed, loaded, nouveau, headers, action
):
    assert driver_action(installed, loaded, nouveau, headers)[0] == action


def test_a_reboot_the_role_may_not_make_says_how_to_continue():
    action, reason = driver_action("580.95.05", "", True, True)
    message = action_message("node1", action, reason, KERNEL, reboot_allowed=False)
    assert message.startswith("node1: the NVIDIA driver is installed, but nouveau")
    assert "Reboot it and run provision.yml again" in message
    assert "nvidia_driver_reboot: true" in message


def test_a_reboot_that_did_not_help_is_not_asked_for_again():
    action, reason = driver_action("580.105.08", "580.95.05", False, True)
    message = action_message("node1", action, reason, KERNEL, reboot_allowed=True)
    assert "even after the role rebooted the node" in message
    assert "nvidia_driver_reboot" not in message


@pytest.mark.parametrize(
    ("action", "words"),
    [
        (OK, ""),
        (BUILD, "dkms autoinstall"),
        (NO_HEADERS, f"kernel-devel-{KERNEL} or linux-headers-{KERNEL}"),
        (LOAD, "modprobe nvidia"),
    ],
)
def test_every_state_left_unready_has_a_message(action, words):
    message = action_message("node0", action, "the reason", KERNEL, reboot_allowed=False)
    assert (message == "") == (action == OK)
    assert words in message


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build"
            "  (dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:58:49 UTC 2025\n"
            "GCC version:  gcc version 11.5.0 20240719 (Red Hat 11.5.0-5) (GCC)\n",
            "580.95.05",
        ),
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 16 2025\n",
            "535.261.03",
        ),
        ("", ""),
    ],
    ids=["open-el9", "proprietary-debian", "none"],
)
def test_the_loaded_version_is_read_from_proc(text, version):
    assert parse_proc_version(text) == version


@pytest.mark.parametrize(
    ("text", "stream"),
    [
        (
            "[nvidia-driver]\nname=nvidia-driver\nstream=580-open\nprofiles=\nstate=enabled\n",
            "580-open",
        ),
        ("[nvidia-driver]\nname=nvidia-driver\nstream=\nprofiles=\nstate=\n", ""),
        ("[nvidia-driver]\nname=nvidia-driver\nstream=575-open\nstate=disabled\n", ""),
        ("", ""),
        ("not an ini file", ""),
    ],
    ids=["enabled", "reset", "disabled", "absent", "garbage"],
)
def test_the_enabled_dnf_stream_is_read_from_modules_d(text, stream):
    assert parse_dnf_module_state(text) == stream


MIRROR = "http://deb.debian.org/debian"


@pytest.mark.parametrize(
    ("sources", "components"),
    [
        ({"/etc/apt/sources.list": f"deb {MIRROR} bookworm main\n"}, {"main"}),
        (
            {
                "/etc/apt/sources.list": (
                    f"deb {MIRROR} bookworm main contrib non-free non-free-firmware\n"
                    f"deb-src {MIRROR} bookworm main\n"
                    f"deb {MIRROR} bookworm-updates main # only updates\n"
                    "# deb http://deb.debian.org/debian bookworm extra\n"
                )
            },
            {"main", "contrib", "non-free", "non-free-firmware"},
        ),
        (
            {
                "/etc/apt/sources.list.d/local.list": (
                    f"deb [arch=amd64 signed-by=/usr/share/keyrings/d.gpg] {MIRROR} bookworm "
                    "non-free\n"
                )
            },
            {"non-free"},
        ),
        (
            {
                "/etc/apt/sources.list.d/debian.sources": (
                    "Types: deb deb-src\n"
                    f"URIs: {MIRROR}\n"
                    "Suites: trixie trixie-updates\n"
                    "Components: main contrib\n"
                    " non-free non-free-firmware\n"
                    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
                    "\n"
                    "# security\n"
                    "Types: deb\n"
                    "URIs: http://security.debian.org/debian-security\n"
                    "Suites: trixie-security\n"
                    "Components: main\n"
                )
            },
            {"main", "contrib", "non-free", "non-free-firmware"},
        ),
        (
            {
                "/etc/apt/sources.list.d/off.sources": (
                    f"Enabled: no\nTypes: deb\nURIs: {MIRROR}\n"
                    "Suites: trixie\nComponents: non-free\n"
                )
            },
            set(),
        ),
    ],
    ids=["main-only", "one-line-all", "options", "deb822", "deb822-disabled"],
)
def test_apt_components_of_the_release(sources, components):
    suite = "trixie" if any(path.endswith(".sources") for path in sources) else "bookworm"
    assert apt_components(sources, suite) == components


@pytest.mark.parametrize(
    ("left", "right", "order"),
    [
        ("5.14.0-611.5.1.el9_7.x86_64", "5.14.0-570.12.1.el9_6.x86_64", 1),
        ("5.14.0-570.12.1.el9_6.x86_64", "5.14.0-570.12.1.el9_6.x86_64", 0),
        ("5.14.0-70.13.1.el9_0.x86_64", "5.14.0-162.6.1.el9_1.x86_64", -1),
        ("6.12.0-55.el10.x86_64", "5.14.0-611.el9.x86_64", 1),
        ("1.0", "1.0.1", -1),
        ("1.0a", "1.0", 1),
        ("1.0~rc1", "1.0", -1),
        ("2.0", "2.a", 1),
    ],
)
def test_rpm_version_order(left, right, order):
    assert rpm_version_compare(left, right) == order
    assert rpm_version_compare(right, left) == -order


OLD = "5.14.0-570.12.1.el9_6.x86_64"
NEW = "5.14.0-611.5.1.el9_7.x86_64"


def test_a_node_running_an_older_kernel_than_its_newest_is_told_to_reboot_first():
    found = preflight_problems(
        "node0",
        "580",
        "cu130",
        facts=EL9,
        components=set(),
        enabled_stream="",
        kernel=OLD,
        installed_kernels=[OLD, NEW],
    )
    assert len(found) == 1
    assert f"runs the kernel {OLD}, but {NEW} is installed and newer" in found[0]
    assert f"Reboot the node into {NEW} first" in found[0]
    assert f"kernel-devel-{OLD}" in found[0]


@pytest.mark.parametrize(
    ("running", "installed"),
    [(NEW, [OLD, NEW]), (NEW, [NEW]), (NEW, []), ("6.18.1-amd64", [])],
    ids=["newest-of-two", "only-one", "container-no-kernel-package", "foreign-kernel"],
)
def test_a_node_running_its_newest_kernel_passes(running, installed):
    assert kernel_problem("node0", running, installed) == ""


@pytest.mark.parametrize(
    ("mokutil", "efivar", "state"),
    [
        ("SecureBoot enabled\n", None, "enabled"),
        ("SecureBoot disabled\nPlatform is in Setup Mode\n", None, "disabled"),
        ("EFI variables are not supported on this system\n", None, "disabled"),
        ("", b"\x06\x00\x00\x00\x01", "enabled"),
        ("", b"\x06\x00\x00\x00\x00", "disabled"),
        ("", None, "unknown"),
    ],
)
def test_secure_boot_state(mokutil, efivar, state):
    assert parse_secure_boot(mokutil, efivar) == state


@pytest.mark.parametrize("facts", [EL9, BOOKWORM], ids=["el9", "debian"])
def test_secure_boot_without_an_enrolled_key_is_refused_with_the_steps(facts):
    found = preflight_problems(
        "node1",
        "580",
        "cu130",
        facts=facts,
        components=set(DEBIAN_COMPONENTS),
        enabled_stream="",
        secure_boot="enabled",
    )
    refusal = [problem for problem in found if "Secure Boot" in problem]
    assert len(refusal) == 1
    assert "mokutil --import /var/lib/dkms/mok.pub" in refusal[0]
    assert "nvidia_driver_secure_boot_key_enrolled: true" in refusal[0]


@pytest.mark.parametrize(
    ("state", "enrolled"), [("enabled", True), ("disabled", False), ("unknown", False)]
)
def test_secure_boot_off_or_enrolled_passes(state, enrolled):
    assert secure_boot_problem("node1", state, enrolled) == ""


# `dnf module list nvidia-driver` of dnf 4.14 against the sandbox's EL9 CUDA mirror.
MODULE_LIST = """CUDA repository (sandbox)
Name           Stream        Profiles                      Summary
nvidia-driver  575-open      default [d], fm, ks, src      Nvidia driver for 575-open branch
nvidia-driver  580-open [e]  default [d], fm, ks, src      Nvidia driver for 580-open branch

Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled
"""


def test_the_offered_streams_are_read_from_dnfs_table():
    assert parse_dnf_module_list(MODULE_LIST) == ["575-open", "580-open"]


def test_a_mirror_without_module_metadata_is_refused_naming_modules_yaml():
    problem = stream_offered_problem("node0", "nvidia-driver:580-open", [])
    assert "offers no stream" in problem
    assert "modules.yaml" in problem
    assert "nvidia-open stays hidden" in problem


def test_a_branch_the_mirror_lacks_is_refused_naming_what_it_has():
    problem = stream_offered_problem("node0", "nvidia-driver:590-open", ["575-open", "580-open"])
    assert "offers the streams 575-open, 580-open" in problem
    assert stream_offered_problem("node0", "nvidia-driver:580-open", ["580-open"]) == ""
