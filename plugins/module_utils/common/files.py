"""Files on disk: a JSON record replaced at once (a reader never sees half of it) and read back, a
file's text, the end of a log, and when a folder's files last changed. Standard library only: it
runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from typing import Any

# How much of the end of a node's log the job list reads.
TAIL_BYTES = 256 * 1024


def replace_text(path: str, text: str, mode: int | None = None) -> None:
    """Replace a file's text at once (a reader never sees half of it); with mode, its
    permissions too. Its folder must exist."""
    with open(f"{path}.partial", "w") as handle:
        handle.write(text)
    if mode is not None:
        os.chmod(f"{path}.partial", mode)
    os.replace(f"{path}.partial", path)


def write_json(path: str, data: object) -> None:
    """Replace a record at once (a reader, jobs.yml included, never sees half of it), its
    folder made where missing."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    replace_text(path, json.dumps(data, indent=2) + "\n")


def read_json(path: str) -> Any:
    """The JSON record at path; {} where it is missing, cannot be read or is not JSON."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def read_text(path: str, encoding: str | None = None, errors: str = "strict") -> str:
    """A file's text; '' where it is missing or cannot be read. errors="replace" for a file
    that may hold bytes that are not text (open's encoding and errors)."""
    try:
        with open(path, encoding=encoding, errors=errors) as handle:
            return handle.read()
    except OSError:
        return ""


def read_tail(path: str, size: int = TAIL_BYTES) -> str:
    """The end of a file, from its first whole line; '' where it cannot be read."""
    try:
        with open(path, "rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, end - size))
            data = handle.read()
    except OSError:
        return ""
    text = data.decode(errors="replace")
    return text if end <= size else text.partition("\n")[2]


def newest_mtime_ns(folder: str, skip: Sequence[str] = ()) -> int | None:
    """The newest modification time (ns) of the regular files under folder, those under a
    folder named in `skip` left out; 0 when it holds none (or is missing), None when it cannot
    be read."""
    if not os.path.isdir(folder):
        return 0
    if not os.access(folder, os.R_OK | os.X_OK):
        return None
    newest = 0
    for root, dirs, names in os.walk(folder):
        dirs[:] = [name for name in dirs if name not in skip]
        for name in names:
            try:
                found = os.lstat(os.path.join(root, name))
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISREG(found.st_mode):
                newest = max(newest, found.st_mtime_ns)
    return newest
