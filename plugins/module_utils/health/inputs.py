"""The health check's inputs, checked before anything runs. Standard library only: it runs on the
nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.floors import (
    floor_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.limits import (
    limit_number,
)


def check_input_problems(inputs: Mapping[str, Any]) -> list[str]:
    """One sentence per bad input of the check."""
    problems = []
    for name in ("check_fraction_of_baseline", "check_fraction_of_median"):
        try:
            value = float(inputs[name])
        except (KeyError, TypeError, ValueError):
            value = -1.0
        if not 0 < value < 1:
            problems.append(f"{name} must be a number between 0 and 1 (got {inputs.get(name)!r})")
    sizes = inputs.get("check_message_sizes")
    if (
        not isinstance(sizes, list)
        or not sizes
        or not all(
            isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in sizes
        )
    ):
        problems.append(
            f"check_message_sizes must be a list of positive sizes in bytes (got {sizes!r})"
        )
    try:
        free = float(inputs.get("check_min_free_gib", 0))
    except (TypeError, ValueError):
        free = -1.0
    if free < 0:
        given = inputs.get("check_min_free_gib")
        problems.append(f"check_min_free_gib must be a number of GiB, 0 or more (got {given!r})")
    mib = str(inputs.get("check_shared_write_mib", 0))
    if not mib.isdigit():
        problems.append(f"check_shared_write_mib must be a whole number, 0 or more (got {mib!r})")
    memlock = inputs.get("check_min_memlock", "")
    try:
        if memlock != "":
            limit_number(memlock)
    except ValueError:
        problems.append(
            "check_min_memlock must be empty, infinity, or bytes with an optional K, M, G or T "
            f"(got {memlock!r})"
        )
    nofile = str(inputs.get("check_min_nofile", 0))
    if not nofile.isdigit():
        problems.append(f"check_min_nofile must be a whole number, 0 or more (got {nofile!r})")
    problems += floor_problems(inputs.get("check_floors", []))
    return problems
