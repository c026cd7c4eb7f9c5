#!/usr/bin/env python3
"""How the playbooks' times grow with the number of nodes, in one sitting, on fresh sandboxes.

    make bench-growth                                   # 2 and 4 nodes
    .venv/bin/python sandbox/bench/growth.py --nodes 2 4 8

For each size: the sandbox is removed and started again with that many fresh nodes
(sandbox/up.yml: containers, not provisioned), then, timed from the command to its end:
1. provision.yml, cold (the wheelhouse staged from the controller to one node and from node
   to node: what left the controller and what the nodes sent, from the play's own report,
   which takes them from rsync's statistics);
2. provision.yml again, warm (nothing to change);
3. check.yml, collectives included;
4. train.yml: a 2-epoch job of the example trainer, one process a node.
Each provisioned node takes about 8.5 GB of disk (the CUDA build of torch, 5.6 GB, and the
2.9 GB wheelhouse it keeps for the next run and for its peers): the sizes that fit are the
disk's free space over that. The sandbox is left up with the last size.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from launch import ENV, PROJECT, playbook

BIN = PROJECT / ".venv" / "bin"
STAGED = re.compile(
    r"Wheelhouse \(([\d.]+) MB\) staged on (\d+) nodes: the controller sent ([\d.]+) MB to (\S+); "
    r"the nodes sent ([\d.]+) MB to each other in (\d+) round"
)


def timed(argv: list[str], log: Path, allowed: tuple[int, ...] = (0,)) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True, check=False, cwd=PROJECT)
    seconds = time.monotonic() - started
    log.write_text(done.stdout + done.stderr)
    if done.returncode not in allowed:
        sys.exit(f"{' '.join(argv[:4])} failed (rc {done.returncode}): see {log}")
    return seconds, done.stdout


def up(nodes: int, log: Path) -> None:
    subprocess.run([str(BIN / "ansible-playbook"), "sandbox/down.yml"], env=ENV, cwd=PROJECT,
                   capture_output=True, check=True)  # fmt: skip
    timed([str(BIN / "ansible-playbook"), "sandbox/up.yml", "-e", f"sandbox_nodes={nodes}"], log)


def measure(nodes: int, logs: Path) -> dict:
    up(nodes, logs / f"up-{nodes}.log")
    found: dict = {"nodes": nodes}
    found["provision_cold_s"], output = timed(
        playbook("provision.yml", {}), logs / f"cold-{nodes}.log"
    )
    staged = STAGED.search(" ".join(output.split()))
    if staged:
        found["wheelhouse_mb"] = float(staged.group(1))
        found["controller_sent_mb"] = float(staged.group(3))
        found["nodes_sent_mb"] = float(staged.group(5))
        found["rounds"] = int(staged.group(6))
    found["provision_warm_s"], _ = timed(playbook("provision.yml", {}), logs / f"warm-{nodes}.log")
    # A check that finds a failure (rc 2) took its time too: its verdict is kept beside it.
    found["check_s"], output = timed(playbook("check.yml", {}), logs / f"check-{nodes}.log", (0, 2))
    # The check's findings, each on a line of its message ("  [section] ...").
    found["check_findings"] = re.findall(r'^\s*"?  (\[\w+\] [^"\n]*)', output, re.M)
    job = {
        "job_id": f"growth-{nodes}-{int(time.time())}",
        "nproc": 1,
        "train_extra_args": ["--epochs", "2"],
    }
    found["train_s"], _ = timed(playbook("train.yml", job), logs / f"train-{nodes}.log")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--logs", type=Path, default=PROJECT / "runs" / "growth")
    args = parser.parse_args()
    args.logs.mkdir(parents=True, exist_ok=True)
    rows = []
    for nodes in args.nodes:
        rows.append(measure(nodes, args.logs))
        print(json.dumps(rows[-1]), flush=True)
    (args.logs / "growth.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
