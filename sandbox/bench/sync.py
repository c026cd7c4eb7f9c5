#!/usr/bin/env python3
"""What keeping the output folders in step costs without a shared folder, on a running sandbox.

    make sandbox && make bench-sync

For each size (100 MB and 1 GB by default), the master's output folder of a fresh job is
filled with that much random data in 10 files, then train.yml runs a one-line script on every
node with train_shared_dir="" and one process a node, twice:
1. the first run's sync before its attempt sends every file to the other nodes;
2. the second run finds every node up to date: its sync lists the folders and moves nothing.
The figures are the launcher's own, from runs/<job id>/attempts.json: rsync's bytes (sent and
received, every transfer), the files and the seconds of each step. The job folders are removed
afterwards.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from launch import BASE, ENV, PROJECT, inventory, playbook, ssh

SCRIPT = PROJECT / "molecule" / "sandbox" / "tests" / "scripts"


def run_job(job_id: str, runs: Path) -> dict:
    extra = {
        "job_id": job_id,
        "nproc": 1,
        "train_code_dir": str(SCRIPT),
        "train_script": "print_env.py",
        "train_script_args": [],
        "train_result_files": [],
        "train_shared_dir": "",
        "train_runs_dir": str(runs),
    }
    done = subprocess.run(
        playbook("train.yml", extra), env=ENV, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"train.yml failed:\n{done.stdout[-3000:]}")
    record = json.loads((runs / job_id / "attempts.json").read_text())
    return record["attempts"][0]["sync"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="100,1000", help="output folder sizes, in MB")
    args = parser.parse_args()
    _, nodes = inventory()
    master = nodes[0][1]["ansible_host"]
    print(f"{len(nodes)} nodes; one process a node")
    for size in (int(mb) for mb in args.sizes_mb.split(",")):
        job_id = f"bench-sync-{size}mb-{secrets.token_hex(3)}"
        output = f"{BASE}/jobs/{job_id}/output"
        ssh(master, ["mkdir", "-p", output])
        for index in range(10):
            ssh(
                master,
                ["sh", "-c", f"head -c {size * 100_000} /dev/urandom > {output}/part{index}.bin"],
            )
        try:
            with tempfile.TemporaryDirectory() as runs:
                for run in ("first run", "second run"):
                    before = run_job(job_id, Path(runs))["before"]
                    print(
                        f"{size} MB, {run}: sync before the attempt {before['seconds']:.2f} s, "
                        f"{before['bytes'] / 1e6:.1f} MB over the network, "
                        f"{before['files']} files, {before['rounds']} round(s)"
                    )
        finally:
            for _, hostvars in nodes:
                ssh(hostvars["ansible_host"], ["rm", "-rf", f"{BASE}/jobs/{job_id}"], check=False)


if __name__ == "__main__":
    main()
