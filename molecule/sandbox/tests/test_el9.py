"""The roles' RHEL-family path, run for real on the sandbox's EL9-like nodes.

What these nodes are, and what they are not: Debian root filesystems with Debian's dnf 4.14
(EL9's major version, libdnf with module streams) and rpm 4.18, a Rocky Linux 9.5 release
package (so Ansible's facts say Rocky / RedHat / 9 / dnf), EL9's dnf.conf defaults, and local
repositories signed with a test key (sandbox/el9_repos.py): Rocky-like BaseOS, AppStream,
extras (epel-release) and CRB, an EPEL-like repository, and an NVIDIA-like CUDA repository
with the real NCCL library of torch's wheel and the driver's module streams. Packages such as
firewalld or dkms are stand-in RPMs over Debian's programs. So these tests run the roles'
tasks and dnf's and rpm's behaviour for real (repositories, keys, module streams,
versionlock, repo files, the interpreter Ansible picks), not Red Hat's packages, SELinux or an
EL kernel: molecule/centos runs the same roles on real CentOS Stream 9 and Rocky 9 where a
registry and the internet can be reached.

Order matters within this module: check mode first, on nodes nothing has touched yet.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import el_checks
import pytest
import testinfra
from launcher import Outcome, Playbook, recap_changes
from sandbox_nodes import PROJECT_DIR, Node
from testinfra.utils.ansible_runner import AnsibleRunner

GROUP = "el9_nodes"
REPOS = PROJECT_DIR / ".cache" / "el9-repos"
SERVED = "file:///srv/el9-repos"
NCCL = "2.30.7-1+cuda13.0"
OTHER_NCCL = "2.28.9-1+cuda13.0"
TAGS = "epel,nccl,firewall,training_user,ssh_trust"


@functools.cache
def fingerprint() -> str:
    return (REPOS / "fingerprint.txt").read_text().strip()


def mirror_vars(**extra: object) -> dict[str, object]:
    """provision.yml on the EL9-like nodes, offline: every repository a local mirror."""
    return {
        "cluster_group": GROUP,
        "epel_mirror_baseurl": f"{SERVED}/epel/",
        "epel_gpg_key_fingerprint": fingerprint(),
        "nccl_enabled": True,
        "nccl_repo_baseurl": f"{SERVED}/cuda/rhel9/x86_64/",
        "nccl_gpg_key_fingerprint": fingerprint(),
        # The Debian sandbox's shared folder is served by its node0, not a member here.
        "shared_storage_server": "",
        **extra,
    }


@pytest.fixture(scope="module")
def el9_nodes() -> list[Node]:
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    runner = AnsibleRunner(inventory)
    names = list(runner.inventory.get(GROUP, {}).get("hosts", []))
    assert len(names) >= 2, f"the scenario needs two hosts in {GROUP}, got {names}"
    return [
        Node(
            name,
            testinfra.get_host(f"ansible://{name}?ansible_inventory={inventory}"),
            runner.get_variables(name),
        )
        for name in names
    ]


@pytest.fixture(scope="module")
def provision(inventory_file: Path, tmp_path_factory: pytest.TempPathFactory):
    playbook = Playbook(inventory_file, tmp_path_factory.mktemp("el9-runs"))

    def run(*args: str, tags: str = TAGS, **extra: object) -> Outcome:
        return playbook.run(
            "provision.yml", mirror_vars(**extra), args=("--tags", tags, *args), timeout=900
        )

    return run


def test_the_nodes_look_like_rocky_9_to_ansible(el9_nodes: list[Node]) -> None:
    for node in el9_nodes:
        release = node.host.file("/etc/os-release").content_string
        assert 'ID="rocky"' in release
        assert node.host.exists("dnf")
        # A newer Python without dnf, rpm or firewalld bindings is there, as AppStream's
        # python3.11/3.12 are on EL9: interpreter discovery alone would pick it.
        assert node.host.run("python3.12 -c 'import dnf'").rc != 0
        assert node.host.run("/usr/bin/python3 -c 'import dnf, rpm, firewall'").rc == 0


def test_check_mode_on_fresh_nodes_changes_nothing(provision, el9_nodes: list[Node]) -> None:
    outcome = provision("--check")
    assert outcome.rc == 0, outcome.output
    for node in el9_nodes:
        assert node.host.run("rpm -q epel-release").rc != 0
        assert node.host.run("rpm -q libnccl").rc != 0
        assert not node.host.file("/etc/yum.repos.d/cuda-rhel9.repo").exists


@pytest.fixture(scope="module")
def first_run(provision, el9_nodes: list[Node]) -> Outcome:
    return provision()


def test_provision_converges_on_the_el9_path(first_run: Outcome) -> None:
    assert first_run.rc == 0, first_run.output
    # On fresh nodes (check mode ran first and changed nothing): the role says what it did.
    assert "turned off epel-cisco-openh264: no local mirror for them" in first_run.output


def test_modules_run_on_the_platform_python(
    first_run: Outcome, inventory_file: Path, el9_nodes: list[Node]
) -> None:
    """The firewall role ran (ansible.posix.firewalld needs the firewall bindings), and the
    interpreter recorded for each node is the platform Python, not python3.12."""
    assert first_run.rc == 0, first_run.output
    facts_dir = Path(Playbook(inventory_file, Path()).env["ANSIBLE_CACHE_PLUGIN_CONNECTION"])
    for node in el9_nodes:
        # The cache's files are named <prefix><host>; ansible-core 2.19 keeps the facts as a
        # JSON document in __payload__.
        (path,) = facts_dir.glob(f"*{node.name}")
        facts = json.loads(json.loads(path.read_text())["__payload__"])
        pinned = facts["discovered_interpreter_python"]
        # A value that came from a template carries its origin: {"value": ..., "tags": ...}.
        assert (pinned["value"] if isinstance(pinned, dict) else pinned) == "/usr/bin/python3"
        # The setup module itself ran there (it reports its own interpreter).
        assert facts["ansible_python"]["executable"] == "/usr/bin/python3"


def test_epel_and_crb_are_on_and_the_key_is_the_mirrors(
    first_run: Outcome, el9_nodes: list[Node]
) -> None:
    assert first_run.rc == 0, first_run.output
    for node in el9_nodes:
        assert node.host.package("epel-release").is_installed
        assert {"epel", "crb"} <= el_checks.enabled_repos(node.host)
        # CRB's own package is offered only with CRB on.
        assert node.host.run("dnf -q list --available torch-cluster-crb-probe").rc == 0
        assert el_checks.key_installed(node.host, fingerprint())


def test_no_repository_of_epel_release_reaches_the_internet(
    first_run: Outcome, el9_nodes: list[Node]
) -> None:
    """epel-cisco-openh264 (on, Fedora's metalink) is turned off: dnf refreshes offline."""
    assert first_run.rc == 0, first_run.output
    for node in el9_nodes:
        repo = node.host.file("/etc/yum.repos.d/epel-cisco-openh264.repo").content_string
        assert "[epel-cisco-openh264]" in repo
        assert "epel-cisco-openh264" not in el_checks.enabled_repos(node.host)
        refresh = node.host.run("dnf --refresh -q makecache")
        assert refresh.rc == 0, refresh.stderr


def test_nccl_from_a_file_mirror_is_installed_and_locked(
    first_run: Outcome, el9_nodes: list[Node]
) -> None:
    """nccl_repo_baseurl file://: the key comes from the mirror's D42D0685.pub, by path."""
    assert first_run.rc == 0, first_run.output
    version, release = NCCL.split("-")
    for node in el9_nodes:
        for package in el_checks.NCCL_PACKAGES:
            assert el_checks.nccl_build(node.host, package) == (version, release)
            assert el_checks.lock_entry(package, version, release) in el_checks.nccl_locks(
                node.host
            )
        assert el_checks.header_version(node.host) == version
        assert el_checks.library_version(node.host) == version
        assert "cuda-rhel9-x86_64" in el_checks.enabled_repos(node.host)


def test_firewalld_trusts_the_members_and_ssh_works_between_them(
    first_run: Outcome, el9_nodes: list[Node]
) -> None:
    assert first_run.rc == 0, first_run.output
    first, second = el9_nodes[:2]
    assert first.host.service("firewalld").is_running
    user = first.setting("ssh_trust_user", "ssh_trust")
    ssh = f"ssh -o BatchMode=yes {second.address} cat /etc/rocky-release"
    reach = first.host.run(f"runuser -u {user} -- {ssh}")
    assert reach.rc == 0, reach.stderr
    assert "Rocky Linux release 9" in reach.stdout


def test_a_second_run_changes_nothing(first_run: Outcome, provision) -> None:
    assert first_run.rc == 0, first_run.output
    again = provision()
    assert again.rc == 0, again.output
    assert not any(recap_changes(again.output).values()), recap_changes(again.output)


def test_a_re_pin_moves_the_build_and_its_locks(
    first_run: Outcome, provision, el9_nodes: list[Node]
) -> None:
    assert first_run.rc == 0, first_run.output
    pinned = provision(tags="nccl", nccl_version="2.28.9", nccl_cuda_version="13.0")
    assert pinned.rc == 0, pinned.output
    for node in el9_nodes:
        assert el_checks.nccl_build(node.host) == tuple(OTHER_NCCL.split("-"))
        locks = el_checks.nccl_locks(node.host)
        assert el_checks.lock_entry("libnccl", *OTHER_NCCL.split("-")) in locks
        assert not any(NCCL in lock for lock in locks)
    back = provision(tags="nccl")
    assert back.rc == 0, back.output
    for node in el9_nodes:
        assert el_checks.nccl_build(node.host) == tuple(NCCL.split("-"))


def test_an_ftp_key_is_refused_before_anything_changes(provision) -> None:
    refused = provision(tags="nccl", nccl_gpg_key_url="ftp://mirror.example/D42D0685.pub")
    assert refused.rc != 0
    assert "rpm imports" in refused.output
    assert "keys over http(s):// or from a file on the node only" in refused.output


@pytest.fixture
def driver(provision, el9_nodes: list[Node]) -> Iterator:
    """provision.yml's nvidia_driver role (and the repository it shares with nccl); the
    driver's packages, stream and any test kernel are removed after."""

    def run(**extra: object) -> Outcome:
        return provision(tags="nccl,nvidia_driver", nvidia_driver_enabled=True, **extra)

    yield run
    for node in el9_nodes:
        node.host.run(
            "dnf -q -y remove nvidia-open nvidia-persistenced kernel-devel-matched "
            "kernel-headers dkms; rpm -e --nodeps kernel-core; "
            "dnf -q -y module reset nvidia-driver; "
            "rm -f /usr/local/sbin/mokutil"
        )


def assert_refused_installing_nothing(
    outcome: Outcome, el9_nodes: list[Node], *phrases: str
) -> None:
    """The run failed saying each phrase, and no node got the driver."""
    assert outcome.rc != 0
    for phrase in phrases:
        assert phrase in outcome.output, outcome.output
    for node in el9_nodes:
        assert node.host.run("rpm -q nvidia-open").rc != 0


def test_a_mirror_without_module_metadata_is_refused_naming_it(
    driver, el9_nodes: list[Node]
) -> None:
    refused = driver(nccl_repo_baseurl=f"{SERVED}/cuda-nomodules/rhel9/x86_64/")
    assert_refused_installing_nothing(
        refused, el9_nodes, "offers no stream of dnf's nvidia-driver module", "modules.yaml"
    )


def test_a_node_running_an_older_kernel_is_told_to_reboot_first(
    driver, el9_nodes: list[Node]
) -> None:
    node = el9_nodes[1]
    newer = next((REPOS / "test-only").glob("kernel-core-99.*.rpm"))
    node.host.check_output(f"rpm -i --nodeps /srv/el9-repos/test-only/{newer.name}")
    refused = driver()
    assert_refused_installing_nothing(
        refused, el9_nodes, f"{node.name}: the node runs the kernel", "Reboot the node into 99."
    )


def test_secure_boot_is_refused_with_the_enrolment_steps(driver, el9_nodes: list[Node]) -> None:
    node = el9_nodes[0]
    # mokutil as it answers on a node with Secure Boot on (no EFI in a container).
    node.host.check_output(
        "printf '#!/bin/sh\\necho SecureBoot enabled\\n' > /usr/local/sbin/mokutil"
        " && chmod 755 /usr/local/sbin/mokutil"
    )
    refused = driver()
    assert_refused_installing_nothing(
        refused,
        el9_nodes,
        f"{node.name}: Secure Boot is enabled",
        "mokutil --import /var/lib/dkms/mok.pub",
    )


def test_the_driver_installs_from_its_stream_up_to_the_kernel_check(
    driver, el9_nodes: list[Node]
) -> None:
    """The stream is enabled and nvidia-open comes from it with kernel-devel-matched; the
    container has no kernel build tree, so the role stops where a real node would build."""
    outcome = driver()
    assert outcome.rc != 0
    assert "its headers are not installed" in outcome.output, outcome.output
    for node in el9_nodes:
        streams = node.host.check_output("dnf -q module list --enabled nvidia-driver")
        assert "580-open" in streams
        assert node.host.check_output("rpm -q nvidia-open --qf '%{VERSION}'").startswith("580.")
        assert node.host.package("kernel-devel-matched").is_installed


@pytest.fixture(scope="module")
def el9_slurm(
    first_run: Outcome, inventory_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Outcome, Outcome]:
    """slurm.yml on the EL9-like nodes (EPEL's package names, EL9's paths, the stand-ins over
    Debian's daemons), twice."""
    assert first_run.rc == 0, first_run.output
    playbook = Playbook(inventory_file, tmp_path_factory.mktemp("el9-slurm"))
    settings = {"cluster_group": GROUP, "shared_storage_server": ""}
    first = playbook.run("slurm.yml", settings, timeout=900)
    second = playbook.run("slurm.yml", settings, timeout=600) if first.rc == 0 else first
    return first, second


def test_slurm_converges_on_the_el9_path_and_is_idempotent(
    el9_slurm: tuple[Outcome, Outcome], el9_nodes: list[Node]
) -> None:
    first, second = el9_slurm
    assert first.rc == 0, first.output
    assert second.rc == 0, second.output
    assert not any(recap_changes(second.output).values()), recap_changes(second.output)
    controller = el9_nodes[0]
    states = dict(
        line.split()
        for line in controller.host.check_output(
            "sinfo --noheader --Node --format='%N %T'"
        ).splitlines()
    )
    assert states == {node.name: "idle" for node in el9_nodes}
    # EL9's places: the PID files in /run/slurm (made by the slurm package's tmpfiles.d
    # entry), the controller's state and the nodes' spool under /var/spool/slurm.
    assert controller.host.file("/run/slurm/slurmctld.pid").exists
    assert controller.host.file("/var/spool/slurm/ctld").is_directory
    for node in el9_nodes:
        assert node.host.file("/var/spool/slurm/d").is_directory
        assert node.host.file("/run/slurm/slurmd.pid").exists


def test_a_slurm_job_runs_on_both_el9_nodes_and_is_accounted(
    el9_slurm: tuple[Outcome, Outcome], el9_nodes: list[Node]
) -> None:
    """srun across the nodes, and its record in slurmdbd's MariaDB, reached on EL9's socket
    (/var/lib/mysql/mysql.sock) by the mysql client the role installs."""
    assert el9_slurm[1].rc == 0, el9_slurm[1].output
    controller = el9_nodes[0]
    ran = controller.host.run(f"srun --nodes={len(el9_nodes)} --job-name=el9-probe hostname")
    assert ran.rc == 0, ran.stderr
    assert sorted(ran.stdout.split()) == sorted(node.name for node in el9_nodes)
    # slurmctld hands the record to slurmdbd a moment after the job ends.
    deadline = time.monotonic() + 30
    while True:
        record = controller.host.check_output(
            "sacct --noheader --parsable2 --name=el9-probe --format=JobName,State --allusers"
        )
        if "el9-probe|COMPLETED" in record.splitlines() or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert "el9-probe|COMPLETED" in record.splitlines(), record
