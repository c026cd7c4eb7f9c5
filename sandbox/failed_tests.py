#!/usr/bin/env python3
"""Print the tests that failed in a JUnit XML report (the sandbox's verify), each with the start
of its message: the last lines a CI log shows after Molecule's own summary."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# The lines of each failure's message shown.
MESSAGE_LINES = 6


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
    print(f"verify: {len(failed)} test(s) failed")
    for name, lines in failed:
        print(f"FAILED {name}")
        for line in lines:
            print(f"    {line[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
