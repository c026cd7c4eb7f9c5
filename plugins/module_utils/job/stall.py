"""Why a job stalled, decided on the controller from every rank's Python stack (py-spy's dump):
where each rank was, the stack most ranks share, and the ranks that are elsewhere. Standard
library only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Union


# Stacks
@dataclass(frozen=True)
class Frame:
    """One frame of a Python stack. `file` is py-spy's short name (package-relative for an
    installed package, e.g. torch/distributed/distributed_c10d.py), `path` the full one, `code`
    the source line where the node could read it."""

    function: str
    file: str
    line: int
    path: str = ""
    code: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Frame:
        return cls(
            function=str(data["function"]),
            file=str(data["file"]),
            line=int(data["line"]),
            path=str(data.get("path") or ""),
            code=str(data.get("code") or ""),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"

    def describe(self) -> str:
        """`time.sleep(60) at stall.py:17 in main`, or without its code `stall.py:17 in main`."""
        place = f"{self.where} in {self.function}"
        return f"{self.code} at {place}" if self.code else place


FrameLike = Union[Frame, Mapping[str, Any]]


@dataclass(frozen=True)
class Thread:
    """One thread of a `py-spy dump --json`: its frames innermost first."""

    name: str
    os_thread_id: int | None
    frames: list[Frame]


def parse_dump(text: str) -> list[Thread]:
    """The threads of `py-spy dump --json --pid N` (py-spy 0.4: a list of threads, each with
    its frames innermost first, each frame with name, filename, short_filename and line)."""
    threads = []
    for entry in json.loads(text):
        frames = [
            Frame(
                function=raw["name"],
                file=raw.get("short_filename") or raw["filename"],
                line=int(raw.get("line") or 0),
                path=raw["filename"],
            )
            for raw in entry.get("frames") or []
        ]
        threads.append(
            Thread(
                name=entry.get("thread_name") or "",
                os_thread_id=entry.get("os_thread_id"),
                frames=frames,
            )
        )
    return threads


def main_thread(threads: Sequence[Thread], pid: int) -> Thread | None:
    """The process's main thread: named MainThread, else the one whose OS id is the pid."""
    for thread in threads:
        if thread.name == "MainThread":
            return thread
    for thread in threads:
        if thread.os_thread_id == pid:
            return thread
    return threads[0] if threads else None


# The launcher's wrapper (record_wrapper.RECORD_WRAPPER, run as record_errors.py), torch's `record`
# that it applies, and runpy stand outside every rank's script: never shown.
_LAUNCHER_FILES = re.compile(
    r"(^|/)(record_errors\.py|runpy\.py|elastic/multiprocessing/errors/__init__\.py)$"
    r"|^<frozen runpy>$"
)


# Installed packages and the standard library, as opposed to the job's own code.
_LIBRARY = re.compile(r"^<|/(site|dist)-packages/|/lib(64)?/python\d")


_COLLECTIVE = "torch/distributed/"


def shown_frames(frames: Sequence[FrameLike]) -> list[Frame]:
    """The frames of a stack without the launcher's."""
    parsed = [f if isinstance(f, Frame) else Frame.from_dict(f) for f in frames]
    return [f for f in parsed if not _LAUNCHER_FILES.search(f.path or f.file)]


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the job's own code (not of a package nor the standard library)."""
    return next((f for f in frames if not _LIBRARY.search(f.path or f.file)), None)


def in_collective(frames: Sequence[Frame]) -> bool:
    return any(_COLLECTIVE in (f.path or f.file) for f in frames)


def describe_stack(frames: Sequence[Frame]) -> str:
    """Where a stack is: its innermost frame, and the job's own frame that led there."""
    innermost, own = frames[0], user_frame(frames)
    if own is None or own == innermost:
        return innermost.describe()
    return f"{innermost.function} ({innermost.where}) from {own.describe()}"


