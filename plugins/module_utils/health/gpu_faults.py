"""Hardware faults of a node's GPUs, read after a job failed there.

A node whose GPU fell off the bus, logged a new XID, or counts uncorrectable ECC errors would
fail the job again: the launcher leaves it out of the next attempt (train_min_nodes,
train_spare_group). The functions here read what `nvidia-smi` and the kernel log say;
torch_job_hardware runs the commands. Standard library only (the nodes' system Python).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# `nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`
SMI_QUERY = "index,pci.bus_id,ecc.errors.uncorrected.volatile.total"


# The kernel's line for an XID: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off
# the bus." (NVIDIA's "XID Errors" guide).
_XID = re.compile(r"NVRM: Xid \((PCI:[0-9a-fA-F:.]+)\): (\d+),?\s*(.*)$")


# XIDs that NVIDIA's XID catalogue puts down to the application (a fault in the user's
# kernel, a GPU context stopped by the user or by killing its process: 45 follows every
# stop of a job that was using the GPU) rather than to the GPU, the driver or the bus.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})


@dataclass(frozen=True)
class Xid:
    device: str
    code: int
    text: str

    def describe(self) -> str:
        return f"XID {self.code} on {self.device}" + (f" ({self.text})" if self.text else "")


def parse_xids(kernel_log: str) -> list[Xid]:
    """Every XID line of a kernel log."""
    found = []
    for line in kernel_log.splitlines():
        match = _XID.search(line)
        if match:
            found.append(Xid(match.group(1), int(match.group(2)), match.group(3).strip()))
    return found


def parse_smi_rows(text: str) -> list[tuple[str, str, int | None]]:
    """(index, PCI bus id, uncorrectable volatile ECC errors or None) of each GPU that
    nvidia-smi lists with SMI_QUERY."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != 3 or not cells[0].isdigit():
            continue
        ecc = int(cells[2]) if cells[2].isdigit() else None  # "[N/A]" without ECC
        rows.append((cells[0], cells[1], ecc))
    return rows


def hardware_faults(
    gpus_at_start: int,
    gpus_now: int,
    smi: tuple[int, str, str] | None,
    xids: Sequence[Xid],
) -> list[str]:
    """One sentence per fault: fewer GPUs than when the job started (the driver's count), an
    nvidia-smi that cannot read a GPU, uncorrectable ECC errors, and XIDs that are not the
    application's. `smi`: nvidia-smi's (exit status, stdout, stderr), None where there is
    none (a node without GPUs has no GPU faults)."""
    faults = []
    if gpus_now < gpus_at_start:
        faults.append(f"{gpus_at_start - gpus_now} of its {gpus_at_start} GPU(s) are gone")
    if smi is not None:
        status, out, err = smi
        rows = parse_smi_rows(out)
        if status != 0:
            why = " ".join((err or out).split())[:200] or f"exit status {status}"
            faults.append(f"nvidia-smi cannot read its GPUs: {why}")
        elif gpus_at_start and len(rows) < gpus_at_start and gpus_now >= gpus_at_start:
            faults.append(f"nvidia-smi lists {len(rows)} of its {gpus_at_start} GPU(s)")
        for index, bus, ecc in rows:
            if ecc:
                faults.append(f"GPU {index} ({bus}) has {ecc} uncorrectable ECC error(s)")
    hardware = [xid for xid in xids if xid.code not in APPLICATION_XIDS]
    if hardware:
        shown = "; ".join(xid.describe() for xid in hardware[:3])
        more = f" and {len(hardware) - 3} more" if len(hardware) > 3 else ""
        faults.append(f"new XID(s) in the kernel log: {shown}{more}")
    return faults
