"""GPU hardware faults on a node where a job failed: what leaves the node out of the job.

The kernel lines follow the format of NVIDIA's "XID Errors" guide (r580) and of the Linux
driver's nv_report_error (NVRM: Xid (PCI:<domain>:<bus>:<device>): <xid>, ...); the nvidia-smi
rows follow `nvidia-smi --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total
--format=csv,noheader,nounits` (a value of "[N/A]" where ECC is off).
"""

from __future__ import annotations

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.gpu_faults import (
    hardware_faults,
    parse_smi_rows,
    parse_xids,
)

KERNEL_LOG = """\
NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
NVRM: Xid (PCI:0000:86:00): 45, pid=21470, name=python, Ch 00000010
NVRM: Xid (PCI:0000:af:00): 13, pid=21470, name=python, Graphics SM Warp Exception on \
(GPC 0, TPC 0, SM 0): Out Of Range Address
NVRM: Xid (PCI:0000:d8:00): 94, pid=21471, name=python, Contained: SM (0x1). RST: No, D-RST: No
"""

SMI = "0, 00000000:3B:00.0, 0\n1, 00000000:86:00.0, 2\n2, 00000000:AF:00.0, [N/A]\n"


def test_xid_lines_are_read_with_their_device_and_code() -> None:
    xids = parse_xids(KERNEL_LOG)
    assert [(x.device, x.code) for x in xids] == [
        ("PCI:0000:3b:00", 79),
        ("PCI:0000:86:00", 45),
        ("PCI:0000:af:00", 13),
        ("PCI:0000:d8:00", 94),
    ]
    assert xids[0].describe().startswith("XID 79 on PCI:0000:3b:00 (pid='<unknown>'")


def test_smi_rows_with_and_without_ecc() -> None:
    assert parse_smi_rows(SMI) == [
        ("0", "00000000:3B:00.0", 0),
        ("1", "00000000:86:00.0", 2),
        ("2", "00000000:AF:00.0", None),
    ]


def test_application_xids_are_no_hardware_fault() -> None:
    xids = [x for x in parse_xids(KERNEL_LOG) if x.code in (13, 45)]
    assert hardware_faults(3, 3, (0, "0, a, 0\n1, b, 0\n2, c, 0\n", ""), xids) == []


def test_every_fault_is_named() -> None:
    faults = hardware_faults(4, 3, (0, SMI, ""), parse_xids(KERNEL_LOG))
    assert faults == [
        "1 of its 4 GPU(s) are gone",
        "GPU 1 (00000000:86:00.0) has 2 uncorrectable ECC error(s)",
        "new XID(s) in the kernel log: XID 79 on PCI:0000:3b:00 (pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.); XID 94 on PCI:0000:d8:00 (pid=21471, name=python, "
        "Contained: SM (0x1). RST: No, D-RST: No)",
    ]


def test_an_nvidia_smi_that_cannot_read_a_gpu_is_a_fault() -> None:
    error = "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
    assert hardware_faults(2, 2, (15, "", error), []) == [
        "nvidia-smi cannot read its GPUs: Unable to determine the device handle for "
        "GPU0000:3B:00.0: Unknown Error"
    ]


def test_nvidia_smi_listing_fewer_gpus_than_at_the_start_is_a_fault() -> None:
    assert hardware_faults(2, 2, (0, "0, a, 0\n", ""), []) == ["nvidia-smi lists 1 of its 2 GPU(s)"]


def test_a_node_without_gpus_has_no_gpu_faults() -> None:
    assert hardware_faults(0, 0, None, []) == []
