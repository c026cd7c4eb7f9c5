"""A node's RDMA ports, read from /sys/class/infiniband as ibv_devinfo reads them: state, rate,
link layer and, on Ethernet (RoCE), whether a RoCE v2 GID is set. Reading only (health/fabric.py
judges). Standard library only: it runs on the nodes' system Python (3.9 on EL9) and on the
controller.
"""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import read_text


def _read(path: str) -> str:
    """A sysfs attribute's value; '' where there is none."""
    return read_text(path).strip()


def rdma_ports(root: str = "/sys/class/infiniband") -> list[dict[str, Any]]:
    """Each RDMA port: device, port, state ("ACTIVE"), rate in Gb/s, link layer and, on
    Ethernet, whether a RoCE v2 GID is set (sysfs's own files, as ibv_devinfo reads them)."""
    ports = []
    for device in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        base = os.path.join(root, device, "ports")
        for port in sorted(os.listdir(base), key=int) if os.path.isdir(base) else []:
            folder = os.path.join(base, port)
            state = _read(os.path.join(folder, "state")).split(":")[-1].strip()
            rate = _read(os.path.join(folder, "rate"))
            layer = _read(os.path.join(folder, "link_layer"))
            found = {
                "device": device,
                "port": int(port),
                "state": state,
                "rate_gbps": float(rate.split()[0]) if rate[:1].isdigit() else None,
                "rate": rate,
                "link_layer": layer,
            }
            if layer == "Ethernet":
                found["roce_v2"] = _has_roce_v2(folder)
            ports.append(found)
    return ports


def _has_roce_v2(port: str) -> bool:
    """Whether a set GID of the port is of type RoCE v2 (gid_attrs/types/N)."""
    types = os.path.join(port, "gid_attrs", "types")
    for index in os.listdir(types) if os.path.isdir(types) else []:
        gid = _read(os.path.join(port, "gids", index))
        if gid and gid.replace(":", "").strip("0") and "v2" in _read(os.path.join(types, index)):
            return True
    return False
