#!/usr/bin/env python3
"""How the health check's pair measurements grow with the number of nodes, on one machine.

    make bench-pairs                      # 2, 4 and 8 "nodes"
    .venv/bin/python sandbox/bench/pairs.py --nodes 2 4 8 16

check.yml's collectives script (roles/check/files/collectives/allreduce_bench.py) runs as
torchrun starts it on N nodes of one process each, here N torchrun agents on this machine
(gloo over loopback, static rendezvous), with the pair rounds check.yml plans (the circle
method: N - 1 rounds of disjoint pairs for an even N). Printed for each N: the whole run's
seconds, the pair phase's seconds (the script's own pair_round_seconds, summed) and the
seconds per round. Loopback and one machine's cores measure what grows with N in the
software (process groups, rounds, barriers), not a network.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
# This repository as the collection it is (make collection-path).
sys.path.insert(0, str(PROJECT / ".cache" / "collections"))
from ansible_collections.torch_cluster.cluster.plugins.module_utils.health.collectives import (  # noqa: E402
    round_robin,
)

SCRIPT = PROJECT / "roles" / "check" / "files" / "collectives" / "allreduce_bench.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")


def rounds_argument(nodes: int) -> str:
    names = [str(index) for index in range(nodes)]
    return ";".join(",".join(f"{a}-{b}" for a, b in pairs) for pairs in round_robin(names))


def agent(
    nodes: int, rank: int, port: int, argv: list, *, folder: str, env: dict
) -> subprocess.Popen:
    """One node's torchrun, on this machine."""
    command = [str(TORCHRUN), f"--nnodes={nodes}", f"--node-rank={rank}", "--nproc-per-node=1",
               "--master-addr=127.0.0.1", f"--master-port={port}", *argv]  # fmt: skip
    return subprocess.Popen(
        command, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )


def run(nodes: int, script: Path, sizes: str, port: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-pairs-") as folder:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        started = time.monotonic()
        agents = [agent(nodes, rank, port, [str(script), "--sizes", sizes, "--rounds",
                                            rounds_argument(nodes)], folder=folder, env=env)
                  for rank in range(nodes)]  # fmt: skip
        codes = [agent.wait(timeout=900) for agent in agents]
        seconds = time.monotonic() - started
        if any(codes):
            return {"nodes": nodes, "error": f"exit codes {codes}"}
        report = json.loads((Path(folder) / "collectives.json").read_text())
    rounds = report.get("pair_round_seconds", [])
    return {
        "nodes": nodes,
        "pairs": len(report["pairs"]),
        "rounds": len(rounds),
        "run_s": round(seconds, 1),
        "pairs_s": round(sum(rounds), 2),
        "per_round_s": round(sum(rounds) / len(rounds), 3) if rounds else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--sizes", default="65536,1048576")
    parser.add_argument("--script", type=Path, default=SCRIPT)
    parser.add_argument("--port", type=int, default=29631)
    args = parser.parse_args()
    print("nodes  pairs  rounds  run (s)  pair phase (s)  per round (s)")
    for count, nodes in enumerate(args.nodes):
        found = run(nodes, args.script, args.sizes, args.port + count)
        if "error" in found:
            print(f"{nodes:>5}  {found['error']}")
            continue
        print(
            f"{found['nodes']:>5}  {found['pairs']:>5}  {found['rounds']:>6}  {found['run_s']:>7}  "
            f"{found['pairs_s']:>14}  {found['per_round_s']:>13}",
            flush=True,
        )


if __name__ == "__main__":
    main()
