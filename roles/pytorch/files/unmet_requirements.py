"""Print, as a JSON list, the requirements in argv that this environment does not meet.

PEP 440 rules: torch==2.14.1 is met by an installed 2.14.1+cu130. pip's vendored
copy of `packaging` is used because every environment that pip installs into has it.
"""

import json
import sys
from importlib import metadata

from pip._vendor.packaging.requirements import Requirement


def is_met(requirement: str) -> bool:
    parsed = Requirement(requirement)
    try:
        installed = metadata.version(parsed.name)
    except metadata.PackageNotFoundError:
        return False
    return parsed.specifier.contains(installed, prereleases=True)


print(json.dumps([r for r in sys.argv[1:] if not is_met(r)]))
