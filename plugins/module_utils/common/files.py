"""Records on disk: a JSON record replaced at once (a reader never sees half of it), and the end of
a log. Standard library only: it runs on the nodes' system Python (3.9 on EL9) and on the
controller.
"""

from __future__ import annotations

import json
import os

# How much of the end of a node's log the job list reads.
TAIL_BYTES = 256 * 1024


def write_json(path: str, data: object) -> None:
    """Replace a record at once (a reader, jobs.yml included, never sees half of it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.partial", "w") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.replace(f"{path}.partial", path)


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
