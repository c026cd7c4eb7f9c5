"""A node's mounts, read from its mount table and /etc/fstab: the mount that holds a folder, the
server in a mount source, a mount point that would hide files, a shared folder that fstab lists
but that is not mounted, and the job's shared folder itself (shared_storage role, the health
check and the launcher). Standard library only: it runs on the nodes' system Python (3.9 on EL9)
and on the controller.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.node_paths import (
    local_fact,
)

# The network part of a Lustre NID ("10.0.0.1@tcp", "mgs@o2ib1"), which is no user@host.
_LNET = re.compile(r"^(tcp|o2ib|kfi|gni)[0-9]*(:|$)")


def source_host(source: str) -> str:
    """The server's host name or address in a mount source, "" when it names none:
    "nfs1:/export", "user@nfs1:/dir" (sshfs), "[fd00::1]:/x" (IPv6), "mon1,mon2:/" (Ceph: the
    first monitor), "10.0.0.1@tcp:/fs" (Lustre: the MGS's NID)."""
    head = source.strip()
    _, at, rest = head.partition("@")
    if at and not _LNET.match(rest):
        head = rest
    if head.startswith("["):
        end = head.find("]")
        return head[1:end] if end > 0 else ""
    if ":" not in head:
        return ""
    return head.split(":", 1)[0].split(",", 1)[0].split("@", 1)[0]


def _unescape(field: str) -> str:
    """A path of the mount table or fstab, with its octal escapes ("\\040" for a space) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[dict[str, str]]:
    """/proc/self/mountinfo, a dict per mount: mount_point, root (the folder of the source's
    filesystem that is mounted: not / for a bind mount), fstype, source."""
    mounts = []
    for line in text.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        mounts.append(
            {
                "mount_point": _unescape(fields[4]),
                "root": _unescape(fields[3]),
                "fstype": tail[0],
                "source": _unescape(tail[1]),
            }
        )
    return mounts


def mount_of(path: str, mounts: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The mount that holds path (the last one mounted at the longest matching mount point)."""
    path = os.path.normpath(path)
    best: dict[str, str] = {}
    for mount in mounts:
        point = mount["mount_point"]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best.get("mount_point", "")):
            best = dict(mount)
    return best


def fstab_entry(path: str, text: str) -> dict[str, str]:
    """The /etc/fstab line that mounts path ({} when none): source, fstype, options."""
    path = os.path.normpath(path)
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 4 and os.path.normpath(_unescape(fields[1])) == path:
            return {"source": _unescape(fields[0]), "fstype": fields[2], "options": fields[3]}
    return {}


def describe_mount(mount: Mapping[str, str]) -> str:
    """ "fuse.sshfs root@10.0.0.2:/srv/x at /shared", for messages."""
    if not mount:
        return "no mount"
    root = mount.get("root", "/")
    part = f"[{root}]" if root not in ("", "/") else ""  # a bind mount: the folder it shows
    return f"{mount['fstype']} {mount['source']}{part} at {mount['mount_point']}"


def mount_point_problem(
    path: str,
    *,
    expected_source: str,
    fstab: Mapping[str, str],
    mount: Mapping[str, str],
    entries: Sequence[str] | None,
) -> str:
    """Why path cannot become the shared folder's mount point, "" when it can.

    mount is the mount that holds path now (mount_of); entries the names in path (None when
    path does not exist, or is no folder: then []). A path that our fstab line (the same source)
    mounts already is fine: the role ran before. Anything else mounted there, or files there that
    the mount would hide, is refused."""
    mounted_here = bool(mount) and os.path.normpath(mount["mount_point"]) == os.path.normpath(path)
    ours = bool(fstab) and fstab.get("source") == expected_source
    if mounted_here and not ours:
        return (
            f"{path} is a mount point already ({describe_mount(mount)}): unmount it, or choose "
            "another shared_storage_path"
        )
    if fstab and not ours:
        return (
            f"/etc/fstab mounts {fstab['source']} ({fstab['fstype']}) at {path} already: remove "
            "that line, or choose another shared_storage_path"
        )
    if not mounted_here and entries:
        shown = ", ".join(sorted(entries)[:5]) + (", ..." if len(entries) > 5 else "")
        return (
            f"{path} holds {len(entries)} file(s) ({shown}) that the mount would hide: move them, "
            "or choose another shared_storage_path"
        )
    return ""


def missing_mount(path: str, fstab_text: str, mountinfo_text: str) -> bool:
    """Whether /etc/fstab mounts path and nothing is mounted there now (a boot-time mount that
    failed: systemd does not try it again by itself)."""
    if not path or not fstab_entry(path, fstab_text):
        return False
    mount = mount_of(path, parse_mountinfo(mountinfo_text))
    return os.path.normpath(mount.get("mount_point", "/")) != os.path.normpath(path)


def resolve_shared_dir(given: str, fact: str) -> str:
    """The shared folder a job or a check uses: `given` (train_shared_dir, check_shared_dir),
    where "auto" is the path in the shared_storage role's local fact on this node (none when
    the node has no such fact) and "" is none."""
    return given if given != "auto" else local_fact(fact, "path")
