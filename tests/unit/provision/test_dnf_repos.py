"""Which of a release package's repositories an offline node points at a mirror or turns off."""

from __future__ import annotations

from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.dnf_repos import (
    offline_plan,
    parse_repo_file,
    plan_edits,
)

# epel-release 9's repository files, as it installs them (sections and flags; comments cut).
EPEL_REPO = """[epel]
name=Extra Packages for Enterprise Linux $releasever - $basearch
#baseurl=https://download.example/pub/epel/$releasever/Everything/$basearch/
metalink=https://mirrors.fedoraproject.org/metalink?repo=epel-$releasever&arch=$basearch
enabled=1
gpgcheck=1
gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-$releasever

[epel-debuginfo]
metalink=https://mirrors.fedoraproject.org/metalink?repo=epel-debug-$releasever&arch=$basearch
enabled=0

[epel-source]
metalink=https://mirrors.fedoraproject.org/metalink?repo=epel-source-$releasever&arch=$basearch
enabled=0
"""
OPENH264_REPO = """[epel-cisco-openh264]
name=Extra Packages for Enterprise Linux $releasever openh264 (From Cisco) - $basearch
metalink=https://mirrors.fedoraproject.org/metalink?repo=epel-cisco-openh264-$releasever&arch=$basearch
type=rpm
enabled=1
gpgcheck=1

[epel-cisco-openh264-debuginfo]
metalink=https://mirrors.fedoraproject.org/metalink?repo=epel-cisco-openh264-debug-$releasever&arch=$basearch
enabled=0
"""
TESTING_REPO = """[epel-testing]
metalink=https://mirrors.fedoraproject.org/metalink?repo=testing-epel$releasever&arch=$basearch
enabled=0
"""
MIRROR = "file:///srv/mirror/epel/"


def sections(epel_text: str = EPEL_REPO) -> list[dict[str, object]]:
    return (
        parse_repo_file("/etc/yum.repos.d/epel.repo", epel_text)
        + parse_repo_file("/etc/yum.repos.d/epel-cisco-openh264.repo", OPENH264_REPO)
        + parse_repo_file("/etc/yum.repos.d/epel-testing.repo", TESTING_REPO)
    )


def names(items: list[dict[str, object]]) -> list[str]:
    return [str(item["name"]) for item in items]


def test_every_repository_is_read_with_its_flags():
    read = sections()
    assert names(read) == [
        "epel",
        "epel-debuginfo",
        "epel-source",
        "epel-cisco-openh264",
        "epel-cisco-openh264-debuginfo",
        "epel-testing",
    ]
    assert read[0]["enabled"] is True
    assert read[1]["enabled"] is False
    assert read[3]["remote"].startswith("https://mirrors.fedoraproject.org/metalink")


def test_an_enabled_public_repository_without_a_mirror_is_turned_off():
    plan = offline_plan(sections(), {"epel": MIRROR})
    # epel gets its mirror; cisco-openh264 would reach the metalink; the rest are off already.
    assert names(plan["point"]) == ["epel"]
    assert names(plan["disable"]) == ["epel-cisco-openh264"]
    edits = plan_edits(plan)
    assert edits[-1] == {
        "file": "/etc/yum.repos.d/epel-cisco-openh264.repo",
        "section": "epel-cisco-openh264",
        "option": "enabled",
        "value": "0",
        "state": "present",
    }
    assert {(e["option"], e["state"]) for e in edits[:3]} == {
        ("baseurl", "present"),
        ("metalink", "absent"),
        ("mirrorlist", "absent"),
    }


def test_a_repository_given_a_mirror_is_pointed_at_it_instead():
    mirror = "https://mirror.example.com/openh264/"
    plan = offline_plan(sections(), {"epel": MIRROR, "epel-cisco-openh264": mirror})
    assert names(plan["point"]) == ["epel", "epel-cisco-openh264"]
    assert plan["disable"] == []


def test_a_repository_already_on_its_mirror_needs_nothing():
    pointed = EPEL_REPO.replace(
        "metalink=https://mirrors.fedoraproject.org/metalink?repo=epel-$releasever&arch=$basearch",
        f"baseurl={MIRROR}",
    )
    plan = offline_plan(sections(pointed), {"epel": MIRROR})
    assert plan["point"] == []
    assert names(plan["disable"]) == ["epel-cisco-openh264"]


def test_a_site_baseurl_without_a_metalink_is_left_alone():
    own = OPENH264_REPO.replace("metalink=", "baseurl=https://site.example/openh264/\n#")
    read = parse_repo_file("/etc/yum.repos.d/epel-cisco-openh264.repo", own)
    assert offline_plan(read, {"epel": MIRROR}) == {"point": [], "disable": []}


def test_a_broken_file_contributes_nothing():
    assert parse_repo_file("/etc/yum.repos.d/x.repo", "enabled=1\n[") == []