def rank_list(ranks: Sequence[int]) -> str:
    """`0-2, 5` for ranks 0, 1, 2 and 5."""
    spans: list[list[int]] = []
    for rank in sorted(ranks):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def ranks_text(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"


# How many of the common stack's innermost frames a report keeps.
COMMON_FRAMES = 5


@dataclass
class StallReport:
    """The ranks outside the group that the others are in, and where each one is.

    waiting: the largest group of ranks with the same stack (on a tie, the group inside
    torch.distributed, then the one with the lowest rank); common_frames: that stack's
    innermost frames; outlier_frames: each outlier's innermost frame of the job's own code (its
    innermost frame when it has none); no_stack: ranks without a stack, and why."""

    outliers: list[int]
    waiting: list[int]
    common_frames: list[Frame]
    outlier_frames: dict[int, Frame]
    no_stack: dict[int, str]
    summary: str
    in_collective: bool = False
    groups: list[list[int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "outliers": self.outliers,
            "waiting": self.waiting,
            "in_collective": self.in_collective,
            "common_frames": [f.as_dict() for f in self.common_frames],
            "outlier_frames": [
                {"rank": rank, **frame.as_dict()} for rank, frame in self.outlier_frames.items()
            ],
            "no_stack": [{"rank": rank, "error": why} for rank, why in self.no_stack.items()],
            "groups": self.groups,
            "summary": self.summary,
        }


def stall_outliers(
    ranks: Mapping[int, Sequence[FrameLike] | None], errors: Mapping[int, str] | None = None
) -> StallReport:
    """Group the ranks by their main thread's stack (frames innermost first, the launcher's
    left out) and name the ranks outside the group the others wait in. A rank whose stack is
    None or empty has none (`errors` may say why)."""
    errors = errors or {}
    stacks: dict[int, list[Frame]] = {}
    no_stack: dict[int, str] = {}
    for rank in sorted(ranks):
        frames = shown_frames(ranks[rank] or [])
        if frames:
            stacks[rank] = frames
        else:
            no_stack[rank] = errors.get(rank) or (
                "no Python frames" if ranks[rank] else "no stack was read"
            )
    groups: dict[tuple, list[int]] = {}
    for rank, frames in stacks.items():
        groups.setdefault(tuple((f.function, f.file, f.line) for f in frames), []).append(rank)
    missing = "; ".join(f"rank {rank}: {why}" for rank, why in no_stack.items())
    if not groups:
        summary = f"no rank's stack could be read ({missing})" if missing else "no ranks"
        return StallReport([], [], [], {}, no_stack, summary)

    def weight(members: list[int]) -> tuple[int, bool, int]:
        return (len(members), in_collective(stacks[members[0]]), -members[0])

    ordered = sorted(groups.values(), key=weight, reverse=True)
    waiting, others = ordered[0], sorted(ordered[1:], key=lambda members: members[0])
    common = stacks[waiting[0]]
    collective = in_collective(common)
    verb = "wait in" if collective else "are at"
    if not others:
        every = f"every rank ({rank_list(waiting)})"
        summary = (
            f"{every} waits in {describe_stack(common)}: look at the collective itself or "
            "the network (the NCCL flight recorder, NCCL_DEBUG=INFO)"
            if collective
            else f"{every} is at {describe_stack(common)}: none is elsewhere"
        )
    else:
        elsewhere = "; ".join(
            f"{ranks_text(members)} {'is' if len(members) == 1 else 'are'} elsewhere "
            f"({describe_stack(stacks[members[0]])})"
            for members in others
        )
        summary = f"{elsewhere} while {ranks_text(waiting)} {verb} {describe_stack(common)}"
    if missing:
        summary += f"; no stack from {missing}"
    outliers = sorted(rank for members in others for rank in members)
    return StallReport(
        outliers=outliers,
        waiting=waiting,
        common_frames=common[:COMMON_FRAMES],
        outlier_frames={rank: user_frame(stacks[rank]) or stacks[rank][0] for rank in outliers},
        no_stack=no_stack,
        summary=summary,
        in_collective=collective,
        groups=[waiting, *others],
    )
