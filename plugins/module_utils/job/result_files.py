"""Which files of a job's output folder are its results (train_result_files' glob patterns), and
the rsync options that transfer exactly those. Standard library only: it runs on the nodes'
system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence


def matching_files(root: str, patterns: Sequence[str]) -> list[str]:
    """The files under root that match the glob patterns (relative to root; ** spans
    folders), as sorted relative paths. Nothing outside root is returned."""
    found = set()
    real_root = os.path.realpath(root)
    for pattern in patterns:
        for path in glob.glob(os.path.join(glob.escape(root), pattern), recursive=True):
            inside = os.path.realpath(path).startswith(real_root + os.sep)
            if os.path.isfile(path) and inside:
                found.add(os.path.relpath(path, root))
    return sorted(found)


def rsync_filters(files: Sequence[str]) -> list[str]:
    """rsync options that transfer exactly these files (relative paths) of the source folder,
    with the folders that lead to them and no other."""
    escaped = [re.sub(r"([*?\[\\])", r"\\\1", name) for name in files]
    return [
        "--prune-empty-dirs",
        *(f"--include=/{name}" for name in escaped),
        "--include=*/",
        "--exclude=*",
    ]
