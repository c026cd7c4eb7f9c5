"""The health check's GPU, fabric, path and floor judgements (module_utils/health/gpu.py, rdma.py,
floors.py, net_probe.py, net_path.py, fabric.py, bundle.py), on nvidia-smi's formats (fixtures
in data/gpu-health, see its README), sysfs trees and real sockets.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.bundle import (
    bundle_files,
    write_bundle,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.collectives import (
    bandwidth_findings,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.fabric import (
    fabric_problems,
    fabric_rate,
    floor_findings,
    hardware_findings,
    node_traits,
    nvlink_error_findings,
    parse_pcie_rows,
    pcie_load_findings,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.floors import (
    applies,
    binding,
    floor_problems,
    merged,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.gpu import (
    dcgm_failures,
    gpu_health_problems,
    inactive_nvlinks,
    nvlink_error_growth,
    parse_nvlink_errors,
    parse_nvlink_status,
    parse_smi_xml,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.inputs import (
    check_input_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.net_path import (
    common_mtu,
    path_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.net_probe import (
    checksum,
    df_ping,
    echo_request,
    is_reply,
    loopback_names,
    route_to,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.rdma import rdma_ports

DATA = Path(__file__).parents[1] / "data" / "gpu-health"
ROOT = Path(__file__).resolve().parents[3]
TABLE = yaml.safe_load((ROOT / "roles/check/vars/floors.yml").read_text())["__check_floor_table"]


# --- nvidia-smi -q -x ------------------------------------------------------------------------
def test_each_gpus_link_persistence_and_slowdowns_are_read() -> None:
    gpus = parse_smi_xml((DATA / "h100x2-one-faulty.xml").read_text())
    assert [g["name"] for g in gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert gpus[0] == {
        "bus_id": "00000000:19:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "persistence": "Enabled",
        "pcie_gen": 1,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "slowdowns": [],
    }
    assert gpus[1]["pcie_width"] == 8
    assert gpus[1]["slowdowns"] == ["HW slowdown", "HW thermal slowdown"]


def test_a_narrow_link_slowdowns_and_persistence_off_are_faults_and_idle_gen1_is_not() -> None:
    problems = gpu_health_problems(parse_smi_xml((DATA / "h100x2-one-faulty.xml").read_text()))
    found = [problem[0] for problem in problems]
    assert found == [
        "GPU 1 (00000000:3B:00.0) PCIe link x8",
        "GPU 1 (00000000:3B:00.0) slowed down: HW slowdown, HW thermal slowdown",
        "GPU 1 (00000000:3B:00.0) persistence mode off",
    ]
    assert problems[0][1] == "x16"


def test_an_older_drivers_throttle_reasons_are_read_and_a_power_cap_is_normal() -> None:
    gpus = parse_smi_xml((DATA / "a100-r470-healthy.xml").read_text())
    assert gpus[0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert gpus[0]["pcie_gen_max"] == 4
    assert gpus[0]["slowdowns"] == []
    assert gpu_health_problems(gpus) == []


def test_what_is_not_nvidia_smis_xml_gives_no_gpus() -> None:
    assert parse_smi_xml("NVIDIA-SMI has failed because it couldn't communicate") == []


# --- NVLink --------------------------------------------------------------------------------
def test_inactive_nvlinks_are_named_by_gpu() -> None:
    links = parse_nvlink_status((DATA / "nvlink-s-h100x2-two-down.txt").read_text())
    assert len(links["0"]) == 18
    assert inactive_nvlinks(links) == {"1": [4, 5]}


def test_a_pcie_gpu_without_active_nvlinks_is_not_a_fault() -> None:
    links = parse_nvlink_status((DATA / "nvlink-s-l40s-pcie.txt").read_text())
    assert links == {"0": {0: "<inactive>", 1: "<inactive>", 2: "<inactive>", 3: "<inactive>"}}
    assert inactive_nvlinks(links) == {}


# --- PCIe under load -------------------------------------------------------------------------
def test_a_link_below_its_generation_under_load_is_named_and_the_hosts_maximum_counts() -> None:
    readings = {"node0": (DATA / "pcie-under-load.csv").read_text()}
    findings = pcie_load_findings(readings)
    assert [(f.subject, f.value, f.limit) for f in findings] == [
        ("node0", "GPU 1 (00000000:3B:00.0) PCIe Gen3 under load", "Gen5")
    ]


def test_an_older_drivers_reading_without_the_hosts_maximum_is_read() -> None:
    rows = parse_pcie_rows((DATA / "pcie-under-load-r470.csv").read_text())
    assert rows == [
        {"index": "0", "bus_id": "00000000:07:00.0", "gen": 4, "gen_max": 4, "width": 16,
         "width_max": 16}
    ]  # fmt: skip


# --- RDMA ports (sysfs) ----------------------------------------------------------------------
def _port(root: Path, device: str, state: str, rate: str, layer: str, *, gids=()) -> None:
    folder = root / device / "ports" / "1"
    (folder / "gids").mkdir(parents=True)
    (folder / "gid_attrs" / "types").mkdir(parents=True)
    (folder / "state").write_text(state + "\n")
    (folder / "rate").write_text(rate + "\n")
    (folder / "link_layer").write_text(layer + "\n")
    for index, (gid, kind) in enumerate(gids):
        (folder / "gids" / str(index)).write_text(gid + "\n")
        (folder / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")


def test_rdma_ports_are_read_from_sysfs_and_faults_named(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")
    _port(tmp_path, "mlx5_1", "1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand")
    zero = "0000:0000:0000:0000:0000:0000:0000:0000"
    link_local = ("fe80:0000:0000:0000:0a5c:4bff:fe12:3456", "IB/RoCE v1")
    _port(tmp_path, "mlx5_2", "4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet",
          gids=[link_local, (zero, "RoCE v2")])  # fmt: skip
    _port(tmp_path, "mlx5_3", "4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet",
          gids=[("0000:0000:0000:0000:0000:ffff:0a00:0005", "RoCE v2")])  # fmt: skip
    ports = rdma_ports(str(tmp_path))
    assert [(p["device"], p["state"], p["rate_gbps"]) for p in ports] == [
        ("mlx5_0", "ACTIVE", 400.0),
        ("mlx5_1", "DOWN", 10.0),
        ("mlx5_2", "ACTIVE", 100.0),
        ("mlx5_3", "ACTIVE", 100.0),
    ]
    assert [p.get("roce_v2") for p in ports] == [None, None, False, True]
    assert [found for found, _, _ in fabric_problems(ports)] == [
        "mlx5_1 port 1 DOWN",
        "mlx5_2 port 1 (RoCE) has no RoCE v2 GID",
    ]
    assert fabric_rate(ports) == 400.0
    assert rdma_ports(str(tmp_path / "none")) == []


def test_a_node_whose_fabric_is_slower_than_most_is_named() -> None:
    rows = {
        name: {
            "rdma_ports": [
                {
                    "device": "mlx5_0",
                    "port": 1,
                    "state": "ACTIVE",
                    "rate_gbps": rate,
                    "link_layer": "InfiniBand",
                }
            ]
        }
        for name, rate in (("node0", 400.0), ("node1", 200.0), ("node2", 400.0))
    }
    findings = hardware_findings(rows)
    assert [(f.subject, f.value, f.limit) for f in findings] == [
        ("node1", "fastest RDMA port 200 Gb/s", "400 Gb/s, as on most nodes")
    ]


def test_xids_since_boot_and_inactive_nvlinks_are_findings() -> None:
    rows = {
        "node0": {"xids": ["XID 79 on PCI:0000:3b:00 (GPU has fallen off the bus.)"]},
        "node1": {"nvlinks_inactive": {"1": [4, 5]}},
        "node2": {},
    }
    found = [(f.check, f.subject, f.value) for f in hardware_findings(rows)]
    assert found == [
        ("gpus", "node0", "1 XID event(s) since boot: XID 79 on PCI:0000:3b:00 (GPU has fallen "
         "off the bus.)"),
        ("gpus", "node1", "GPU 1 NVLinks 4, 5 inactive"),
    ]  # fmt: skip


def test_nvlink_error_counters_are_read_per_gpu_and_link() -> None:
    counters = parse_nvlink_errors((DATA / "nvlink-e-h100x2-before.txt").read_text())
    assert sorted(counters) == ["0", "1"]
    assert len(counters["0"]) == 18
    assert counters["1"]["5"] == {"Replay Errors": 2, "Recovery Errors": 0, "CRC Errors": 40}
    # Every other link of both GPUs counts nothing.
    assert all(
        count == 0
        for gpu, links in counters.items()
        for link, names in links.items()
        if (gpu, link) != ("1", "5")
        for count in names.values()
    )


def test_a_newer_drivers_counters_are_read_and_its_bit_error_rates_are_not_counters() -> None:
    counters = parse_nvlink_errors((DATA / "nvlink-e-b200-newer-driver.txt").read_text())
    link = counters["0"]["1"]
    assert link["Link recovery failed events"] == 1
    assert link["Tx discards"] == 0
    assert "Effective BER" not in link
    assert "Symbol BER" not in link
    assert len(link) == 12


def test_only_nvlink_errors_that_grow_under_the_checks_load_are_findings() -> None:
    before = parse_nvlink_errors((DATA / "nvlink-e-h100x2-before.txt").read_text())
    after = (DATA / "nvlink-e-h100x2-after.txt").read_text()
    # An old burst (40 CRC errors since the driver loaded) alone is not a finding.
    assert (
        nvlink_error_findings(
            {"node0": before}, {"node0": (DATA / "nvlink-e-h100x2-before.txt").read_text()}
        )
        == []
    )
    found = nvlink_error_findings({"node0": before, "node1": before}, {"node0": after})
    assert [(f.check, f.subject, f.value) for f in found] == [
        (
            "gpus",
            "node0",
            "GPU 1 NVLink 5 errors grew under the check's load: Replay Errors +3 (now 5), "
            "CRC Errors +12 (now 52)",
        )
    ]
    # Counters reset between the readings (nvidia-smi nvlink -r): what they hold now grew.
    assert nvlink_error_growth(
        {"0": {"0": {"CRC Errors": 9}}}, {"0": {"0": {"CRC Errors": 4}}}
    ) == [("0", "0", "CRC Errors", 4, 4)]
    # No reading before (nvidia-smi nvlink -e failed then): nothing to compare with.
    assert nvlink_error_findings({}, {"node0": after}) == []


# --- floors ----------------------------------------------------------------------------------
def test_the_table_of_floors_is_well_formed_and_every_row_names_its_source() -> None:
    assert floor_problems(TABLE, "floors.yml") == []
    assert all(row.get("source") for row in TABLE)


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ("fast", "check_floors must be a list of floors"),
        ([{"pair_busbw_gbs": 1}], "check_floors[0] needs a name"),
        ([{"name": "x", "pair_bw": 1}], "check_floors[0] has unknown keys pair_bw"),
        ([{"name": "x", "pair_busbw_gbs": "fast"}], "check_floors[0].pair_busbw_gbs must be"),
        ([{"name": "x", "gpus": "8"}], "check_floors[0].gpus has the wrong type"),
    ],
)
def test_a_malformed_floor_is_refused_before_anything_runs(rows, problem: str) -> None:
    problems = floor_problems(rows)
    assert problems
    assert problems[0].startswith(problem)
    assert any(problem in p for p in check_input_problems(_inputs(check_floors=rows)))


def _inputs(**changes) -> dict:
    return {
        "check_fraction_of_baseline": 0.8,
        "check_fraction_of_median": 0.5,
        "check_message_sizes": [65536],
        "check_min_free_gib": 10,
        "check_shared_write_mib": 64,
        "check_min_memlock": "",
        "check_min_nofile": 0,
        **changes,
    }


H100_NODE = {"gpu_model": "NVIDIA H100 80GB HBM3", "driver_gpus": 8,
             "rdma_ports": [{"state": "ACTIVE", "rate_gbps": 400.0}]}  # fmt: skip


def test_a_uniformly_slow_cluster_fails_its_floors_without_a_baseline() -> None:
    """Every node's NVLink all_reduce at 300 GB/s and every pair at 20 GB/s: the relative
    rules see nothing (all alike); the floors name the node, the figure and the source."""
    rows = {"node0": H100_NODE, "node1": H100_NODE}
    figures = {
        "pairs": {"node0 <-> node1": 20e9},
        "inside_nodes": {"node0": 300e9, "node1": 300e9},
        "h2d": {"node0": 53e9, "node1": 53e9},
    }
    transports = {"node0": "IB", "node1": "IB"}
    assert bandwidth_findings(figures["inside_nodes"], {}, 0.8, 0.5, "x") == []
    findings = floor_findings(figures, rows, transports, TABLE)
    assert [(f.check, f.subject, f.value) for f in findings] == [
        ("floors", "node0 <-> node1",
         "all_reduce busbw between two nodes (one rank each: one NIC) 20 GB/s"),
        ("floors", "node0", "all_reduce busbw over every GPU of the node 300 GB/s"),
        ("floors", "node1", "all_reduce busbw over every GPU of the node 300 GB/s"),
    ]  # fmt: skip
    assert findings[0].limit.startswith("40 GB/s, the floor 'NDR InfiniBand (400 Gb/s), one NIC'")
    assert "nd96isr_h100_v5.conf" in findings[1].limit


def test_floors_match_by_model_count_nic_and_transport_only() -> None:
    row = {"name": "r", "gpu": "h100", "gpus": 8, "nic_rate_gbps": 400, "transport": "IB"}
    traits = {"gpu": "NVIDIA H100 80GB HBM3", "gpus": 8, "nic_rate_gbps": 400.0,
              "transport": "IB"}  # fmt: skip
    assert applies(row, traits)
    for key, other in (("gpu", "NVIDIA A100"), ("gpus", 4), ("nic_rate_gbps", 200.0),
                       ("transport", "Socket")):  # fmt: skip
        assert not applies(row, {**traits, key: other}), key
    assert applies({"name": "everywhere"}, {})


def test_the_inventorys_row_replaces_the_tables_of_its_name_and_the_highest_floor_binds() -> None:
    mine = [
        {"name": "8x H100 SXM (NVLink 4)", "gpu": "H100", "node_allreduce_busbw_gbs": 0},
        {"name": "above the sandbox", "pair_busbw_gbs": 1000},
        {"name": "low", "pair_busbw_gbs": 1},
    ]
    rows = merged(TABLE, mine)
    assert len(rows) == len(TABLE) + 2
    traits = node_traits({"node0": H100_NODE}, {"node0": "IB"})["node0"]
    assert binding(rows, "node_allreduce_busbw_gbs", [traits]) is None
    assert binding(rows, "pair_busbw_gbs", [traits, traits])["name"] == "above the sandbox"
    sandbox = {"gpu": "", "gpus": 0, "nic_rate_gbps": None, "transport": ""}
    assert binding(TABLE, "pair_busbw_gbs", [sandbox, sandbox]) is None


# --- the network path ------------------------------------------------------------------------
def test_the_clusters_mtu_is_the_most_common_and_the_largest_on_a_tie() -> None:
    assert common_mtu({"a": 9000, "b": 9000, "c": 1500}) == 9000
    assert common_mtu({"a": 1500, "b": 1400}) == 1500
    assert common_mtu({"a": None}) is None


def _path(mtu: int, df: str = "ok", src_ok: bool = True) -> dict:
    return {"dev": "eth0", "src": "10.0.0.9", "mtu": mtu, "df": df, "own_source": src_ok}


def test_a_node_with_another_mtu_and_the_pairs_whose_full_size_ping_is_lost_are_named() -> None:
    reports = {
        "node0": {"paths": {"node1": _path(1500, "no answer"), "node2": _path(1500)}},
        "node1": {"paths": {"node0": _path(1400), "node2": _path(1400)}},
        "node2": {
            "paths": {"node0": _path(1500), "node1": _path(1500, "no answer")},
            "loopback_hostname": ["127.0.1.1"],
        },
    }
    found = [(s, v) for s, v, _, _ in path_problems(reports, {})]
    assert found == [
        ("node1", "MTU 1400 on its training interface"),
        ("node0 -> node1", "a 1500-byte don't-fragment ping: no answer"),
        ("node2 -> node1", "a 1500-byte don't-fragment ping: no answer"),
        ("node2", "its hostname resolves to 127.0.1.1"),
    ]


def test_a_route_from_another_address_is_named() -> None:
    reports = {"node0": {"paths": {"node1": _path(1500, src_ok=False)}}}
    found = path_problems(reports, {"node0": "10.0.0.1"})
    assert found[0][:3] == (
        "node0 -> node1",
        "the route leaves by eth0 from 10.0.0.9",
        "from its cluster address 10.0.0.1",
    )


def test_an_echo_request_carries_a_valid_checksum_and_its_reply_is_recognised() -> None:
    packet = echo_request(0x1234, 7, bytes(32))
    assert checksum(packet) == 0
    reply = bytes([0x45]) + bytes(19) + bytes([0, 0, 0, 0, 0x12, 0x34, 0, 7]) + bytes(32)
    assert is_reply(reply, 0x1234, 7)
    assert not is_reply(reply, 0x1234, 8)


@pytest.mark.skipif(os.geteuid() != 0, reason="a raw ICMP socket needs root")
def test_a_full_size_dont_fragment_echo_crosses_loopback() -> None:
    assert route_to("127.0.0.1")["dev"] == "lo"
    assert df_ping("127.0.0.1", 1500) == "ok"
    assert df_ping("127.0.0.1", 65535) == "ok"


def test_the_hostnames_loopback_addresses_are_found() -> None:
    assert loopback_names("localhost")
    assert loopback_names("no-such-host.invalid") == []
    subprocess.run(["true"], check=True)


# --- the support bundle ----------------------------------------------------------------------
def test_the_bundle_holds_each_nodes_diagnostics_logs_and_nccl_tests_figures(
    tmp_path: Path,
) -> None:
    rows = {
        "node0": {"torch": "2.14.1", "diagnostics": {"nvidia-smi-topo-m.txt": "GPU0 X NV18\n"}},
        "node1": {"torch": "2.14.1"},
    }
    group = [{"size": 65536, "seconds": 1.2e-4, "algbw": 0.546e9, "busbw": 0.819e9}]
    logs = {"node0": "NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n", "node1": ""}
    files = bundle_files(rows, logs, {"healthy": True}, {"group": group}, 4)
    path = tmp_path / "bundle.tar.gz"
    assert write_bundle(str(path), files) == len(files)
    with tarfile.open(path) as bundle:
        names = sorted(bundle.getnames())
        perf = bundle.extractfile("all_reduce_perf.txt").read().decode()
        log = bundle.extractfile("nodes/node0/collectives.log").read().decode()
    assert names == [
        "all_reduce_perf.txt",
        "nodes/node0/collectives.log",
        "nodes/node0/nvidia-smi-topo-m.txt",
        "nodes/node0/versions.json",
        "nodes/node1/versions.json",
        "report.json",
    ]
    assert "via NET/IB/0" in log
    row = perf.splitlines()[-1].split()
    assert row == ["65536", "16384", "float", "sum", "-1", "120.0", "0.55", "0.82", "N/A"]


def test_dcgms_failed_tests_are_read_and_named() -> None:
    text = (DATA / "dcgmi-diag-r1-pcie-fail.txt").read_text()
    assert dcgm_failures(text) == ["Page Retirement/Row Remap: Fail - GPU 1"]
    findings = hardware_findings({"node3": {"dcgm_failures": dcgm_failures(text)}})
    assert [(f.subject, f.value) for f in findings] == [
        ("node3", "DCGM's quick diagnostic failed: Page Retirement/Row Remap: Fail - GPU 1")
    ]
