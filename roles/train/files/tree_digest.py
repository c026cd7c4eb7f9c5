"""Print one sha256 over a folder's files: their relative paths and contents, in sorted order.

The launcher runs it on the controller and on every node to prove that all
nodes train with the same code.
"""

import hashlib
import sys
from pathlib import Path

root = Path(sys.argv[1])
skip = set(sys.argv[2:])
digest = hashlib.sha256()
for path in sorted(p for p in root.rglob("*") if p.is_file()):
    relative = path.relative_to(root)
    if skip.intersection(relative.parts):
        continue
    digest.update(str(relative).encode() + b"\0")
    digest.update(hashlib.sha256(path.read_bytes()).digest())
print(digest.hexdigest())
