"""What Slurm says of a launcher job and of the nodes, for the tests that run jobs through
Slurm (test_slurm.py, and test_train_resilience.py's lost node through Slurm)."""

from __future__ import annotations

import time

from launcher import Job
from sandbox_nodes import Node


def slurm_jobs(master: Node, job: Job) -> list[str]:
    """Slurm's queued or running jobs of the launcher job."""
    listed = master.host.run(f"squeue --noheader --name=torch-{job.job_id} --format=%i")
    assert listed.rc == 0, listed.stderr
    return listed.stdout.split()


def accounting(master: Node, job: Job) -> list[dict[str, str]]:
    """sacct's records of the launcher job's Slurm jobs (one per attempt), oldest first."""
    fields = ["JobID", "State", "Start", "End", "NodeList", "User"]
    out = master.host.check_output(
        f"sacct --allusers --allocations --parsable2 --noheader --name=torch-{job.job_id} "
        f"--format={','.join(fields)}"
    )
    return [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines() if line]


def slurm_node(master: Node, node: Node) -> tuple[str, str]:
    """The node's state in Slurm and its reason."""
    out = master.host.check_output(f"sinfo --noheader --nodes={node} --format='%T|%E'")
    state, reason = out.strip().split("|", 1)
    return state, reason


def settled(master: Node, job: Job, nodes: list[Node], timeout: float) -> bool:
    """Whether, within the timeout, Slurm holds no job of the launcher job, no process of the
    job is left on the nodes, and Slurm has the nodes idle. After a node was cut off, Slurm
    keeps the job completing until the node answers again (its next ping, up to a third of
    SlurmdTimeout): the modules after the test need the nodes back."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not slurm_jobs(master, job) and all(
            not job.processes(node) and slurm_node(master, node)[0].rstrip("*") == "idle"
            for node in nodes
        ):
            return True
        time.sleep(3)
    return False
