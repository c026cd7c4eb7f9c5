#!/usr/bin/python
"""Ansible module: the health check's verdict, on the controller, from what the nodes reported."""

from __future__ import annotations

import datetime
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import (
    read_text,
    replace_text,
    write_json,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.bundle import (
    bundle_files,
    write_bundle,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.collectives import (
    collective_figures,
    collective_findings,
    nccl_transport,
    transport_findings,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.fabric import (
    floor_findings,
    hardware_findings,
    nvlink_error_findings,
    path_findings,
    pcie_load_findings,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.findings import (
    Finding,
    clock_findings,
    disk_findings,
    environment_findings,
    gpu_findings,
    leftover_findings,
    reach_findings,
    version_findings,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.floors import merged
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.limits import (
    limit_findings,
    limit_lines,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.node_health import (
    drained_findings,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.report import (
    markdown,
    node_table,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.shared_folder import (
    shared_findings,
    shared_lines,
)

DOCUMENTATION = r"""
module: cluster_health_report
short_description: Judge the health check's facts, and write report.json and report.md
description:
  - Turns each node's probe, the reachability attempts and the collectives' figures into
    findings (each with the node or pair, the value, the limit and the fix), a table of the
    nodes' versions, the limits a job unit gets on each node, and a verdict.
  - Relative thresholds come from the cluster's own figures; with I(save_baseline) the
    measured figures become the cluster's baseline, which later runs compare against.
  - Absolute floors (I(floors)) apply beside them, baseline or not, so that a cluster that is
    slow everywhere fails too, naming the floor and its source.
  - GPUs (PCIe width, and generation under load; slowdowns; persistence; NVLinks; XIDs),
    RDMA ports, and the network paths (MTU, don't-fragment pings, routes, hostnames).
options:
  nodes:
    description: The nodes, in rank order (the first is the master).
    type: list
    elements: str
    required: true
  probes:
    description: Each node's probe result (cluster_health_probe), by name.
    type: dict
    required: true
  reach:
    description: Each node's reachability result (cluster_health_reach), by name.
    type: dict
    required: true
  nproc:
    description: Each node's nproc setting, by name.
    type: dict
    default: {}
  port:
    description: The master port.
    type: int
    required: true
  collectives_file:
    description: The collectives script's collectives.json; empty when they did not run.
    type: str
    default: ""
  collectives_note:
    description: Why the collectives did not run, or how their job ended when it failed.
    type: str
    default: ""
  logs_dir:
    description: Where the collectives job's node logs are (NCCL's transport is read there).
    type: str
    default: ""
  fraction_of_baseline:
    description: A figure below this fraction of the baseline fails.
    type: float
    default: 0.8
  fraction_of_median:
    description: Without a baseline, a figure below this fraction of the median fails.
    type: float
    default: 0.5
  clock_limit:
    description: Seconds a node's clock may differ from the master's.
    type: float
    default: 1.0
  min_free_gib:
    description: Free GiB needed where jobs write (each node's base folder, the shared folder).
    type: float
    default: 10
  min_memlock:
    description:
      - The memlock limit a job unit must get (C(infinity), or bytes with an optional K, M, G
        or T); empty for what the launcher's units ask for (the probe's I(limit_memlock)).
    type: str
    default: ""
  min_nofile:
    description: The nofile limit a job unit must get; 0 for what the launcher's units ask for.
    type: int
    default: 0
  addresses:
    description: Each node's cluster address, by name (the routes toward peers must use it).
    type: dict
    default: {}
  floors:
    description: The table of floors (roles/check/vars/floors.yml, rows of health/floors.py).
    type: list
    elements: dict
    default: []
  floor_overrides:
    description: The inventory's floors; one named as a row of the table replaces it.
    type: list
    elements: dict
    default: []
  shared:
    description:
      - The shared folder's proof (path, problems, and each node's write step of
        shared_dir_proof); empty when there is no shared folder.
    type: dict
    default: {}
  baseline_file:
    description: The cluster's baseline (JSON); empty for none.
    type: str
    default: ""
  save_baseline:
    description: Store this run's figures as the baseline.
    type: bool
    default: false
  report_dir:
    description: Where report.json and report.md go.
    type: path
    required: true
  final:
    description:
      - False before the collectives, to learn whether they can run (every node has its
        environment and the same builds, every pair connects, the master port is free);
        nothing is written then.
    type: bool
    default: true
"""

RETURN = r"""
failed_checks:
  description: The findings, one dict each.
  type: list
  returned: always
lines:
  description: What the controller shows (the nodes' table, the pairs' figures, the verdict).
  type: list
  returned: always
collectives_ready:
  description: Whether the collectives can run (with I(final) false).
  type: bool
  returned: always
collectives_blocked_by:
  description: Why they cannot, in a sentence.
  type: str
  returned: always
"""


def load(path: str) -> dict:
    if not path or not os.path.exists(path):
        return {}
    with open(path) as handle:
        return json.load(handle)


def without_diagnostics(row: dict) -> dict:
    """A node's probe without the diagnostics' texts (they go to the bundle)."""
    return {key: value for key, value in row.items() if key != "diagnostics"}


def bundle(
    params: dict, rows: dict, logs: dict, report: dict, *, figures: dict, world: int, text: str
) -> str:
    """Write the support bundle next to the report; the line that names it."""
    files = bundle_files(
        rows,
        {name: read_text(path, errors="replace") for name, path in logs.items()}
        if params["logs_dir"]
        else {},
        report,
        figures,
        world,
    )
    path = os.path.join(params["report_dir"], "bundle.tar.gz")
    write_bundle(path, {**files, "report.md": text})
    return f"Support bundle (for NCCL's and our issue trackers): {path}"


def figure_lines(figures: dict) -> list[str]:
    """The collectives' figures, as the controller shows them."""
    if not figures:
        return []
    group = figures["group"][-1]
    lines = [f"all_reduce, whole group, {group['size']} B: busbw {group['busbw'] / 1e6:.1f} MB/s"]
    lines += [f"  {k}: all_reduce busbw {v / 1e6:.1f} MB/s" for k, v in figures["pairs"].items()]
    lines += [f"  {k}: one way {v / 1e6:.1f} MB/s" for k, v in figures["directions"].items()]
    lines += [
        f"  {k}: all_reduce over its ranks, busbw {v / 1e6:.1f} MB/s"
        for k, v in figures["inside_nodes"].items()
    ]
    lines += [
        f"  {k}: host-to-GPU copy {v / 1e9:.2f} GB/s (slowest GPU)"
        for k, v in figures["h2d"].items()
    ]
    return lines


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "list", "elements": "str", "required": True},
            "probes": {"type": "dict", "required": True},
            "reach": {"type": "dict", "required": True},
            "nproc": {"type": "dict", "default": {}},
            "port": {"type": "int", "required": True},
            "collectives_file": {"type": "str", "default": ""},
            "collectives_note": {"type": "str", "default": ""},
            "logs_dir": {"type": "str", "default": ""},
            "fraction_of_baseline": {"type": "float", "default": 0.8},
            "fraction_of_median": {"type": "float", "default": 0.5},
            "clock_limit": {"type": "float", "default": 1.0},
            "min_free_gib": {"type": "float", "default": 10},
            "min_memlock": {"type": "str", "default": ""},
            "min_nofile": {"type": "int", "default": 0},
            "addresses": {"type": "dict", "default": {}},
            "floors": {"type": "list", "elements": "dict", "default": []},
            "floor_overrides": {"type": "list", "elements": "dict", "default": []},
            "shared": {"type": "dict", "default": {}},
            "baseline_file": {"type": "str", "default": ""},
            "save_baseline": {"type": "bool", "default": False},
            "report_dir": {"type": "path", "required": True},
            "final": {"type": "bool", "default": True},
        },
        supports_check_mode=False,
    )
    p = module.params
    names, master = p["nodes"], p["nodes"][0]
    rows = {name: p["probes"].get(name, {}).get("node", {}) for name in names}
    unanswered = [name for name in names if not rows[name]]
    offsets = rows[master].get("clock_offsets", {}) if rows[master] else {}
    logs = {name: os.path.join(p["logs_dir"], f"{name}.log") for name in names}
    transports = {
        name: nccl_transport(read_text(path, errors="replace"))
        for name, path in logs.items()
        if p["logs_dir"]
    }
    reach = {name: (p["reach"].get(name) or {}).get("attempts", []) for name in names}
    findings = [
        *(
            Finding(
                "probe",
                name,
                "no answer",
                "an answer",
                "check that the node is up and reachable over SSH",
            )
            for name in unanswered
        ),
        *environment_findings({n: rows[n] for n in names if rows[n]}),
        *version_findings(rows),
        *gpu_findings(rows, {n: str(v) for n, v in p["nproc"].items()}),
        *reach_findings(reach),
        *[
            Finding("reachability", name, f"cannot listen: {error}", "a free port", "free the port")
            for name in names
            for error in (p["reach"].get(name) or {}).get("listen_errors", [])
        ],
        *clock_findings({n: offsets.get(n) for n in names[1:]}, master, p["clock_limit"]),
        *leftover_findings(rows, p["port"]),
        *disk_findings(rows, p["min_free_gib"]),
        *limit_findings(rows, p["min_memlock"], p["min_nofile"]),
        *transport_findings(rows, transports),
        *shared_findings(p["shared"], p["min_free_gib"]),
        *hardware_findings({n: rows[n] for n in names if rows[n]}),
        *drained_findings(rows[master].get("slurm_nodes") or {}, names),
        *path_findings(
            {n: (p["reach"].get(n) or {}).get("path") or {} for n in names}, p["addresses"]
        ),
    ]
    blocking = [
        f for f in findings if f.check in ("probe", "environment", "versions", "reachability")
    ]
    blocking += [f for f in findings if f.check == "leftovers" and "master port" in f.value]
    blocked_by = (
        "not run: " + "; ".join(f.subject + ": " + f.value for f in blocking[:3])
        if blocking
        else ""
    )
    if not p["final"]:
        module.exit_json(
            changed=False,
            failed_checks=[f.as_dict() for f in findings],
            lines=[],
            collectives_ready=not blocking,
            collectives_blocked_by=blocked_by,
        )
    baseline, baseline_note = load(p["baseline_file"]), ""
    if baseline and baseline.get("nodes") != names:
        # Figures of another set of nodes (more nodes share more): not this cluster's.
        saved_for = ", ".join(baseline.get("nodes") or []) or "another set of nodes"
        baseline_note = (
            f"The baseline {p['baseline_file']} was saved for {saved_for}, not for this group: "
            "compared with the medians instead (save a new one with -e check_save_baseline=true "
            "on a healthy run)."
        )
        baseline = {}
    collectives = load(p["collectives_file"])
    figures = collective_figures(collectives, names) if collectives else {}
    if figures:
        findings += collective_findings(
            figures, baseline, names, p["fraction_of_baseline"], p["fraction_of_median"]
        )
        floors = merged(p["floors"], p["floor_overrides"])
        findings += floor_findings(figures, rows, transports, floors)
        findings += pcie_load_findings(figures.get("pcie_under_load") or {})
        findings += nvlink_error_findings(
            {n: (rows[n] or {}).get("nvlink_errors") or {} for n in names},
            figures.get("nvlink_errors_after") or {},
        )
    elif p["collectives_note"]:
        findings.append(
            Finding(
                "collectives",
                "the whole group",
                p["collectives_note"],
                "a finished collectives job",
                "fix the failures above first",
            )
        )

    table = node_table(rows, transports, offsets)
    shared = shared_lines(p["shared"])
    limits = limit_lines(rows)
    lines = ["Nodes:", *table, *shared, *limits]
    lines += figure_lines(figures)
    lines += [baseline_note] if baseline_note else []
    lines += (
        [f"NOT HEALTHY: {len(findings)} failure(s)"]
        + [f"  [{f.check}] {f.line()}" for f in findings]
        if findings
        else ["HEALTHY: every check passed."]
    )

    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    report = {
        "time": now,
        "healthy": not findings,
        "nodes": {n: without_diagnostics(row) for n, row in rows.items()},
        "reachability": reach,
        "paths": {n: (p["reach"].get(n) or {}).get("path") or {} for n in names},
        "transports": transports,
        "collectives": figures,
        "shared": p["shared"],
        "baseline": baseline,
        "failures": [f.as_dict() for f in findings],
    }
    write_json(os.path.join(p["report_dir"], "report.json"), report)
    title = f"Cluster health, {now}: {'healthy' if not findings else 'NOT healthy'}"
    text = markdown(title, table, reach, figures, findings, shared=shared, limits=limits)
    replace_text(os.path.join(p["report_dir"], "report.md"), text)
    world = int(collectives.get("world_size") or 0)
    lines.append(bundle(p, rows, logs, report, figures=figures, world=world, text=text))
    if p["save_baseline"] and figures and not findings and p["baseline_file"]:
        saved = {
            "saved": now,
            "nodes": names,
            "group": figures["group"][-1]["busbw"],
            "pairs": figures["pairs"],
            "directions": figures["directions"],
        }
        write_json(p["baseline_file"], saved)
        lines.append(f"Saved as the cluster's baseline: {p['baseline_file']}")
    module.exit_json(
        changed=True,
        failed_checks=[f.as_dict() for f in findings],
        lines=lines,
        collectives_ready=not blocking,
        collectives_blocked_by=blocked_by,
    )


if __name__ == "__main__":
    main()
