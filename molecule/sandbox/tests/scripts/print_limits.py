"""A training script that writes the memlock and nofile limits it was started with (soft and
hard, as getrlimit gives them) and its /proc/self/limits to limits-rank<RANK>.json in its
current folder: what a job unit's processes get, for the tests to read."""

import json
import os
import resource


def limit(value: int) -> int | str:
    return "unlimited" if value == resource.RLIM_INFINITY else value


found = {
    "memlock": [limit(value) for value in resource.getrlimit(resource.RLIMIT_MEMLOCK)],
    "nofile": [limit(value) for value in resource.getrlimit(resource.RLIMIT_NOFILE)],
}
with open("/proc/self/limits") as handle:
    found["proc"] = handle.read()
with open(f"limits-rank{os.environ['RANK']}.json", "w") as handle:
    json.dump(found, handle, indent=2)
print(f"memlock {found['memlock']}, nofile {found['nofile']}", flush=True)
