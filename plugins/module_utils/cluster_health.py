"""What the cluster health check (playbooks/check.yml) decides, in plain Python.

Each check turns what the nodes reported into Findings: one failure each, naming the node or
the pair, the measured value, the limit it broke, and what to do about it. The modules of the
check role gather the facts; tests/unit tests these functions table by table. Standard
library only: it also runs on the nodes' system Python.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# From the repository (ansible.cfg's module_utils path), else from the installed
# torch_cluster.cluster collection.
try:
    from ansible.module_utils.check_floors import floor_problems
    from ansible.module_utils.shared_storage import describe_mount
except ImportError:
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.check_floors import (
        floor_problems,
    )
    from ansible_collections.torch_cluster.cluster.plugins.module_utils.shared_storage import (
        describe_mount,
    )

# What must be the same on every node: a collective between different builds fails or hangs.
MUST_MATCH = ("torch", "cuda", "nccl", "python")
PROVISION_HINT = "run playbooks/provision.yml"


@dataclass(frozen=True)
class Finding:
    # versions, environment, gpus, reachability, clock, leftovers, disk, limits, collectives
    check: str
    subject: str  # a node, or a pair "node0 -> node1"
    value: str  # what was measured
    limit: str  # what it should have been
    fix: str

    def line(self) -> str:
        return f"{self.subject}: {self.value} (limit: {self.limit}); {self.fix}"

    def as_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


def _majority(values: Mapping[str, str]) -> str:
    counts: dict[str, int] = {}
    for value in values.values():
        counts[value] = counts.get(value, 0) + 1
    return max(counts, key=lambda value: (counts[value], value))


def environment_findings(rows: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """Nodes whose training environment is missing or does not import torch."""
    return [
        Finding(
            "environment",
            name,
            row.get("torch_error") or "no training environment",
            "torch imports in the training environment",
            PROVISION_HINT + " for this node",
        )
        for name, row in rows.items()
        if not row.get("torch")
    ]


def version_findings(rows: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """A build that differs from the other nodes' names the odd node (the majority wins; on
    a tie every node is named)."""
    findings = []
    with_env = {name: row for name, row in rows.items() if row.get("torch")}
    for key in MUST_MATCH:
        values = {name: str(row.get(key) or "none") for name, row in with_env.items()}
        if len(set(values.values())) < 2:
            continue
        common = _majority(values)
        tie = list(values.values()).count(common) * 2 <= len(values)
        for name, value in values.items():
            if tie or value != common:
                findings.append(
                    Finding(
                        "versions",
                        name,
                        f"{key} {value}",
                        f"{key} {common} as on the others",
                        "set the same pytorch_* versions for every node and " + PROVISION_HINT,
                    )
                )
    return findings


def gpu_findings(rows: Mapping[str, Mapping[str, Any]], nproc: Mapping[str, str]) -> list[Finding]:
    findings = []
    for name, row in rows.items():
        driver, seen = int(row.get("driver_gpus") or 0), int(row.get("torch_gpus") or 0)
        if driver and row.get("torch") and seen < driver:
            findings.append(
                Finding(
                    "gpus",
                    name,
                    f"torch sees {seen} of {driver} GPUs",
                    f"{driver}",
                    "install an NVIDIA driver new enough for the CUDA build, or pick an older "
                    "pytorch_cuda_variant",
                )
            )
        wanted = str(nproc.get(name, "auto"))
        if driver and wanted.isdigit() and int(wanted) > driver:
            findings.append(
                Finding(
                    "gpus",
                    name,
                    f"nproc {wanted}",
                    f"at most {driver} (its GPUs)",
                    "lower nproc for this host",
                )
            )
        for key, what in (
            ("ecc_uncorrected", "uncorrectable ECC errors"),
            ("remaps_pending", "pending row remaps"),
        ):
            if int(row.get(key) or 0) > 0:
                findings.append(
                    Finding(
                        "gpus",
                        name,
                        f"{row[key]} {what}",
                        "0",
                        "drain the node and reset or replace the GPU",
                    )
                )
    return findings


def reach_findings(results: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Finding]:
    """Each connection a node could not open to a peer, as "node0 -> node1: port P blocked"."""
    return [
        Finding(
            "reachability",
            f"{name} -> {attempt['peer']}",
            f"port {attempt['port']} blocked ({attempt['outcome']})",
            "connected",
            f"the firewall of {attempt['peer']} must trust {name}: is {name} in the training "
            f"group, and was playbooks/provision.yml run since? (firewall-cmd "
            f"--zone=torch-cluster --list-sources on {attempt['peer']})",
        )
        for name, attempts in results.items()
        for attempt in attempts
        if attempt["outcome"] != "connected"
    ]


def clock_findings(offsets: Mapping[str, float | None], master: str, limit: float) -> list[Finding]:
    findings = []
    for name, offset in offsets.items():
        if offset is None:
            findings.append(
                Finding(
                    "clock",
                    name,
                    "not measured (no answer over SSH)",
                    f"within {limit:g} s of {master}",
                    "check SSH trust from the master (provision.yml)",
                )
            )
        elif abs(offset) > limit:
            findings.append(
                Finding(
                    "clock",
                    name,
                    f"{offset:+.3f} s from {master}",
                    f"within {limit:g} s",
                    "enable time sync (chronyd) on every node",
                )
            )
    return findings


def leftover_findings(rows: Mapping[str, Mapping[str, Any]], port: int) -> list[Finding]:
    findings = []
    for name, row in rows.items():
        for unit in row.get("units") or []:
            findings.append(
                Finding(
                    "leftovers",
                    name,
                    f"job unit {unit} still active",
                    "none",
                    "ansible-playbook playbooks/stop.yml -e job_id="
                    + unit.removeprefix("torch-job-").removesuffix(".service"),
                )
            )
        for process in row.get("processes") or []:
            findings.append(
                Finding(
                    "leftovers",
                    name,
                    f"training process left: {process}",
                    "none",
                    "stop its job (playbooks/stop.yml) or kill the process",
                )
            )
        for user in row.get("port_users") or []:
            findings.append(
                Finding(
                    "leftovers",
                    name,
                    f"master port {port} in use by {user}",
                    "free",
                    "stop what listens there, or choose another cluster_master_port",
                )
            )
    return findings


def disk_findings(rows: Mapping[str, Mapping[str, Any]], min_free_gib: float) -> list[Finding]:
    return [
        Finding(
            "disk",
            name,
            f"{row['disk_free_gib']:.1f} GiB free in {row.get('disk_path', '')}",
            f"at least {min_free_gib:g} GiB",
            "free space, or set train_node_base_dir elsewhere",
        )
        for name, row in rows.items()
        if row.get("disk_free_gib") is not None and row["disk_free_gib"] < min_free_gib
    ]


def shared_findings(shared: Mapping[str, Any], min_free_gib: float) -> list[Finding]:
    """The shared folder's proof (plugins/modules/shared_dir_proof.py): each node that cannot
    write there or sees another filesystem, and a folder short of free space."""
    path = shared.get("path", "")
    findings = [
        Finding(
            "shared folder",
            problem["node"],
            problem["problem"],
            f"every node writes to {path} and reads every node's file there",
            "mount the shared folder there (playbooks/provision.yml), or check its permissions",
        )
        for problem in shared.get("problems") or []
    ]
    free = [w["free_gib"] for w in (shared.get("writes") or {}).values() if w.get("ok")]
    if free and min(free) < min_free_gib:
        findings.append(
            Finding(
                "shared folder",
                path,
                f"{min(free):.1f} GiB free",
                f"at least {min_free_gib:g} GiB",
                "free space on the shared folder's server",
            )
        )
    return findings


def shared_lines(shared: Mapping[str, Any]) -> list[str]:
    """The shared folder, one line per node: what is mounted there, its free space and the
    node's write throughput."""
    if not shared:
        return []
    lines = [f"Shared folder {shared['path']}:"]
    for name, wrote in (shared.get("writes") or {}).items():
        if "ok" not in wrote:
            lines.append(f"  {name}: no answer")
            continue
        where = describe_mount(wrote.get("mount") or {})
        speed = wrote.get("write_mb_s")
        lines.append(
            f"  {name}: {where}, {_cell(wrote.get('free_gib'))} GiB free, "
            + (f"write {speed:.1f} MB/s" if speed is not None else "write not measured")
            + ("" if wrote.get("ok") else f" (cannot write: {wrote.get('error')})")
        )
    return lines


