"""The lines of a node's log: which rank wrote a line (torchrun's prefix), which lines count as
progress, the launcher's header of each attempt, and a failed node's last lines. Standard
library only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

# torchrun tees each worker's output into the node's log with this prefix (the launcher sets
# it through TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE); torch adds its own "[rankN]:" to the
# traceback of an uncaught exception. Lines without a prefix are torchrun's own.
RANK_PREFIX_TEMPLATE = "[rank${rank}]: "


_RANK_LINE = re.compile(r"^\[rank(\d+)\]: ?(?:\[rank\d+\]: ?)?(.*)$")


def rank_line(line: str) -> tuple[int, str] | None:
    """(rank, the worker's own text) of a line a worker wrote, else None."""
    found = _RANK_LINE.match(line)
    return (int(found.group(1)), found.group(2)) if found else None


def progress_matcher(prefixes: Sequence[str], regex: str = "") -> Callable[[str], bool]:
    """A line counts as progress when it starts with one of the prefixes or matches regex."""
    pattern = re.compile(regex) if regex else None
    starts = tuple(prefixes)

    def matches(line: str) -> bool:
        return bool(starts and line.startswith(starts)) or bool(pattern and pattern.search(line))

    return matches


def progress_argument_spec() -> dict[str, dict[str, Any]]:
    """The options that feed progress_matcher (torch_job_list, torch_job_watch), as the doc
    fragment torch_cluster.cluster.progress_lines documents them."""
    return {
        "progress_prefixes": {"type": "list", "elements": "str", "default": []},
        "progress_regex": {"type": "str", "default": ""},
    }


def last_lines(text: str, lines: int) -> str:
    """The last lines the workers wrote in a log's text (torchrun's own lines left out), or its
    last lines when no worker wrote any (torchrun failed before it started them)."""
    everything = text.splitlines()
    workers = [line for line in everything if rank_line(line)]
    return "\n".join((workers or everything)[-lines:]) + "\n" if everything else ""


# The launcher's header of an attempt's part of a node's log (roles/train/tasks/attempt.yml).
HEADER = re.compile(
    r"^=== torch-cluster: job (?P<job>\S+), attempt (?P<attempt>\d+), node (?P<node>\S+) "
    r"\(node_rank\s+(?P<node_rank>\d+)\), (?:started|submitted to Slurm) (?P<started>\S+) ===$"
)
