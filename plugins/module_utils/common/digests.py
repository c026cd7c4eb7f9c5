"""What the controller's code and data look like, as digests: one sha256 over a folder's files, so
that each node copies only what changed. Standard library only: it runs on the nodes' system
Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence


def tree_digest(root: str, skip: Sequence[str] = ("__pycache__",), content: bool = True) -> str:
    """One sha256 over a folder's files, in sorted order: each file's relative path and its
    content (content=True), or its size and modification time (content=False: what rsync's
    quick check compares, for data too large to read at every launch). "" when root is no
    folder. Files under a folder named in `skip` do not count."""
    if not os.path.isdir(root):
        return ""
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [name for name in dirs if name not in skip]
        files += [os.path.join(folder, name) for name in names]
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: os.path.relpath(p, root)):
        digest.update(os.path.relpath(path, root).encode() + b"\0")
        if content:
            digest.update(_file_sha256(path))
        else:
            stat = os.stat(path)
            digest.update(f"{stat.st_size} {int(stat.st_mtime)}\0".encode())
    return digest.hexdigest()


def tree_size(root: str, skip: Sequence[str] = ("__pycache__",)) -> int:
    """The bytes of a folder's files, those under a folder named in `skip` left out (as
    tree_digest counts them); 0 when root is no folder."""
    total = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = [name for name in dirs if name not in skip]
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in names)
    return total


def _file_sha256(path: str) -> bytes:
    content = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            content.update(block)
    return content.digest()


def subtrees_digest(root: str, names: Sequence[str]) -> str:
    """tree_digest (size and time) of the named entries of root, together: the part of a
    node's data folder that came from the controller. "" when one of them is missing."""
    digest = hashlib.sha256()
    for name in sorted(names):
        path = os.path.join(root, name)
        if os.path.isdir(path):
            digest.update(f"{name}/\0{tree_digest(path, (), content=False)}\0".encode())
        elif os.path.isfile(path):
            stat = os.stat(path)
            digest.update(f"{name}\0{stat.st_size} {int(stat.st_mtime)}\0".encode())
        else:
            return ""
    return digest.hexdigest()
