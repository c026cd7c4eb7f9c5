"""When each node of a job was last heard from, and which are lost: a node that has not answered
for `lost_after` seconds (train_lost_after) is lost, however many polls that was. A slow answer
(an SSH hiccup of a few seconds on a loaded node) is an answer. The times carry over from one
watch round to the next (`heard_ago`), so a round boundary never restarts the count. Standard
library only: it runs on the nodes' system Python (3.9 on EL9) and on the controller.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    RUNNING,
    UNREACHABLE,
    NodeState,
)

# The default of train_lost_after: long enough for an SSH hiccup of a loaded node (2 s) and a
# missed poll, short enough to declare a lost node within 10 s (poll, and the round's return).
LOST_AFTER_S = 6.0


class Liveness:
    """Each node's last answer and its latest state, shared by the threads that poll them."""

    def __init__(
        self,
        names: Iterable[str],
        lost_after: float,
        heard_ago: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lost_after, self.clock = lost_after, clock
        now = clock()
        ago = heard_ago or {}
        self.heard = {name: now - max(0.0, float(ago.get(name, 0.0))) for name in names}
        # The latest answer of each node that answered in this round.
        self.latest: dict[str, NodeState] = {}
        self._lock = threading.Lock()

    def answered(self, name: str, state: NodeState) -> None:
        with self._lock:
            self.heard[name] = self.clock()
            self.latest[name] = state

    def silent_for(self, name: str) -> float:
        return max(0.0, self.clock() - self.heard[name])

    def states(self) -> dict[str, NodeState]:
        """Every node's state as the watch judges it: a lost node is unreachable; one that has
        not answered yet in this round, but is not lost, runs as far as anyone knows."""
        with self._lock:
            latest = dict(self.latest)
        found = {}
        for name in self.heard:
            silent = self.silent_for(name)
            if silent > self.lost_after:
                found[name] = NodeState(
                    UNREACHABLE,
                    f"not heard from for {silent:.1f} s (train_lost_after={self.lost_after:g})",
                )
            else:
                found[name] = latest.get(name) or NodeState(RUNNING, "not polled yet this round")
        return found

    def settled(self) -> bool:
        """Every node answered in this round, or is lost: the round may end without throwing a
        slow answer away (its next round would start that poll again, and never hear it)."""
        with self._lock:
            answered = set(self.latest)
        lost = self.lost_after
        return all(name in answered or self.silent_for(name) > lost for name in self.heard)

    def heard_ago(self) -> dict[str, float]:
        """Seconds since each node's last answer: the next round's `heard_ago`."""
        return {name: round(self.silent_for(name), 2) for name in self.heard}
