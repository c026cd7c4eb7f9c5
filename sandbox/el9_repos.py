"""Local, signed RPM repositories like an EL9 node's, for the sandbox's EL9-like nodes.

The sandbox reaches no Rocky, EPEL or NVIDIA mirror, and no EL9 image can be pulled, so the
roles' RHEL-family tasks (dnf, rpm, module streams, versionlock, yum repositories, rpm_key)
would never run. This builds, from Debian's rpm 4.18, rpmbuild and createrepo_c, what such
mirrors serve to the sandbox's EL9-like nodes (Debian root filesystems with Debian's dnf 4.14,
see sandbox/roles/sandbox_cluster): every package signed with a test key made here, every
repository's metadata made by createrepo_c. The nodes mount --out at /srv/el9-repos, and the
repositories' baseurls are file:///srv/el9-repos/<path>/.

It runs our tasks' logic and dnf's behaviour for real, NOT Red Hat's packages. Most packages
are empty stand-ins (shims): firewalld, slurm, openssh-server and the like install nothing,
and their real programs are Debian's, preinstalled in the node image. The packages with real
content are rocky-release (os-release, the release files, the repository files and the key),
epel-release (EPEL 9's repository files, as epel-release 9-8 has them), dnf-plugins-core and
python3-dnf-plugin-versionlock (Debian's dnf-plugins-core plugin files, taken from the
controller's dnf-plugins-core package), and libnccl / libnccl-devel (the real NCCL library and
headers that torch's nvidia-nccl wheel ships).

    rocky/baseos, rocky/appstream, rocky/crb, rocky/extras   like Rocky Linux 9.5's
    epel                                                     like EPEL 9's
    cuda/rhel9/x86_64            like NVIDIA's: libnccl(-devel) <wheel's NCCL> and 2.28.9 (a
                                 second version number on the same bytes, to test a re-pin),
                                 nvidia-open and nvidia-persistenced in the dnf module streams
                                 nvidia-driver:580-open and :575-open (no default stream)
    cuda-nomodules/rhel9/x86_64  the same packages without module metadata (a broken mirror)
    test-only                    RPM files, no repository: kernel-core newer than the running
                                 kernel and kernel-core of the running kernel
    RPM-GPG-KEY-torch-cluster-sandbox, fingerprint.txt   the test key and its fingerprint

    python sandbox/el9_repos.py --wheel .cache/wheelhouse/nvidia_nccl_cu13-*.whl \
        --out .cache/el9-repos

Needs Debian's rpm, createrepo-c, gpg and dnf-plugins-core packages on the controller.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

SERVED_AT = "/srv/el9-repos"
KEY_NAME = "RPM-GPG-KEY-torch-cluster-sandbox"
SIGNER = "torch-cluster sandbox EL9 repositories"
PLUGINS = Path("/usr/lib/python3/dist-packages")
CUDA = "13.0"
CUDA_REPO = Path("cuda/rhel9/x86_64")
# NCCL: the wheel's version, and a second label on the same bytes to test a re-pin.
NCCL_SECOND = "2.28.9"
# The nvidia-driver module's streams: stream -> driver version (NVIDIA's epoch is 3).
DRIVER_STREAMS = {"580-open": "580.95.05", "575-open": "575.64.05"}
DRIVER_EPOCH = "3"

ROCKY_RELEASE = "Rocky Linux release 9.5 (Blue Onyx)\n"
OS_RELEASE = """\
NAME="Rocky Linux"
VERSION="9.5 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.5"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.5 (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
VENDOR_NAME="RESF"
VENDOR_URL="https://resf.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
SUPPORT_END="2032-05-31"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"
ROCKY_SUPPORT_PRODUCT_VERSION="9.5"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="9.5"
"""


def rocky_repo(section: str, title: str, enabled: bool) -> str:
    return (
        f"[{section}]\nname=Rocky Linux $releasever - {title}\n"
        f"baseurl=file://{SERVED_AT}/rocky/{section}/\n"
        f"gpgcheck=1\nenabled={int(enabled)}\ncountme=1\nmetadata_expire=6h\n"
        "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9\n"
    )


def epel_repo(section: str, title: str, repo: str, enabled: bool, extra: str = "") -> str:
    """One section of epel-release 9's repository files (the real metalinks, unreachable here:
    the epel role points the repository at a mirror)."""
    return (
        f"[{section}]\nname=Extra Packages for Enterprise Linux $releasever{title}\n"
        f"metalink=https://mirrors.fedoraproject.org/metalink?repo={repo}"
        "&arch=$basearch&infra=$infra&content=$contentdir\n"
        f"enabled={int(enabled)}\ngpgcheck=1\n{extra}"
        "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-$releasever\n"
    )


def epel_files() -> dict[str, str]:
    def three(prefix: str, title: str, repos: tuple[str, str, str], enabled: bool) -> str:
        kinds = ((" - $basearch", True), (" - $basearch - Debug", False))
        kinds += ((" - $basearch - Source", False),)
        return "\n".join(
            epel_repo(
                f"{prefix}{suffix}",
                f"{title}{kind}",
                repo,
                enabled and main,
                "countme=1\n" if main and prefix == "epel" else "",
            )
            for (kind, main), suffix, repo in zip(
                kinds, ("", "-debuginfo", "-source"), repos, strict=True
            )
        )

    cisco = "\n".join(
        f"[epel-cisco-openh264{suffix}]\n"
        f"name=Extra Packages for Enterprise Linux $releasever openh264 (From Cisco) - "
        f"$basearch{title}\n"
        f"metalink=https://mirrors.fedoraproject.org/metalink?repo={repo}"
        "&arch=$basearch\ntype=rpm\n"
        f"enabled={int(not suffix)}\ngpgcheck=1\n"
        "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-$releasever\n"
        "repo_gpgcheck=0\nmetadata_expire=14d\nskip_if_unavailable=True\n"
        for suffix, title, repo in (
            ("", "", "epel-cisco-openh264-$releasever"),
            ("-debuginfo", " - Debug", "epel-cisco-openh264-debug-$releasever"),
            ("-source", " - Source", "epel-cisco-openh264-source-$releasever"),
        )
    )
    return {
        "/etc/yum.repos.d/epel.repo": three(
            "epel",
            "",
            ("epel-$releasever", "epel-debug-$releasever", "epel-source-$releasever"),
            True,
        ),
        "/etc/yum.repos.d/epel-testing.repo": three(
            "epel-testing",
            " - Testing",
            (
                "testing-epel$releasever",
                "testing-debug-epel$releasever",
                "testing-source-epel$releasever",
            ),
            False,
        ),
        "/etc/yum.repos.d/epel-cisco-openh264.repo": cisco,
    }


@dataclass
class Package:
    """One binary RPM: its files (path -> text, bytes or a source file), symlinks (path ->
    target) and dependencies. No files: a shim."""

    name: str
    version: str
    release: str
    summary: str
    arch: str = "noarch"
    epoch: str = ""
    files: dict[str, str | bytes | Path] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    config: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    post: str = ""

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.release}.{self.arch}.rpm"

    @property
    def nevra(self) -> str:
        return f"{self.name}-{self.epoch or 0}:{self.version}-{self.release}.{self.arch}"


MARIADB_EL9_SOCKET = """# EL9's socket, as its mariadb-server.cnf sets it (sandbox stand-in)
[mysqld]
socket=/var/lib/mysql/mysql.sock
[client]
socket=/var/lib/mysql/mysql.sock
"""

# The stand-ins run Debian's binaries: Debian's slurmdbd (its MariaDB client library) looks for
# the server on Debian's socket whatever the [client] setting, where EPEL's, built against
# EL9's library, looks on EL9's. A link there to EL9's socket, made at every boot.
MARIADB_DEBIAN_SOCKET_LINK = """# Debian's socket path, for the Debian binaries (sandbox)
d /run/mysqld 0755 mysql mysql -
L+ /run/mysqld/mysqld.sock - - - - /var/lib/mysql/mysql.sock
"""


def shim(name: str, version: str, release: str, repo: str, **kwargs: object) -> Package:
    has = "only its distribution settings" if kwargs.get("files") else "no files"
    summary = f"Sandbox stand-in for {repo}'s {name}: {has}, the node image has Debian's"
    return Package(name, version, release, summary, **kwargs)  # type: ignore[arg-type]


def spec_text(package: Package, stage: Path) -> str:
    lines = [
        f"Name: {package.name}",
        f"Version: {package.version}",
        f"Release: {package.release}",
        f"Summary: {package.summary}",
        "License: MIT",
        f"BuildArch: {package.arch}",
        # Debian's libraries are dpkg's, not rpm's: no automatic requirements.
        "AutoReqProv: no",
    ]
    if package.epoch:
        lines.append(f"Epoch: {package.epoch}")
    lines += [f"Requires: {item}" for item in package.requires]
    lines += [f"Provides: {item}" for item in package.provides]
    lines += ["%description", package.summary, "%install"]
    if package.files or package.symlinks:
        lines.append(f"cp -a {stage}/. %{{buildroot}}/")
    if package.post:
        lines += ["%post", package.post]
    lines.append("%files")
    for path in sorted([*package.files, *package.symlinks]):
        lines.append(f"%config(noreplace) {path}" if path in package.config else path)
    return "\n".join(lines) + "\n"


RPMBUILD_DEFINES = {
    # gzip level 1: libnccl is some 250 MB, and xz would take minutes.
    "_binary_payload": "w1.gzdio",
    # No stripping, compressing or debuginfo: the files are packaged as they are.
    "__os_install_post": "%{nil}",
    "debug_package": "%{nil}",
    "_build_id_links": "none",
    "_buildhost": "torch-cluster-sandbox",
    "use_source_date_epoch_as_buildtime": "1",
    "clamp_mtime_to_source_date_epoch": "1",
}


def build(package: Package, work: Path, out: Path) -> Path:
    """rpmbuild one package from generated spec text into out."""
    stage = work / "stage" / package.filename
    for path, content in package.files.items():
        target = stage / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            try:
                os.link(content, target)
            except OSError:  # another filesystem
                shutil.copy2(content, target)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    for path, link in package.symlinks.items():
        target = stage / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link, target)
    spec = work / "specs" / f"{package.filename}.spec"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(spec_text(package, stage))
    topdir = work / "rpmbuild" / package.filename
    # Made here: rpmbuilds run side by side, and rpm's own mkdir of the shared parent
    # races ("failed to create directory %{_topdir}: ... File exists").
    topdir.mkdir(parents=True, exist_ok=True)
    defines = RPMBUILD_DEFINES | {
        "_topdir": str(topdir),
        "_rpmdir": str(out),
        "_build_name_fmt": package.filename,
    }
    argv = ["rpmbuild", "--quiet", "-bb", "--target", package.arch]
    for name, value in defines.items():
        argv += ["--define", f"{name} {value}"]
    run([*argv, spec], env=os.environ | {"SOURCE_DATE_EPOCH": "1735689600"})
    return out / package.filename


def running_kernel() -> tuple[str, str, str]:
    """The running kernel's version, release and `uname -r`. An EL kernel's release
    (5.14.0-503.el9.x86_64) splits as rpm's version-release; another one's is made rpm-safe
    (6.18.44-fc-v1252: 6.18.44 and fc.v1252), and the packages also provide its uname -r."""
    uname = os.uname().release
    name = re.sub(r"\.(x86_64|noarch)$", "", uname)
    version, _, release = name.partition("-")
    return version, re.sub(r"[^\w.+]", ".", release) or "1", uname


def baseos(plugin_version: str, key: Path) -> list[Package]:
    plugins, plugin_release = plugin_version.split("-", 1)
    plugin_release = f"{plugin_release}.el9"
    repos = "\n".join(
        rocky_repo(section, title, enabled)
        for section, title, enabled in (
            ("baseos", "BaseOS", True),
            ("appstream", "AppStream", True),
            ("crb", "CRB", False),
        )
    )
    release = Package(
        "rocky-release",
        "9.5",
        "1.2.el9",
        "Rocky Linux 9.5 release files (sandbox: the repositories are local, the key a test key)",
        files={
            "/etc/os-release": OS_RELEASE,
            "/etc/redhat-release": ROCKY_RELEASE,
            "/etc/rocky-release": ROCKY_RELEASE,
            "/etc/system-release": ROCKY_RELEASE,
            "/etc/yum.repos.d/rocky.repo": repos,
            "/etc/yum.repos.d/rocky-extras.repo": rocky_repo("extras", "Extras", True),
            "/etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9": key,
        },
        config=("/etc/yum.repos.d/rocky.repo", "/etc/yum.repos.d/rocky-extras.repo"),
        provides=(
            "system-release = 9.5-1.2.el9",
            "system-release(releasever) = 9",
            "redhat-release = 9.5",
            "rocky-release(upstream) = 9.5",
        ),
    )
    core = f"{PLUGINS}/dnfpluginscore/__init__.py"
    config_manager = f"{PLUGINS}/dnf-plugins/config_manager.py"
    versionlock = f"{PLUGINS}/dnf-plugins/versionlock.py"
    python_plugins = Package(
        "python3-dnf-plugins-core",
        plugins,
        plugin_release,
        "Debian's dnfpluginscore and config-manager plugin, packaged as EL9 packages them",
        files={core: Path(core), config_manager: Path(config_manager)},
        provides=("dnf-command(config-manager)",),
    )
    plugins_core = Package(
        "dnf-plugins-core",
        plugins,
        plugin_release,
        "Core plugins for dnf (sandbox: Debian's config-manager)",
        requires=(f"python3-dnf-plugins-core = {plugins}-{plugin_release}",),
    )
    lock_conf = "/etc/dnf/plugins/versionlock.conf"
    lock_list = "/etc/dnf/plugins/versionlock.list"
    versionlock_plugin = Package(
        "python3-dnf-plugin-versionlock",
        plugins,
        plugin_release,
        "Debian's dnf versionlock plugin, configured as EL9's package configures it",
        files={
            versionlock: Path(versionlock),
            lock_conf: f"[main]\nenabled = 1\nlocklist = {lock_list}\n",
            lock_list: "",
        },
        config=(lock_conf, lock_list),
        requires=(f"python3-dnf-plugins-core = {plugins}-{plugin_release}",),
        provides=("dnf-command(versionlock)",),
    )
    shims = [
        shim(name, version, rel, "Rocky's BaseOS")
        for name, version, rel in (
            ("firewalld", "1.3.4", "7.el9"),
            ("python3-firewall", "1.3.4", "7.el9"),
            ("openssh-server", "8.7p1", "43.el9"),
            ("openssh-clients", "8.7p1", "43.el9"),
            ("rsync", "3.2.3", "20.el9"),
            ("ca-certificates", "2024.2.69_v8.0.303", "91.4.el9_4"),
            ("python3-packaging", "20.9", "5.el9"),
            ("nfs-utils", "2.5.4", "27.el9"),
        )
    ]
    return [release, python_plugins, plugins_core, versionlock_plugin, *shims]


def appstream() -> list[Package]:
    """What Rocky 9 has in AppStream: the running kernel's development files and user-space
    headers (kernel-devel also provides kernel-devel-<uname -r>, which dnf resolves when the
    running kernel's release is no rpm version-release), Python 3.11, MariaDB, munge."""
    kernel, kernel_release, uname = running_kernel()
    uname_provides = {
        "kernel-headers": (),
        "kernel-devel": (
            f"kernel-devel-uname-r = {kernel}-{kernel_release}",
            f"kernel-devel-{uname}",
        ),
        "kernel-devel-matched": (f"kernel-devel-matched-{uname}",),
    }
    shims = [
        shim(name, kernel, kernel_release, "Rocky's AppStream", arch="x86_64", provides=provides)
        for name, provides in uname_provides.items()
    ]
    # EL9's mariadb-server listens on /var/lib/mysql/mysql.sock (its mariadb-server.cnf);
    # Debian's on /run/mysqld/mysqld.sock, through systemd's socket activation. The stand-in
    # carries EL9's setting, in the place Debian's server reads it from, and turns the socket
    # activation off.
    mariadb_server = shim(
        "mariadb-server",
        "10.5.27",
        "1.el9_5",
        "Rocky's AppStream",
        arch="x86_64",
        files={
            "/etc/mysql/mariadb.conf.d/90-el9-socket.cnf": MARIADB_EL9_SOCKET,
            "/usr/lib/tmpfiles.d/el9-mariadb-socket.conf": MARIADB_DEBIAN_SOCKET_LINK,
        },
        # EL9's server listens itself; Debian 12's is socket-activated on its own path.
        post="systemctl disable --now mariadb.socket >/dev/null 2>&1 || :\n"
        "systemd-tmpfiles --create /usr/lib/tmpfiles.d/el9-mariadb-socket.conf || :",
    )
    # Scriptlets need /bin/sh, which EL9's bash provides (Debian's is dpkg's, unknown to rpm).
    bash = shim("bash", "5.1.8", "9.el9", "Rocky's BaseOS", arch="x86_64", provides=("/bin/sh",))
    return [
        *shims,
        bash,
        mariadb_server,
        *(
            shim(name, version, rel, "Rocky's AppStream", arch="x86_64")
            for name, version, rel in (
                ("python3.11", "3.11.9", "7.el9"),
                ("mariadb", "10.5.27", "1.el9_5"),
                ("munge", "0.5.13", "13.el9"),
                ("munge-libs", "0.5.13", "13.el9"),
            )
        ),
    ]


def nccl_packages(source: Path, nccl: str, label: str) -> list[Package]:
    """libnccl and libnccl-devel as NVIDIA's RPMs lay them out, labelled `label`. A label other
    than the wheel's NCCL gets a copy of nccl.h whose version defines say `label`, as that
    release's header would (the library bytes stay the wheel's)."""
    release = f"1+cuda{CUDA}"
    include = source / "include"
    if label != nccl:
        relabelled = source / f"include-{label}"
        shutil.copytree(include, relabelled, dirs_exist_ok=True)
        major, minor, patch = label.split(".")
        header = relabelled / "nccl.h"
        text = header.read_text()
        for name, value in (("MAJOR", major), ("MINOR", minor), ("PATCH", patch)):
            text = re.sub(
                rf"^#define NCCL_{name} .*$", f"#define NCCL_{name} {value}", text, flags=re.M
            )
        code = int(major) * 10000 + int(minor) * 100 + int(patch)
        text = re.sub(
            r"^#define NCCL_VERSION_CODE .*$", f"#define NCCL_VERSION_CODE {code}", text, flags=re.M
        )
        header.write_text(text)
        include = relabelled
    headers = {
        f"/usr/include/{path.relative_to(include)}": path
        for path in sorted(include.rglob("*"))
        if path.is_file()
    }
    return [
        Package(
            "libnccl",
            label,
            release,
            f"NVIDIA Collective Communication Library (NCCL) Runtime ({nccl}'s library)",
            arch="x86_64",
            files={f"/usr/lib64/libnccl.so.{label}": source / "lib" / "libnccl.so.2"},
            symlinks={"/usr/lib64/libnccl.so.2": f"libnccl.so.{label}"},
        ),
        Package(
            "libnccl-devel",
            label,
            release,
            f"NVIDIA Collective Communication Library (NCCL) Development ({nccl}'s headers)",
            arch="x86_64",
            files=headers,
            symlinks={"/usr/lib64/libnccl.so": "libnccl.so.2"},
            requires=(f"libnccl = {label}-{release}",),
        ),
    ]


def driver_packages() -> dict[str, list[Package]]:
    """nvidia-open and nvidia-persistenced of each stream (shims: no GPU here)."""
    return {
        stream: [
            shim(name, version, "1.el9", "NVIDIA's CUDA repository", arch=arch, epoch=DRIVER_EPOCH)
            for name, arch in (("nvidia-open", "noarch"), ("nvidia-persistenced", "x86_64"))
        ]
        for stream, version in DRIVER_STREAMS.items()
    }


def modules_yaml(streams: dict[str, list[Package]]) -> str:
    """modulemd v2 documents of the nvidia-driver module; no modulemd-defaults, so no stream is
    the default and the packages stay hidden until one is enabled."""
    documents = []
    for index, (stream, packages) in enumerate(streams.items()):
        artifacts = "".join(f"      - {package.nevra}\n" for package in packages)
        components = "".join(
            f"      {package.name}:\n        rationale: driver\n" for package in packages
        )
        documents.append(
            "---\ndocument: modulemd\nversion: 2\ndata:\n"
            f'  name: nvidia-driver\n  stream: "{stream}"\n  version: {20250101000000 + index}\n'
            f'  context: "00000000"\n  arch: x86_64\n'
            f"  summary: Nvidia driver for {stream} branch (sandbox stand-ins)\n"
            f"  description: >-\n    The {stream} branch of NVIDIA's driver, stand-ins.\n"
            "  license:\n    module:\n      - MIT\n"
            f"  profiles:\n    default:\n      rpms:\n        - nvidia-open\n"
            f"  components:\n    rpms:\n{components}"
            f"  artifacts:\n    rpms:\n{artifacts}...\n"
        )
    return "".join(documents)


def run(argv: list[str | Path], env: dict[str, str] | None = None) -> str:
    """Run a tool; on failure, stop with what it said."""
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if result.returncode:
        raise SystemExit(f"{' '.join(map(str, argv[:4]))}... failed:\n{result.stderr}")
    return result.stdout


def make_key(gnupg: Path, key: Path) -> str:
    """A signing key in a keyring of its own, made once and kept there (a rebuild of the
    repositories signs with the same key, so nodes that trust it keep working and the node
    image, named after the fingerprint, is not rebuilt); its public key is written to `key`.
    Returns its fingerprint."""
    env = os.environ | {"GNUPGHOME": str(gnupg)}
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    if not (gnupg / "key-made").exists():
        shutil.rmtree(gnupg, ignore_errors=True)
        gnupg.mkdir(mode=0o700, parents=True)
        run([*gpg, "--quick-gen-key", SIGNER, "rsa3072", "sign", "never"], env=env)
        (gnupg / "key-made").touch()
    run([*gpg, "--armor", "--output", key, "--export"], env=env)
    listing = run([*gpg, "--with-colons", "--fingerprint"], env=env)
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


def sign(gnupg: Path, rpms: list[Path]) -> None:
    env = os.environ | {"GNUPGHOME": str(gnupg)}
    macros = ["--define", "__gpg /usr/bin/gpg", "--define", f"_gpg_name {SIGNER}"]
    run(["rpmsign", "--addsign", *macros, *rpms], env=env)
    run(["gpgconf", "--kill", "all"], env=env)


def plan(out: Path, nccl_source: Path, nccl: str, key: Path) -> dict[Path, list[Package]]:
    """What each folder under out holds."""
    plugin_version = run(["dpkg-query", "-W", "-f", "${Version}", "dnf-plugins-core"])
    kernel, kernel_release, _ = running_kernel()
    return {
        out / "rocky" / "baseos": baseos(plugin_version, key),
        out / "rocky" / "appstream": appstream(),
        out / "rocky" / "crb": [
            shim("torch-cluster-crb-probe", "1.0", "1.el9", "CRB (only CRB has it)")
        ],
        out / "rocky" / "extras": [
            Package(
                "epel-release",
                "9",
                "8.el9",
                "Extra Packages for Enterprise Linux repository configuration (sandbox: EPEL's "
                "repository files, a test key)",
                files=epel_files() | {"/etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-9": key},
                config=tuple(epel_files()),
                requires=("redhat-release >= 9",),
            )
        ],
        out / "epel": [
            *(
                shim(name, version, "1.el9", "EPEL 9", arch=arch)
                for name, version, arch in (
                    ("dkms", "3.1.5", "noarch"),
                    ("fuse-sshfs", "3.7.3", "x86_64"),
                    ("slurm-slurmctld", "22.05.9", "x86_64"),
                    ("slurm-slurmd", "22.05.9", "x86_64"),
                    ("slurm-slurmdbd", "22.05.9", "x86_64"),
                )
            ),
            # EPEL's slurm makes /run/slurm (the daemons' PID files) with a tmpfiles.d entry,
            # created at install by its %post; the stand-in does the same.
            shim(
                "slurm",
                "22.05.9",
                "1.el9",
                "EPEL 9",
                arch="x86_64",
                files={"/usr/lib/tmpfiles.d/slurm.conf": "D /run/slurm 0755 root root -\n"},
                post="systemd-tmpfiles --create /usr/lib/tmpfiles.d/slurm.conf || :",
            ),
        ],
        out / CUDA_REPO: [
            *nccl_packages(nccl_source, nccl, nccl),
            *nccl_packages(nccl_source, nccl, NCCL_SECOND),
            *(package for packages in driver_packages().values() for package in packages),
        ],
        out / "test-only": [
            shim(
                "kernel-core",
                version,
                release,
                "Rocky's BaseOS",
                arch="x86_64",
                provides=(f"kernel-uname-r = {version}-{release}",),
            )
            for version, release in (("99.0.0", "1.el9"), (kernel, kernel_release))
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path(".cache/el9-repos"))
    args = parser.parse_args()

    start = time.monotonic()
    out = args.out.resolve()
    nccl = args.wheel.name.split("-")[1]
    # Emptied, not removed: running EL9-like nodes bind-mount this folder, and a new folder
    # in its place would leave them an empty, deleted one.
    out.mkdir(parents=True, exist_ok=True)
    for entry in out.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    # Beside --out, so that the wheel's library is hard-linked into the packages, not copied.
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        work = Path(scratch)
        with zipfile.ZipFile(args.wheel) as wheel:
            wheel.extractall(work / "wheel")
        key = out / KEY_NAME
        gnupg = out.parent / f"{out.name}-gnupg"
        fingerprint = make_key(gnupg, key)
        (out / "fingerprint.txt").write_text(fingerprint + "\n")

        folders = plan(out, work / "wheel" / "nvidia" / "nccl", nccl, key)
        jobs = [(folder, package) for folder, packages in folders.items() for package in packages]
        for folder in folders:
            folder.mkdir(parents=True)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            rpms = list(pool.map(lambda job: build(job[1], work, job[0]), jobs))
        sign(gnupg, rpms)

        # NVIDIA publishes its repository key beside the packages, under its key ID.
        cuda = out / CUDA_REPO
        shutil.copy2(key, cuda / "D42D0685.pub")
        # The same packages, without the module metadata.
        broken = out / "cuda-nomodules" / CUDA_REPO.relative_to("cuda")
        broken.mkdir(parents=True)
        for path in cuda.iterdir():
            os.link(path, broken / path.name)
        for repo in [*folders, broken]:
            if repo.name != "test-only":
                run(["createrepo_c", "--quiet", "--general-compress-type=gz", repo])
        modules = work / "modules.yaml"
        modules.write_text(modules_yaml(driver_packages()))
        run(["modifyrepo_c", "--mdtype=modules", modules, cuda / "repodata"])
    print(
        f"{args.out}: {len(rpms)} packages signed with {fingerprint}, "
        f"{time.monotonic() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
