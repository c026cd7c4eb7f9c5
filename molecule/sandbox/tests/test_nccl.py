"""The nccl role's Debian path, for real, against a local mirror of NVIDIA's CUDA repository.

The mirror (make nccl-mirror, sandbox/nccl_mirror.py) serves libnccl2 and libnccl-dev made from
the NCCL in torch's own nvidia-nccl-cu13 wheel, signed with the mirror's key, and the
cuda-keyring package that installs that key. The role adds the keyring and the signed apt
source, chooses the build of the NCCL torch bundles (nccl_version auto) from what apt offers,
installs and holds it, and checks the library and the header. Everything is removed after."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from launcher import Outcome, Playbook, recap_changes
from sandbox_nodes import PROJECT_DIR, Node

MIRROR = PROJECT_DIR / ".cache" / "nccl-mirror"
VERSION = "2.30.7-1+cuda13.0"
SOURCE_FILE = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"


@pytest.fixture(scope="module")
def mirror_url(members: list[Node]) -> Iterator[str]:
    """The mirror over HTTP on the controller, at the address the nodes route through."""
    assert (MIRROR / "Packages").is_file(), "run make nccl-mirror first"
    route = json.loads(members[0].host.check_output("ip -j route show default"))
    gateway = route[0]["gateway"]
    with socket.socket() as probe:
        probe.bind((gateway, 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", gateway, "--directory", MIRROR, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((gateway, port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the mirror's HTTP server did not start"
            time.sleep(0.2)
    yield f"http://{gateway}:{port}/"
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(scope="module")
def provision(
    inventory_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mirror_url: str,
    members: list[Node],
) -> Iterator[callable]:
    """provision.yml with the nccl role on, against the mirror; the nodes are put back after."""
    playbook = Playbook(inventory_file, tmp_path_factory.mktemp("runs"))

    def run(*tags: str, **extra: object) -> Outcome:
        extra_vars = {"nccl_enabled": True, "nccl_apt_repo_url": mirror_url, **extra}
        return playbook.run("provision.yml", extra_vars, args=("--tags", ",".join(tags)))

    yield run
    gateway = mirror_url.split("//")[1].split(":", maxsplit=1)[0]
    for node in members:
        node.host.run(
            "apt-get purge -y -q --allow-change-held-packages libnccl2 libnccl-dev cuda-keyring"
        )
        node.host.run(f"rm -f {SOURCE_FILE} /var/lib/apt/lists/{gateway}*")


@pytest.fixture(scope="module")
def first_run(provision) -> Outcome:
    return provision("nccl", "pytorch")


def test_the_nccl_torch_bundles_is_chosen_installed_and_held(
    first_run: Outcome, members: list[Node]
) -> None:
    assert first_run.rc == 0, first_run.output
    assert (
        f"libnccl {VERSION}: system NCCL 2.30.7 (CUDA 13.0) is the NCCL torch bundles"
        in first_run.output
    )
    for node in members:
        for package in ("libnccl2", "libnccl-dev"):
            assert node.host.package(package).version == VERSION
            selection = node.host.check_output(f"dpkg --get-selections {package}").split()
            assert selection == [package, "hold"]
        library = node.host.file("/usr/lib/x86_64-linux-gnu/libnccl.so.2")
        assert library.linked_to == "/usr/lib/x86_64-linux-gnu/libnccl.so.2.30.7"
        header = node.host.file("/usr/include/nccl.h").content_string
        assert "#define NCCL_MINOR 30" in header
        # The apt source is signed by the keyring that cuda-keyring installed.
        source = node.host.file(SOURCE_FILE).content_string
        assert "signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg" in source


def test_provision_shows_both_nccls_as_the_same_version(
    first_run: Outcome, members: list[Node]
) -> None:
    line = "NCCL: torch's 2.30.7, system libnccl 2.30.7 (CUDA 13.0): the same version"
    assert first_run.output.count(line) == len(members), first_run.output


def test_a_second_run_changes_nothing(first_run: Outcome, provision) -> None:
    again = provision("nccl", "pytorch")
    assert again.rc == 0, again.output
    assert not any(recap_changes(again.output).values()), again.output


def test_a_pinned_build_that_the_repository_lacks_fails_naming_it(
    first_run: Outcome, provision, members: list[Node]
) -> None:
    outcome = provision("nccl", nccl_version="2.28.9", nccl_cuda_version="13.0")
    assert outcome.rc != 0
    assert "2.28.9-1+cuda13.0" in outcome.output
    for node in members:
        assert node.host.package("libnccl2").version == VERSION
