"""The quiet stdout callback (plugins/callback/quiet.py), through ansible-playbook itself with
the repository's ansible.cfg: skipped tasks print nothing unless -v; a task that prints while
it runs has its banner first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: A task every host skips
      ansible.builtin.debug:
        msg: never
      when: false
    - name: A task that shows something
      ansible.builtin.debug:
        msg: shown
    - name: A job log read as it runs
      torch_job_log:
        base_dir: "{{ base_dir }}"
        job_id: j1
        prefix: "[here] "
"""
LOG = (
    "=== torch-cluster: job j1, attempt 1, node here (node_rank 0), "
    "started 2026-12-05T10:00:00+00:00 ===\n[rank0]: the job's line\n"
)


def run(tmp_path: Path, *args: str) -> str:
    (tmp_path / "jobs" / "j1").mkdir(parents=True, exist_ok=True)
    (tmp_path / "jobs" / "j1" / "node.log").write_text(LOG)
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    env = os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i", "localhost,", "-c", "local",
            "-e", f"ansible_python_interpreter={sys.executable}",
            "-e", f"base_dir={tmp_path}",
            str(playbook), *args,
        ],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_skipped_tasks_print_nothing_by_default(tmp_path: Path) -> None:
    out = run(tmp_path)
    assert "skipping" not in out
    assert "A task every host skips" not in out
    assert "TASK [A task that shows something]" in out
    assert '"msg": "shown"' in out


def test_verbose_output_shows_them(tmp_path: Path) -> None:
    out = run(tmp_path, "-v")
    assert "TASK [A task every host skips]" in out
    assert "skipping: [localhost]" in out


def test_a_streaming_tasks_banner_comes_before_its_lines(tmp_path: Path) -> None:
    out = run(tmp_path)
    banner = out.index("TASK [A job log read as it runs]")
    assert banner < out.index("[here] the job's line")
