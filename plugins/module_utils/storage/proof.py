"""The proof that a folder is shared: every node writes a file of its own there, and every node
reads every node's file. This judges what the nodes reported (the shared_dir_proof module's
write and read steps): the largest group of nodes that see the same files is the shared folder,
and every other node is named with why. Standard library only: it runs on the nodes' system
Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ansible_collections.torch_cluster.cluster.plugins.module_utils.storage.mounts import (
    describe_mount,
)


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
