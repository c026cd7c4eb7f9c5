"""What the health check reads of a node's GPUs beyond ECC, and the problems it finds there:
- `nvidia-smi -q -x`: each GPU's model, persistence mode, PCIe link (generation and width,
  current against the most that the GPU and the host allow) and active clock event (throttle)
  reasons;
- `nvidia-smi nvlink -s`: each NVLink's state;
- `nvidia-smi nvlink -e`: each NVLink's error counters (replay, recovery, CRC), read before the
  collectives and again after them, so that a link whose errors grow under load is named;
- DCGM's diagnostic (`dcgmi diag -r 1`). cluster_health_probe runs the commands on each node;
  cluster_health_report turns the results into findings. Standard library only: it runs on the
  nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

# Clock event reasons that mean the GPU is slowed down by a fault or by its cooling, not by
# its workload or settings (nvidia-smi's "Clocks Event Reasons"; older drivers call the
# section "Clocks Throttle Reasons"). SW power cap, idle and application clocks are normal.
SLOWDOWN_REASONS = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown",
    "sw_thermal_slowdown": "SW thermal slowdown",
}


def _text(element: ET.Element | None, path: str) -> str:
    found = element.find(path) if element is not None else None
    return (found.text or "").strip() if found is not None and found.text else ""


def _number(text: str) -> int | None:
    match = re.match(r"\s*(\d+)", text or "")
    return int(match.group(1)) if match else None


def parse_smi_xml(text: str) -> list[dict[str, Any]]:
    """One dict per GPU of `nvidia-smi -q -x`: bus id, name, persistence, the PCIe link's
    current and best generation and width, and the active slowdown reasons."""
    try:
        root = ET.fromstring(text)  # nvidia-smi's own output
    except ET.ParseError:
        return []
    gpus = []
    for gpu in root.findall("gpu"):
        link = gpu.find("pci/pci_gpu_link_info")
        gen = link.find("pcie_gen") if link is not None else None
        widths = link.find("link_widths") if link is not None else None
        # The best generation the pair allows: the GPU's and the host's maxima where the
        # driver gives both (R535 and later), else the GPU's.
        best_gen = [
            _number(_text(gen, key))
            for key in ("max_device_link_gen", "max_host_link_gen")
            if _number(_text(gen, key))
        ] or [_number(_text(gen, "max_link_gen"))]
        reasons = gpu.find("clocks_event_reasons")
        if reasons is None:
            reasons = gpu.find("clocks_throttle_reasons")
        active = []
        for child in list(reasons) if reasons is not None else []:
            key = re.sub(r"^clocks?_(event|throttle)_reasons?_", "", child.tag)
            if key in SLOWDOWN_REASONS and (child.text or "").strip() == "Active":
                active.append(SLOWDOWN_REASONS[key])
        gpus.append(
            {
                "bus_id": gpu.get("id", ""),
                "name": _text(gpu, "product_name"),
                "persistence": _text(gpu, "persistence_mode"),
                "pcie_gen": _number(_text(gen, "current_link_gen")),
                "pcie_gen_max": min((g for g in best_gen if g), default=None),
                "pcie_width": _number(_text(widths, "current_link_width")),
                "pcie_width_max": _number(_text(widths, "max_link_width")),
                "slowdowns": active,
            }
        )
    return gpus


_NVLINK_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: [^)]*\))?\s*$")


_NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.*)$")


def _nvlink_blocks(text: str) -> Iterator[tuple[str, str | None, str | None]]:
    """What `nvidia-smi nvlink` prints, GPU by GPU: (GPU index, None, None) at each GPU's
    header, then (GPU index, link index, the rest of the line) for each of its link lines."""
    current = None
    for line in text.splitlines():
        gpu = _NVLINK_GPU.match(line)
        if gpu:
            current = gpu.group(1)
            yield current, None, None
            continue
        link = _NVLINK_LINK.match(line)
        if link and current is not None:
            yield current, link.group(1), link.group(2)


def parse_nvlink_status(text: str) -> dict[str, dict[int, str]]:
    """`nvidia-smi nvlink -s`: GPU index -> link -> its speed ("26.562 GB/s") or
    "<inactive>"."""
    links: dict[str, dict[int, str]] = {}
    for gpu, link, rest in _nvlink_blocks(text):
        states = links.setdefault(gpu, {})
        if link is not None:
            states[int(link)] = rest.strip()
    return links


def inactive_nvlinks(links: Mapping[str, Mapping[int, str]]) -> dict[str, list[int]]:
    """The links reported inactive on GPUs that have NVLinks at all, where some GPU of the
    node has active ones (a PCIe-only GPU lists none, or all inactive on every GPU)."""
    if not any("inactive" not in state for states in links.values() for state in states.values()):
        return {}
    return {
        gpu: sorted(n for n, state in states.items() if "inactive" in state)
        for gpu, states in links.items()
        if any("inactive" in state for state in states.values())
    }


# "Replay Errors: 0"; newer drivers: "Tx discards: 0", "Link recovery failed events: 0". A
# value that is not a whole number ("Effective BER: 1e-15") is not a counter.
_COUNTER = re.compile(r"([A-Za-z][A-Za-z ]*?)\s*:\s*(\d+)(?![\d.eE])")


def parse_nvlink_errors(text: str) -> dict[str, dict[str, dict[str, int]]]:
    """`nvidia-smi nvlink -e`: GPU index -> link index -> counter -> count since the driver
    loaded (indices as text, as they come back from JSON)
    ("Replay Errors", "Recovery Errors", "CRC Errors"; later drivers print more, taken as
    printed). A counter the driver cannot read ("N/A") is left out."""
    counters: dict[str, dict[str, dict[str, int]]] = {}
    for gpu, link, rest in _nvlink_blocks(text):
        links = counters.setdefault(gpu, {})
        if link is not None:
            found = links.setdefault(link, {})
            for name, count in _COUNTER.findall(rest):
                found[name.strip()] = int(count)
    return counters


def nvlink_error_growth(
    before: Mapping[str, Mapping[str, Mapping[str, int]]],
    after: Mapping[str, Mapping[str, Mapping[str, int]]],
) -> list[tuple[str, str, str, int, int]]:
    """(GPU, link, counter, how much it grew, its count after) for each counter that grew
    between the two readings. A counter that went down was reset in between (nvidia-smi
    nvlink -r, a driver reload): its count after is the growth."""
    grown = []
    for gpu, links in sorted(after.items(), key=lambda item: int(item[0])):
        for link, names in sorted(links.items(), key=lambda item: int(item[0])):
            for name, count in names.items():
                was = (before.get(gpu) or {}).get(link, {}).get(name)
                if was is None:
                    continue
                growth = count - was if count >= was else count
                if growth > 0:
                    grown.append((gpu, link, name, growth, count))
    return grown


def gpu_health_problems(gpus: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(what was found, what it should be, the fix) for each GPU's fault of `parse_smi_xml`."""
    problems = []
    for index, gpu in enumerate(gpus):
        label = f"GPU {index} ({gpu.get('bus_id') or '?'})"
        width, best_width = gpu.get("pcie_width"), gpu.get("pcie_width_max")
        if width and best_width and width < best_width:
            problems.append(
                (
                    f"{label} PCIe link x{width}",
                    f"x{best_width}",
                    "reseat the GPU or its riser, and check the slot in the BIOS",
                )
            )
        # An idle GPU lowers its link's generation to save power: the generation is judged
        # from the reading taken under load (the collectives' copy test), not here.
        if gpu.get("slowdowns"):
            problems.append(
                (
                    f"{label} slowed down: {', '.join(gpu['slowdowns'])}",
                    "no hardware or thermal slowdown",
                    "check its cooling, power supply and nvidia-smi -q -d PERFORMANCE",
                )
            )
        if gpu.get("persistence") == "Disabled":
            problems.append(
                (
                    f"{label} persistence mode off",
                    "Enabled",
                    "systemctl enable --now nvidia-persistenced (or nvidia-smi -pm 1)",
                )
            )
    return problems


def dcgm_failures(text: str) -> list[str]:
    """The tests that `dcgmi diag -r 1` reports as failed, from its table ("| PCIe | Fail -
    All |"), each with its result."""
    failed = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[1].lower().startswith("fail"):
            failed.append(f"{cells[0]}: {cells[1]}")
    return failed
