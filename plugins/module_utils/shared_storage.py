"""Shared job storage: what the shared_storage role, the health check and the launcher decide.

A shared folder is one that every node of the cluster mounts at the same path, so that a file
that one node writes is read on every other (NFS, Lustre, CephFS, BeeGFS, a FUSE filesystem).
The functions here read a node's mount table and /etc/fstab, refuse a mount point that would
hide files, find the server in a mount source, and judge the proof that a folder really is
shared: every node writes a file of its own there, and every node reads every node's file.

Standard library only: runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence

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
    if given != "auto":
        return given
    try:
        with open(fact) as handle:
            return str(json.load(handle).get("path", ""))
    except (OSError, ValueError, AttributeError):
        return ""


# --- The proof: every node writes, every node reads --------------------------------------
def _reason(result: Mapping[str, object]) -> str:
    """Why a step of the proof failed on a node: the module's error, or Ansible's (a task that
    could not run there at all, such as sudo to a user the node lacks)."""
    for key in ("error", "module_stderr", "msg"):
        text = " ".join(str(result.get(key) or "").split())
        if text:
            return text
    return "no reason given"


def _step_problem(
    path: str, wrote: Mapping[str, object] | None, read: Mapping[str, object] | None
) -> str:
    """Why a node's write or read of the proof failed; "" when both ran."""
    if wrote is None or read is None or wrote.get("unreachable") or read.get("unreachable"):
        return "did not answer"
    if not wrote.get("ok"):
        return f"cannot write to {path}: {_reason(wrote)}"
    if read.get("error") or "seen" not in read:
        return f"cannot read {path}: {_reason(read)}"
    return ""


def proof_problems(
    nodes: Sequence[str],
    path: str,
    writes: Mapping[str, Mapping[str, object]],
    reads: Mapping[str, Mapping[str, object]],
) -> list[dict[str, str]]:
    """Each node that cannot write to path, cannot read it, or sees other files there than the
    rest, with the reason: [{"node": ..., "problem": ...}], in the nodes' order.

    writes[node]: {"ok": bool, "error": str, "mount": {...}}; reads[node]: {"seen": [the nodes
    whose file it read back], "error": str}. A node missing from either did not answer. The nodes
    that see the same files form a view; the largest view is the shared folder (on a tie, the
    one whose nodes have the folder on a mount of its own, not on their root filesystem; then
    the master's), and every node outside it sees another filesystem (a mount that is missing,
    or another export). When nothing breaks the tie of single nodes, none shares it."""
    problems: dict[str, str] = {}
    seen: dict[str, frozenset[str]] = {}
    for name in nodes:
        wrote, read = writes.get(name), reads.get(name)
        failed = _step_problem(path, wrote, read)
        if failed:
            problems[name] = failed
        else:
            seen[name] = frozenset(read.get("seen") or ())  # type: ignore[arg-type]
    views: dict[frozenset[str], list[str]] = {}
    for name, files in seen.items():
        views.setdefault(files, []).append(name)

    def where(name: str) -> str:
        return describe_mount(writes[name].get("mount") or {})  # type: ignore[arg-type]

    def mounted(name: str) -> bool:  # the folder is on a mount of its own, not the root's
        return (writes[name].get("mount") or {}).get("mount_point", "/") != "/"  # type: ignore[union-attr]

    def weight(members: list[str]) -> tuple[int, int]:
        return len(members), sum(mounted(name) for name in members)

    if views:
        order = {name: index for index, name in enumerate(nodes)}
        shared, members = min(
            views.items(), key=lambda view: (*(-n for n in weight(view[1])), order[view[1][0]])
        )
        tied = sum(weight(others) == weight(members) for others in views.values()) > 1
        if len(members) < 2 and len(seen) > 1 and tied:
            for name in seen:
                problems[name] = (
                    f"sees only its own file in {path}: no two nodes share it (its {path} is on "
                    f"{where(name)})"
                )
        else:
            for name in seen.keys() - set(members):
                unseen = [other for other in members if other not in seen[name]]
                problems[name] = (
                    f"sees another filesystem at {path}: not the files that "
                    f"{', '.join(unseen or members)} wrote there (its {path} is on {where(name)}; "
                    f"theirs on {where(members[0])}). Is the shared folder mounted there?"
                )
            for name in set(members) - shared:  # wrote, but the others could not read it back
                problems[name] = f"its file in {path} was not seen by the other nodes"
            # A node that could not write where the others share a mount, its own folder on
            # another filesystem: the mount is missing (and its bare mount point is root's).
            for name in nodes:
                mount: Mapping[str, str] = (writes.get(name) or {}).get("mount") or {}  # type: ignore[assignment]
                if (
                    name in problems
                    and name not in seen
                    and mount
                    and mounted(members[0])
                    and describe_mount(mount) != where(members[0])
                ):
                    problems[name] = (
                        f"sees another filesystem at {path} (its {path} is on "
                        f"{describe_mount(mount)}; theirs on {where(members[0])}), and "
                        f"{problems[name]}. Is the shared folder mounted there?"
                    )
    return [{"node": name, "problem": problems[name]} for name in nodes if name in problems]