# systemd's size suffixes (base 1024), as LimitMEMLOCK= takes them.
_SIZE_SUFFIXES = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def limit_number(value: int | str) -> float:
    """A resource limit as a number: infinity (or unlimited) is math.inf; a size may carry
    systemd's K, M, G or T. ValueError for anything else."""
    text = str(value).strip()
    if text in ("infinity", "unlimited"):
        return math.inf
    if text[-1:].upper() in _SIZE_SUFFIXES and text[:-1].isdigit():
        return int(text[:-1]) * _SIZE_SUFFIXES[text[-1:].upper()]
    if text.isdigit():
        return int(text)
    raise ValueError(f"not a limit: {value!r}")


def _limit_text(key: str, value: int | str) -> str:
    number = limit_number(value)
    if number == math.inf:
        return "unlimited"
    if key != "memlock":
        return f"{number:.0f}"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if number >= size and number % size == 0:
            return f"{number / size:.0f} {unit}"
    return f"{number:.0f} B"


_LIMIT_PROPERTIES = {"memlock": "LimitMEMLOCK", "nofile": "LimitNOFILE"}
_LIMIT_WHY = {
    "memlock": "NCCL over InfiniBand or RoCE fails in ibv_reg_mr under it. ",
    "nofile": "",
}


def limit_findings(
    rows: Mapping[str, Mapping[str, Any]], min_memlock: str = "", min_nofile: int = 0
) -> list[Finding]:
    """Nodes whose job units get a memlock or nofile limit below the minimum: by default what
    the launcher asks for (the probe's transient unit asked the same), so that a unit that
    did not get what it asked for is named."""
    findings = []
    for name, row in rows.items():
        limits = row.get("job_limits") or {}
        if limits.get("error"):
            findings.append(
                Finding(
                    "limits",
                    name,
                    f"a job unit's limits not read ({limits['error']})",
                    "a transient unit's /proc/self/limits",
                    "the launcher starts every job with systemd-run: check systemd on the node "
                    "(systemd-run --wait --pipe true)",
                )
            )
            continue
        asked = limits.get("asked") or {}
        for key, given in (("memlock", min_memlock), ("nofile", min_nofile)):
            minimum = given or asked.get(key)
            if key not in limits or not minimum:
                continue
            floor = limit_number(minimum)
            if limit_number(limits[key]) >= floor:
                continue
            what = f"{_LIMIT_PROPERTIES[key]}={asked.get(key)}" if asked.get(key) else "nothing"
            findings.append(
                Finding(
                    "limits",
                    name,
                    f"{key} {_limit_text(key, limits[key])} in a job unit (it asked for {what})",
                    "unlimited" if floor == math.inf else f"at least {_limit_text(key, minimum)}",
                    f"{_LIMIT_WHY[key]}systemd gives a unit no more than its own hard limit "
                    "where it may not raise it (a container without CAP_SYS_RESOURCE): raise "
                    f"the {key} limit that systemd runs with on {name} (a container's --ulimit "
                    f"{key}={-1 if floor == math.inf else int(floor)}); limits.conf does not "
                    "reach units",
                )
            )
    return findings


