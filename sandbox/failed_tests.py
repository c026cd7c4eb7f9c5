#!/usr/bin/env python3
"""Print the tests that failed in a JUnit XML report (the sandbox's verify), each with the start
of its message: the last lines a CI log shows after Molecule's own summary."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# The lines of each failure's message shown, and the failed tests named at the very end.
MESSAGE_LINES = 4
NAMED_LAST = 20


def main(path: str) -> int:
    report = Path(path)
    if not report.exists():
        print(f"failed before the verify (no {path})")
        return 0
    failed = []
    for case in ET.parse(report).iter("testcase"):
        for problem in [*case.iter("failure"), *case.iter("error")]:
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            text = (problem.get("message") or problem.text or "").strip().splitlines()
            failed.append((name, text[:MESSAGE_LINES]))
    for name, lines in failed:
        print(f"FAILED {name}")
        for line in lines:
            print(f"    {line[:200]}")
    # The names once more, last: a CI log's tail shows them whatever the messages' length.
    print(f"verify: {len(failed)} test(s) failed:")
    for name, _ in failed[:NAMED_LAST]:
        print(f"  {name}")
    if len(failed) > NAMED_LAST:
        print(f"  ... and {len(failed) - NAMED_LAST} more")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
