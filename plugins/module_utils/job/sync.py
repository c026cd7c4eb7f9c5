"""Keeping a job's output folders in step on nodes that share no filesystem.

Without a shared folder, every node has an output folder of its own. The launcher keeps them
consistent between attempts, so that a script whose rank 0 alone saves a snapshot finds it on
every node at the next start, and so that no checkpoint lives on one disk only:

- before an attempt, the master gathers the newest copy of every file from every node, then the
  files travel to every node that lacks them, in rounds that double the nodes that have them
  (each node that has them sends to one that does not);
- after an attempt, the master's folder is copied to the next nodes in rank order, so that a
  lost master loses no file.

These functions decide what travels where; torch_job_sync runs rsync for them. Standard library
only: it runs on the master's system Python.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# A node's files: relative path -> (size, modification time in ns).
Listing = Mapping[str, Sequence[int]]


# Run with python3 on each node: its output folder's regular files, as JSON.
LIST_SCRIPT = """
import json, os, stat, sys
root, files = sys.argv[1], {}
for folder, dirs, names in os.walk(root):
    dirs[:] = [name for name in dirs if name != ".torch-cluster-incoming"]
    for name in names:
        path = os.path.join(folder, name)
        try:
            found = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(found.st_mode):
            files[os.path.relpath(path, root)] = [found.st_size, found.st_mtime_ns]
print(json.dumps(files))
"""


# Copies made while a job runs land here on the receiver first, and move into place only
# when their source did not change while they travelled (never a torn checkpoint).
INCOMING = ".torch-cluster-incoming"


# Run with python3 on a receiver: move the named files from INCOMING into place, drop the rest.
SETTLE_SCRIPT = """
import json, os, shutil, sys
root, keep = sys.argv[1], set(json.loads(sys.stdin.read()))
incoming = os.path.join(root, ".torch-cluster-incoming")
for path in keep:
    target = os.path.join(root, path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(os.path.join(incoming, path), target)
shutil.rmtree(incoming, ignore_errors=True)
"""


def settled_files(
    listing: Listing, now_ns: int, settle_s: float, open_paths: Sequence[str] = ()
) -> dict[str, list[int]]:
    """The files of a listing not modified in the last `settle_s` seconds and not open in a
    process (`open_paths`, relative to the folder): a file being written now is left for a
    later copy."""
    limit = now_ns - int(settle_s * 1e9)
    busy = set(open_paths)
    return {
        path: list(value)
        for path, value in listing.items()
        if value[1] <= limit and path not in busy
    }


def unchanged(before: Listing, after: Listing, paths: Sequence[str]) -> list[str]:
    """The paths whose size and modification time are the same in both listings: their copy
    read one version of the file."""
    return [p for p in paths if p in after and list(after[p]) == list(before.get(p) or [])]


def newest_copies(listings: Mapping[str, Listing], order: Sequence[str]) -> dict[str, list[str]]:
    """The files the first node of `order` (the master) must fetch, by the node that holds the
    newest copy: each file whose newest copy (by modification time; on a tie, the node first
    in `order`) is not already the master's."""
    master = order[0]
    rank = {name: index for index, name in enumerate(order)}
    holders: dict[str, list[str]] = {}
    paths = sorted({path for listing in listings.values() for path in listing})
    for path in paths:
        copies = [(name, listing[path]) for name, listing in listings.items() if path in listing]
        name, newest = max(copies, key=lambda copy: (copy[1][1], -rank[copy[0]]))
        mine = listings.get(master, {}).get(path)
        if name != master and (mine is None or list(mine) != list(newest)):
            holders.setdefault(name, []).append(path)
    return holders


def after_gathering(
    listings: Mapping[str, Listing], master: str, fetched: Mapping[str, Sequence[str]]
) -> dict[str, list[int]]:
    """The master's listing once it has fetched those files from their holders."""
    result = {path: list(value) for path, value in listings.get(master, {}).items()}
    for holder, paths in fetched.items():
        for path in paths:
            result[path] = list(listings[holder][path])
    return result


def lacking(listing: Listing, wanted: Listing) -> bool:
    """Whether a node's folder lacks a file of `wanted`, or holds another version of one."""
    return any(list(listing.get(path) or []) != list(value) for path, value in wanted.items())


def next_round(have: Sequence[str], waiting: Sequence[str]) -> list[tuple[str, str]]:
    """One round of (sender, receiver): every node that has the files sends them to one that
    waits for them, the first senders to the first in line."""
    return list(zip(have, waiting))


def fanout_rounds(source: str, targets: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every round when each one succeeds: the nodes that have the files double each round, so
    N targets take about log2(N + 1) rounds, and the source sends at most that many copies."""
    have, waiting, rounds = [source], list(targets), []
    while waiting:
        pairs = next_round(have, waiting)
        have += [receiver for _, receiver in pairs]
        waiting = waiting[len(pairs) :]
        rounds.append(pairs)
    return rounds


_STATS = re.compile(
    r"^(Number of regular files transferred|Total bytes sent|Total bytes received):\s*([0-9,]+)",
    re.M,
)


def rsync_stats(text: str) -> dict[str, int]:
    """rsync --stats's count of files transferred, and the bytes sent and received."""
    keys = {
        "Number of regular files transferred": "files",
        "Total bytes sent": "sent",
        "Total bytes received": "received",
    }
    found = {"files": 0, "sent": 0, "received": 0}
    for name, value in _STATS.findall(text):
        found[keys[name]] = int(value.replace(",", ""))
    return found
