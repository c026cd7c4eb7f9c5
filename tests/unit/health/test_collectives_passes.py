"""The collectives script's passes over the pairs (roles/check/files/collectives): each figure
is the best of the passes, so a moment of other traffic does not fail a healthy link, and a
link slow in every pass still shows slow."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "roles/check/files/collectives/allreduce_bench.py"


def _pair(busbw: list[float], forward: float | None, backward: float | None) -> dict:
    sweep = [
        {"size": 1 << (16 + 4 * i), "busbw": bw, "seconds": 1 / bw} for i, bw in enumerate(busbw)
    ]
    return {"sweep": sweep, "forward": forward, "backward": backward}


def test_each_figure_is_the_best_of_the_passes() -> None:
    first = {"0-1": _pair([100.0, 900.0], 800.0, None), "2-3": _pair([50.0, 200.0], 150.0, None)}
    second = {"0-1": _pair([120.0, 400.0], 300.0, None), "2-3": _pair([60.0, 210.0], 140.0, None)}
    best = runpy.run_path(str(SCRIPT))["best_of"]([first, second])
    # 0-1 had a slow moment in the second pass: the first's figures stand.
    assert [row["busbw"] for row in best["0-1"]["sweep"]] == [120.0, 900.0]
    assert best["0-1"]["forward"] == 800.0
    # 2-3 is slow in both passes: it stays slow.
    assert [row["busbw"] for row in best["2-3"]["sweep"]] == [60.0, 210.0]
    assert best["2-3"]["forward"] == 150.0
    assert best["2-3"]["backward"] is None  # this rank measured the other direction
    # The passes' own records are left as they were.
    assert [row["busbw"] for row in first["0-1"]["sweep"]] == [100.0, 900.0]