def limit_lines(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The limits a job unit gets, one line per node, after what the units ask for."""
    measured = {name: row["job_limits"] for name, row in rows.items() if row.get("job_limits")}
    if not measured:
        return []
    asked = next(iter(measured.values())).get("asked") or {}
    wanted = ", ".join(f"{key} {_limit_text(key, value)}" for key, value in asked.items() if value)
    lines = [f"Job unit limits (asked: {wanted or 'nothing'}):"]
    for name, limits in measured.items():
        if limits.get("error"):
            lines.append(f"  {name}: not read ({limits['error']})")
            continue
        got = ", ".join(f"{key} {_limit_text(key, limits[key])}" for key in _LIMIT_PROPERTIES)
        lines.append(f"  {name}: {got}")
    return lines


def transport_findings(
    rows: Mapping[str, Mapping[str, Any]], transports: Mapping[str, str]
) -> list[Finding]:
    """NCCL over sockets where RDMA NICs exist: the job runs, at a fraction of its speed."""
    return [
        Finding(
            "collectives",
            name,
            f"NCCL transport {transports[name]}",
            "IB (RDMA NICs present)",
            "install the RDMA userspace (rdma-core) and check NCCL_IB_HCA; see NCCL_DEBUG=INFO",
        )
        for name, row in rows.items()
        if row.get("rdma_nics") and transports.get(name, "").lower().startswith("socket")
    ]


def round_robin(names: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every pair of nodes exactly once, in rounds of disjoint pairs (the circle method):
    n - 1 rounds for an even n, n for an odd one."""
    players: list[str | None] = list(names) + ([None] if len(names) % 2 else [])
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return [r for r in rounds if r]


def bandwidth_findings(
    measured: Mapping[str, float],
    baseline: Mapping[str, float],
    fraction_of_baseline: float,
    fraction_of_median: float,
    what: str,
) -> list[Finding]:
    """Figures (subject -> bytes/s) below a fraction of the cluster's saved baseline, or,
    without one, below a fraction of the median of the same figures."""
    if not measured:
        return []
    median = statistics.median(measured.values())
    findings = []
    for subject, value in measured.items():
        if subject in baseline:
            limit, why = (
                fraction_of_baseline * baseline[subject],
                f"{fraction_of_baseline:.0%} of the baseline",
            )
        else:
            limit, why = fraction_of_median * median, f"{fraction_of_median:.0%} of the median"
        if value < limit:
            findings.append(
                Finding(
                    "collectives",
                    subject,
                    f"{what} {_rate(value)}",
                    f"{_rate(limit)}, {why}",
                    "check that link: cabling, NIC speed (ethtool), traffic shaping (tc), "
                    "and NCCL_SOCKET_IFNAME",
                )
            )
    return findings


def slow_nodes(direction_findings: Sequence[Finding], nodes: Sequence[str]) -> list[Finding]:
    """A node all of whose sends (or receives) are slow is the slow one, not its links. A
    slow receiver whose slow receives all come from slow senders is not blamed twice; with
    two nodes the check cannot tell one's sending from the other's receiving, and says so."""
    slow = {finding.subject: finding for finding in direction_findings}

    def all_slow(subjects: list[str]) -> bool:
        return bool(subjects) and all(subject in slow for subject in subjects)

    senders = [n for n in nodes if all_slow([f"{n} -> {p}" for p in nodes if p != n])]
    found = []
    for node in nodes:
        peers = [peer for peer in nodes if peer != node]
        receives = [f"{peer} -> {node}" for peer in peers]
        for side, subjects in (
            ("sends", [f"{node} -> {p}" for p in peers]),
            ("receives", receives),
        ):
            if not all_slow(subjects):
                continue
            if side == "receives" and all(peer in senders for peer in peers):
                continue
            values = "; ".join(f"{s}: {slow[s].value}" for s in subjects)
            note = (
                f" (or {peers[0]} {'receives' if side == 'sends' else 'sends'} slowly: with two "
                "nodes the check cannot tell which)"
                if len(nodes) == 2
                else ""
            )
            found.append(
                Finding(
                    "collectives",
                    node,
                    f"{side} slowly to every peer{note}: {values}",
                    slow[subjects[0]].limit,
                    f"{node}'s network is the slow part: check its NIC, its link speed (ethtool) "
                    "and any traffic shaping (tc)",
                )
            )
    return found


def nccl_transport(log: str) -> str:
    """The network transport NCCL chose, from its NCCL_DEBUG=INFO lines ("via NET/IB/0",
    "via NET/Socket/0"); "" when the log has none (gloo, or one node)."""
    found = re.search(r"via NET/([A-Za-z]+)", log)
    return found.group(1) if found else ""


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e6:.1f} MB/s"


