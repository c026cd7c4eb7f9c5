#!/usr/bin/python
"""Ansible module: what the health check needs to know of one node, read in one round trip."""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.node_paths import (
    driver_gpus,
    node_paths_argument_spec,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.proc import (
    job_processes,
    port_listeners,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.ssh import (
    runuser_prefix,
    ssh_argv,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.clock import (
    CLOCK_ECHO,
    clock_offset,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.gpu import (
    dcgm_failures,
    inactive_nvlinks,
    parse_nvlink_errors,
    parse_nvlink_status,
    parse_smi_xml,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.gpu_faults import (
    APPLICATION_XIDS,
    parse_xids,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.node_health import (
    SINFO_NODES_FORMAT,
    parse_sinfo_nodes,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.rdma import rdma_ports
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_probe import (
    unit_limits,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_properties import (
    LIMIT_MEMLOCK,
    LIMIT_NOFILE,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.provision.torch_builds import (
    installed_build,
    installed_query,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.mounts import (
    resolve_shared_dir,
)

DOCUMENTATION = r"""
module: cluster_health_probe
short_description: Read one node's versions, GPUs, leftovers, disk, job limits and clocks
description:
  - Read-only. The training environment's torch, its CUDA build, the NCCL it uses, its GPU
    count and its Python, from the environment's own interpreter (the pytorch role's fact
    names it); the OS and kernel; the NVIDIA driver, its GPU count, uncorrectable ECC errors
    and pending row remaps when C(nvidia-smi) reports them; RDMA NICs.
  - Leftovers of earlier jobs (processes that carry a TORCH_JOB_ID, active torch-job units,
    processes on the master port), and the free space where jobs write.
  - On the master, each peer's clock against its own, over SSH (the offset is measured
    against the middle of the round trip).
  - The memlock and nofile limits a job unit gets, read by a transient unit (C(systemd-run
    --wait --pipe)) that asks for the launcher's limits from its own C(/proc/self/limits).
    It leaves nothing behind, so it runs in check mode too.
options:
  base_dir:
    description: Where jobs write (the launcher's base folder); the free space of its file system.
    type: path
    default: /var/lib/torch-cluster
  port:
    description: The master port, on the master (0 elsewhere).
    type: int
    default: 0
  peers:
    description: On the master, the other nodes (name to address) whose clocks are measured.
    type: dict
    default: {}
  ssh_user:
    description: The user the nodes trust each other as.
    type: str
    default: root
  shared_dir:
    description: The jobs' shared folder; C(auto) for the shared_storage role's mount (its fact).
    type: str
    default: auto
  limit_memlock:
    description: The memlock limit the transient unit asks for (torch_job_unit's I(limit_memlock)).
    type: str
    default: infinity
  dcgm_diag:
    description: Run DCGM's quick diagnostic (C(dcgmi diag -r 1)) where DCGM is installed.
    type: bool
    default: false
  limit_nofile:
    description: The nofile limit the transient unit asks for (torch_job_unit's I(limit_nofile)).
    type: int
    default: 1048576
extends_documentation_fragment:
  - torch_cluster.cluster.node_paths
"""

RETURN = r"""
node:
  description: Everything read, one key per fact (torch, cuda, nccl, system_nccl, python,
    torch_gpus, os, kernel, driver, driver_gpus, ecc_uncorrected, remaps_pending,
    gpu_details, gpu_model, nvlinks_inactive, nvlink_errors, xids, dcgm_failures, rdma_nics,
    rdma_ports, diagnostics (C(nvidia-smi -q), C(nvidia-smi topo -m) and C(ibv_devinfo -v)
    where installed),
    units, processes, port_users, disk_free_gib, disk_path, clock_offsets, torch_error,
    shared_dir, and job_limits with what the transient unit asked for and got, memlock and
    nofile each a number or C(unlimited), or its error).
  type: dict
  returned: always
"""

# Run by the training environment's Python: what torch is, and what it sees.
TORCH_REPORT = """
import json, platform
info = {"python": platform.python_version()}
try:
    import torch
    info.update(torch=torch.__version__, cuda=torch.version.cuda or "cpu",
                torch_gpus=torch.cuda.device_count())
    try:
        info["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    except Exception:
        info["nccl"] = "none"
except Exception as error:
    info["torch_error"] = f"{type(error).__name__}: {error}"
print(json.dumps(info))
"""


def torch_report(fact: str) -> dict:
    try:
        with open(fact) as handle:
            python = json.load(handle)["python"]
    except (OSError, ValueError, KeyError):
        return {"torch_error": f"no training environment ({fact} is missing)"}
    try:
        done = subprocess.run(
            [python, "-c", TORCH_REPORT], capture_output=True, text=True, timeout=180, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"torch_error": f"{python}: {error}"}
    if done.returncode != 0:
        return {"torch_error": f"{python}: " + " ".join(done.stderr.split())[-300:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def nvidia(gpu_dir: str) -> dict:
    found: dict = {"driver_gpus": driver_gpus(gpu_dir)}
    try:
        with open("/proc/driver/nvidia/version") as handle:
            found["driver"] = handle.readline().split("Kernel Module")[-1].split()[0]
    except (OSError, IndexError):
        found["driver"] = ""
    smi = shutil.which("nvidia-smi")
    if smi and found["driver_gpus"]:
        query = "ecc.errors.uncorrected.volatile.total,remapped_rows.pending"
        done = subprocess.run(
            [smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        numbers = [
            [
                int(v) if v.strip().isdigit() else (1 if v.strip() == "Yes" else 0)
                for v in line.split(",")
            ]
            for line in done.stdout.splitlines()
            if done.returncode == 0 and "," in line
        ]
        found["ecc_uncorrected"] = sum(row[0] for row in numbers)
        found["remaps_pending"] = sum(row[1] for row in numbers if len(row) > 1)
        found.update(gpu_details(smi))
    if os.path.isdir("/proc/driver/nvidia"):
        found["xids"] = [
            xid.describe() for xid in parse_xids(kernel_log()) if xid.code not in APPLICATION_XIDS
        ]
    return found


def _output(argv: list[str], timeout: int = 60) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def gpu_details(smi: str) -> dict:
    """Each GPU's model, persistence mode, PCIe link and slowdowns (nvidia-smi -q -x), the
    NVLinks that are down (nvidia-smi nvlink -s) and the NVLinks' error counters before the
    collectives (nvidia-smi nvlink -e; the collectives read them again after their load)."""
    gpus = parse_smi_xml(_output([smi, "-q", "-x"]))
    return {
        "gpu_details": gpus,
        "gpu_model": gpus[0]["name"] if gpus else "",
        "nvlinks_inactive": inactive_nvlinks(parse_nvlink_status(_output([smi, "nvlink", "-s"]))),
        "nvlink_errors": parse_nvlink_errors(_output([smi, "nvlink", "-e"])),
    }


# What NCCL's maintainers ask for first, read for the support bundle where the tool exists.
DIAGNOSTICS = {
    "nvidia-smi-q.txt": ["nvidia-smi", "-q"],
    "nvidia-smi-topo-m.txt": ["nvidia-smi", "topo", "-m"],
    "ibv_devinfo-v.txt": ["ibv_devinfo", "-v"],
}


def diagnostics() -> dict[str, str]:
    """Each diagnostic command's output, by file name, where its tool is installed."""
    return {
        name: _output(argv) or f"{shlex.join(argv)}: no output\n"
        for name, argv in DIAGNOSTICS.items()
        if shutil.which(argv[0])
    }


def kernel_log() -> str:
    """The kernel's messages since boot: the journal's, else the ring buffer's."""
    if shutil.which("journalctl"):
        text = _output(["journalctl", "-k", "-b", "-o", "cat", "--no-pager", "-q"], timeout=120)
        if text:
            return text
    return _output(["dmesg"]) if shutil.which("dmesg") else ""


def active_job_units(module: AnsibleModule) -> list[str]:
    rc, out, _ = module.run_command(
        ["systemctl", "list-units", "torch-job-*", "--all", "--no-legend", "--plain",
         "--state=active,activating,deactivating"]
    )  # fmt: skip
    return [line.split()[0] for line in out.splitlines() if line.strip()] if rc == 0 else []


def disk(base_dir: str) -> dict:
    path = base_dir
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    return {"disk_free_gib": shutil.disk_usage(path).free / 2**30, "disk_path": path}


def clock_offsets(peers: dict[str, str], user: str) -> dict[str, float | None]:
    """Each peer's clock minus this node's, in seconds (None: no answer)."""
    prefix = runuser_prefix(user)

    def measure(name: str) -> float | None:
        return clock_offset([*prefix, *ssh_argv(peers[name], ["python3", "-c", CLOCK_ECHO])])

    if not peers:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(peers))) as pool:
        return dict(zip(peers, pool.map(measure, peers)))


def system_nccl(module: AnsibleModule) -> str:
    """The system libnccl (the nccl role's), beside the NCCL torch bundles: 'none' without one."""
    query = installed_query(bool(shutil.which("rpm") and shutil.which("dnf")))
    if not shutil.which(query[0]):
        return "none"
    rc, out, _ = module.run_command(query)
    build = installed_build(out) if rc == 0 else {}
    return f"{build['version']} (CUDA {build['cuda']})" if build else "none"


def slurm_nodes(module: AnsibleModule) -> dict:
    """On the master, where Slurm is set up: every Slurm node's state and reason."""
    sinfo = shutil.which("sinfo")
    if not sinfo:
        return {}
    rc, out, _ = module.run_command(
        [sinfo, "--noheader", "--Node", f"--format={SINFO_NODES_FORMAT}"]
    )
    return parse_sinfo_nodes(out) if rc == 0 else {}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **node_paths_argument_spec(),
            "base_dir": {"type": "path", "default": "/var/lib/torch-cluster"},
            "port": {"type": "int", "default": 0},
            "peers": {"type": "dict", "default": {}},
            "ssh_user": {"type": "str", "default": "root"},
            "shared_dir": {"type": "str", "default": "auto"},
            "limit_memlock": {"type": "str", "default": LIMIT_MEMLOCK},
            "limit_nofile": {"type": "int", "default": LIMIT_NOFILE},
            "dcgm_diag": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    os_name = platform.platform()
    try:
        with open("/etc/os-release") as handle:
            fields = dict(line.strip().split("=", 1) for line in handle if "=" in line)
        os_name = fields.get("PRETTY_NAME", os_name).strip('"')
    except OSError:
        pass
    node = {
        "os": os_name,
        "kernel": platform.release(),
        "rdma_nics": sorted(os.listdir("/sys/class/infiniband"))
        if os.path.isdir("/sys/class/infiniband")
        else [],
        "rdma_ports": rdma_ports(),
        "diagnostics": diagnostics(),
        "units": active_job_units(module),
        "processes": job_processes(None),
        "port_users": port_listeners(p["port"]) if p["port"] else [],
        "slurm_nodes": slurm_nodes(module) if p["port"] else {},
        "clock_offsets": clock_offsets(p["peers"], p["ssh_user"]),
        "system_nccl": system_nccl(module),
        "shared_dir": resolve_shared_dir(p["shared_dir"], p["shared_fact"]),
        "job_limits": unit_limits(p["limit_memlock"], p["limit_nofile"]),
        **disk(p["base_dir"]),
        **nvidia(p["gpu_dir"]),
        **torch_report(p["environment_fact"]),
    }
    if p["dcgm_diag"] and shutil.which("dcgmi"):
        text = _output(["dcgmi", "diag", "-r", "1"], timeout=600)
        node["dcgm_failures"] = dcgm_failures(text) if text else ["dcgmi diag -r 1: no result"]
        node["diagnostics"]["dcgmi-diag-r1.txt"] = text
    module.exit_json(changed=False, node=node)


if __name__ == "__main__":
    main()
