"""The README's commands, as a user types them: every line of its shell examples that starts a
job is read from README.md (not copied here) and run through a shell, in the repository, against
the sandbox. The inventory is the only thing added, through ANSIBLE_INVENTORY, where a user's
own inventory would be: the command line is the README's, character for character."""

from __future__ import annotations

import csv
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import yaml
from launcher import PROJECT_DIR, Playbook
from sandbox_nodes import Node

README = PROJECT_DIR / "README.md"
RUNS = PROJECT_DIR / "runs"
JOB_LINE = re.compile(r"^ansible-playbook playbooks/train\.yml\b")


def readme_job_lines() -> list[str]:
    """The lines of the README's sh blocks that start a job, in their order."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(), flags=re.M | re.S)
    return [line for block in blocks for line in block.splitlines() if JOB_LINE.match(line)]


def job_file(line: str) -> dict:
    found = re.search(r"-e @(\S+)", line)
    return yaml.safe_load((PROJECT_DIR / found[1]).read_text()) if found else {}


def test_the_readme_teaches_jobs_through_job_files() -> None:
    lines = readme_job_lines()
    assert len(lines) >= 3, lines
    assert all("-e @jobs/" in line for line in lines), lines
    # A value with spaces never goes on the command line as key=value (Ansible splits it).
    for line in lines:
        words = shlex.split(line, comments=True)
        given = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "-e"]
        split = [value for value in given if "=" in value and " " in value.split("=", 1)[1]]
        assert not split, line


def test_every_job_command_of_the_readme_runs_as_written(
    playbook: Playbook, inventory_file: Path, members: list[Node]
) -> None:
    env = playbook.env | {"ANSIBLE_INVENTORY": str(inventory_file)}
    lines = readme_job_lines()
    ids = [found[1] for line in lines if (found := re.search(r"-e job_id=(\S+)", line))]
    for job_id in ids:
        shutil.rmtree(RUNS / job_id, ignore_errors=True)
    for line in lines:
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=PROJECT_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{line}\n{output[-4000:]}"
        assert "succeeded" in output, f"{line}\n{output[-4000:]}"
        found = re.search(r"-e job_id=(\S+)", line)
        if not found:
            continue
        run = RUNS / found[1]
        if "(?P<" in str(job_file(line).get("train_progress_regex", "")):
            # The job file's regex, its groups as columns, plotted.
            with (run / "progress.csv").open() as table:
                rows = list(csv.DictReader(table))
            assert rows, f"{line}: no progress line matched"
            assert (run / "progress.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if "train_resume=true" in line:
            # It read the checkpoint of the run before (continuing, or with nothing left).
            master = (run / f"{members[0].name}.log").read_text().split("attempt 1,")[-1]
            assert re.search(r"^\[rank0\]: resume: \S+: epoch \d+ done", master, re.M), master[
                -2000:
            ]