def check_input_problems(inputs: Mapping[str, Any]) -> list[str]:
    """One sentence per bad input of the check."""
    problems = []
    for name in ("check_fraction_of_baseline", "check_fraction_of_median"):
        try:
            value = float(inputs[name])
        except (KeyError, TypeError, ValueError):
            value = -1.0
        if not 0 < value < 1:
            problems.append(f"{name} must be a number between 0 and 1 (got {inputs.get(name)!r})")
    sizes = inputs.get("check_message_sizes")
    if (
        not isinstance(sizes, list)
        or not sizes
        or not all(
            isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in sizes
        )
    ):
        problems.append(
            f"check_message_sizes must be a list of positive sizes in bytes (got {sizes!r})"
        )
    try:
        free = float(inputs.get("check_min_free_gib", 0))
    except (TypeError, ValueError):
        free = -1.0
    if free < 0:
        given = inputs.get("check_min_free_gib")
        problems.append(f"check_min_free_gib must be a number of GiB, 0 or more (got {given!r})")
    mib = str(inputs.get("check_shared_write_mib", 0))
    if not mib.isdigit():
        problems.append(f"check_shared_write_mib must be a whole number, 0 or more (got {mib!r})")
    memlock = inputs.get("check_min_memlock", "")
    try:
        if memlock != "":
            limit_number(memlock)
    except ValueError:
        problems.append(
            "check_min_memlock must be empty, infinity, or bytes with an optional K, M, G or T "
            f"(got {memlock!r})"
        )
    nofile = str(inputs.get("check_min_nofile", 0))
    if not nofile.isdigit():
        problems.append(f"check_min_nofile must be a whole number, 0 or more (got {nofile!r})")
    problems += floor_problems(inputs.get("check_floors", []))
    return problems


def collective_figures(report: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The collectives script's report, by node name: the group's sweep, each pair's busbw at
    the largest size, each direction's one-way bandwidth and, where measured, each node's
    all_reduce over all its ranks, its slowest GPU's host-to-GPU copy, its PCIe reading under
    load and its NVLink error counters after the load (nvidia-smi nvlink -e's text)."""
    pairs, directions = {}, {}
    for key, result in report.get("pairs", {}).items():
        a, b = (names[int(i)] for i in key.split("-"))
        pairs[f"{a} <-> {b}"] = result["sweep"][-1]["busbw"]
        if "forward" in result:
            directions[f"{a} -> {b}"] = result["forward"]
        if "backward" in result:
            directions[f"{b} -> {a}"] = result["backward"]
    by_node = {
        key: {names[int(node)]: value for node, value in (report.get(key) or {}).items()}
        for key in ("inside_nodes", "h2d", "pcie_under_load", "nvlink_errors_after")
    }
    inside = {name: row["busbw"] for name, row in by_node["inside_nodes"].items()}
    return {
        "group": report.get("group", []),
        "pairs": pairs,
        "directions": directions,
        "inside_nodes": inside,
        "h2d": by_node["h2d"],
        "pcie_under_load": by_node["pcie_under_load"],
        "nvlink_errors_after": by_node["nvlink_errors_after"],
    }


def collective_findings(
    figures: Mapping[str, Any],
    baseline: Mapping[str, Any],
    names: Sequence[str],
    fraction_of_baseline: float,
    fraction_of_median: float,
) -> list[Finding]:
    """Slow nodes first (all their sends or receives slow), then slow directions and pairs."""
    directions = bandwidth_findings(
        figures["directions"],
        baseline.get("directions", {}),
        fraction_of_baseline,
        fraction_of_median,
        "one way",
    )
    pairs = bandwidth_findings(
        figures["pairs"],
        baseline.get("pairs", {}),
        fraction_of_baseline,
        fraction_of_median,
        "all_reduce busbw",
    )
    group = {}
    if figures["group"] and baseline.get("group"):
        group = {"the whole group": figures["group"][-1]["busbw"]}
    whole = bandwidth_findings(
        group,
        {"the whole group": baseline.get("group", 0.0)},
        fraction_of_baseline,
        1.0,
        "all_reduce busbw",
    )
    return [*slow_nodes(directions, names), *directions, *pairs, *whole]


def _cell(value: Any) -> str:
    return str(value) if value not in (None, "") else "-"


def node_table(
    rows: Mapping[str, Mapping[str, Any]],
    transports: Mapping[str, str],
    offsets: Mapping[str, float | None],
) -> list[str]:
    """One line per node: the versions side by side, the clock against the master's (the
    first node), the free disk and the number of leftovers."""
    columns = (
        "node", "os", "kernel", "driver", "gpus (driver/torch)", "torch", "cuda", "nccl",
        "system nccl", "python", "transport", "clock (s)", "free GiB", "leftovers",
    )  # fmt: skip
    table = [list(columns)]
    for position, (name, row) in enumerate(rows.items()):
        offset = offsets.get(name)
        clock = "master" if position == 0 else _cell(None if offset is None else f"{offset:+.3f}")
        free = row.get("disk_free_gib")
        table.append(
            [
                name,
                *(_cell(row.get(key)) for key in ("os", "kernel", "driver")),
                f"{row.get('driver_gpus', 0)}/{_cell(row.get('torch_gpus'))}",
                *(
                    _cell(row.get(key))
                    for key in ("torch", "cuda", "nccl", "system_nccl", "python")
                ),
                _cell(transports.get(name)),
                clock,
                _cell(None if free is None else f"{free:.1f}"),
                str(sum(len(row.get(key) or []) for key in ("units", "processes", "port_users"))),
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table
    ]


def markdown(
    title: str,
    table: Sequence[str],
    reach: Mapping[str, Sequence[Mapping[str, Any]]],
    figures: Mapping[str, Any],
    findings: Sequence[Finding],
    *,
    shared: Sequence[str] = (),
    limits: Sequence[str] = (),
) -> str:
    """report.md: the same facts as report.json, to read."""
    lines = [f"# {title}", "", "## Nodes", "", "```", *table, "```", ""]
    if shared:
        lines += ["## Shared folder", "", "```", *shared, "```", ""]
    if limits:
        lines += ["## Job unit limits", "", "```", *limits, "```", ""]
    lines += ["## Connections", "", "| from | to | port | outcome |", "| --- | --- | ---: | --- |"]
    lines += [
        f"| {name} | {attempt['peer']} | {attempt['port']} | {attempt['outcome']} |"
        for name, attempts in reach.items()
        for attempt in attempts
    ]
    lines.append("")
    if figures.get("group"):
        lines += [
            "## All-reduce, whole group",
            "",
            "| size (B) | time (us) | algbw (GB/s) | busbw (GB/s) |",
            "| ---: | ---: | ---: | ---: |",
        ]
        for row in figures["group"]:
            time_us, algbw, busbw = row["seconds"] * 1e6, row["algbw"] / 1e9, row["busbw"] / 1e9
            lines.append(f"| {row['size']} | {time_us:.1f} | {algbw:.3f} | {busbw:.3f} |")
        lines += [
            "",
            "## Pairs and directions",
            "",
            "| between | bandwidth (MB/s) |",
            "| --- | ---: |",
        ]
        lines += [
            f"| {k} (all_reduce busbw) | {v / 1e6:.1f} |" for k, v in figures["pairs"].items()
        ]
        lines += [f"| {k} (one way) | {v / 1e6:.1f} |" for k, v in figures["directions"].items()]
        lines.append("")
    lines += ["## Verdict", ""]
    lines += [f"- **{f.check}** {f.line()}" for f in findings] or ["Healthy: every check passed."]
    return "\n".join(lines) + "\n"
