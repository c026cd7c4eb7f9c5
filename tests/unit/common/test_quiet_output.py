"""The quiet stdout callback (plugins/callback/quiet.py), through ansible-playbook itself with
the repository's ansible.cfg, on two local hosts: a line per step that did something, each
message once, a failure whole, the recap; -v gives the default callback's output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.torch_cluster.cluster.plugins.callback.quiet import hostlist

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = "node0 ansible_connection=local\nnode1 ansible_connection=local\n"
PLAYBOOK = """
- name: Steps of every kind
  hosts: all
  gather_facts: false
  tasks:
    - name: A task every host skips
      ansible.builtin.debug:
        msg: never
      when: false
    - name: A task that changes nothing
      ansible.builtin.command: "true"
      changed_when: false
    - name: Include nothing
      ansible.builtin.include_tasks: "{{ empty_tasks }}"
    - name: Assert without a message of its own
      ansible.builtin.assert:
        that: true
    - name: Assert with a message
      ansible.builtin.assert:
        that: true
        success_msg: every node answered
    - name: Change on every node
      ansible.builtin.command: "true"
    - name: Change on node1
      ansible.builtin.command: "true"
      changed_when: inventory_hostname == 'node1'
    - name: Change in a loop
      ansible.builtin.command: "echo {{ item }}"
      loop: [a, b]
    - name: A task that shows something
      ansible.builtin.debug:
        msg: shown
    - name: Say what each node is
      ansible.builtin.debug:
        msg: "this node is {{ inventory_hostname }}"
    - name: Say a list
      ansible.builtin.debug:
        msg: ["Job j1 succeeded. Results: runs/j1/", "  loss.png"]
      run_once: true
    - name: A job log read as it runs
      torch_job_log:
        base_dir: "{{ base_dir }}"
        job_id: j1
        prefix: "[here] "
      run_once: true
    - name: Fail and carry on
      ansible.builtin.command: "false"
      ignore_errors: true
    - name: Change after the job
      ansible.builtin.command: "true"
      run_once: true
"""
FAILING = """
- name: A failure
  hosts: all
  gather_facts: false
  any_errors_fatal: true
  tasks:
    - name: Fail the same way on every node
      ansible.builtin.fail:
        msg: "{{ report }}"
      when: how == 'message'
    - name: Fail a command
      ansible.builtin.shell: "echo 'the reason' >&2; exit 3"
      when: how == 'command'
    - name: Not reached
      ansible.builtin.command: "true"
"""
# A failed job's report, as train.yml fails with it: several lines, indented ones among them.
REPORT = (
    "Job j1 failed after 3 s.\n"
    "First failure: node1, rank 1 (local rank 0): exit 2\n"
    "  train_ddp.py: error: --epochs must be a positive integer, got 0\n"
    "Then, as consequences:\n"
    "  node0, rank 0: exit 1"
)
LOG = (
    "=== torch-cluster: job j1, attempt 1, node here (node_rank 0), "
    "started 2026-12-05T10:00:00+00:00 ===\n[rank0]: the job's line\n"
)
# A step line: its name, dots, its hosts and its seconds.
STEP = re.compile(r"^(?P<name>.+?) \.{3,} (?P<hosts>[^()]+) \((?P<seconds>[\d.]+ s)\)$", re.M)
RECAP_LINE = re.compile(
    r"^node\d\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=\d+\s+skipped=\d+\s+"
    r"rescued=0\s+ignored=\d+\s*$",
    re.M,
)


def run(tmp_path: Path, playbook: str, *args: str, ok: bool = True) -> str:
    (tmp_path / "jobs" / "j1").mkdir(parents=True, exist_ok=True)
    (tmp_path / "jobs" / "j1" / "node.log").write_text(LOG)
    (tmp_path / "empty.yml").write_text("[]\n")
    (tmp_path / "hosts").write_text(INVENTORY)
    (tmp_path / "play.yml").write_text(playbook)
    env = os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i", str(tmp_path / "hosts"),
            "-e", f"ansible_python_interpreter={sys.executable}",
            "-e", f"base_dir={tmp_path}",
            "-e", f"empty_tasks={tmp_path / 'empty.yml'}",
            str(tmp_path / "play.yml"), *args,
        ],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run(tmp_path_factory.mktemp("quiet"), PLAYBOOK)


@pytest.fixture(scope="module")
def verbose(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run(tmp_path_factory.mktemp("verbose"), PLAYBOOK, "-v")


def failing(tmp_path: Path, how: str) -> str:
    return run(tmp_path, FAILING, "-e", f"how={how}", "-e", f"report={REPORT!r}", ok=False)


def steps(out: str) -> dict[str, str]:
    return {found["name"]: found["hosts"] for found in STEP.finditer(out)}


def test_skipped_tasks_print_nothing_by_default(out: str) -> None:
    assert "skipping" not in out
    assert "A task every host skips" not in out
    assert "never" not in out


def test_verbose_output_shows_them(verbose: str) -> None:
    assert "TASK [A task every host skips]" in verbose
    assert "skipping: [node0]" in verbose


def test_verbose_output_is_the_default_callbacks(verbose: str) -> None:
    assert "PLAY [Steps of every kind]" in verbose
    assert "TASK [A task that changes nothing]" in verbose
    assert re.search(r"^ok: \[node0\] => \{", verbose, re.M)
    assert re.search(r"^changed: \[node1\] => \(item=b\)", verbose, re.M)


def test_each_step_that_changed_is_one_line_with_its_nodes(out: str) -> None:
    assert steps(out) == {
        "Change on every node": "node0 node1",
        "Change on node1": "node1",
        "Change in a loop": "node0 node1",
        "Change after the job": "node0",
    }


def test_a_step_line_says_the_seconds_it_took(out: str) -> None:
    line = next(line for line in out.splitlines() if line.startswith("Change on every node "))
    assert re.fullmatch(r"Change on every node \.+ node0 node1 \(\d+\.\d s\)", line), line


@pytest.mark.parametrize(
    "task",
    [
        "A task that changes nothing",
        "Include nothing",
        "included:",
        "Fail and carry on",
        "TASK [",
    ],
)
def test_ok_included_and_ignored_steps_print_nothing(out: str, task: str) -> None:
    assert task not in out


def test_a_message_every_node_says_is_printed_once(out: str) -> None:
    assert out.splitlines().count("shown") == 1


def test_an_asserts_message_is_shown_only_when_the_task_wrote_one(out: str) -> None:
    assert out.splitlines().count("every node answered") == 1
    assert "All assertions passed" not in out


def test_messages_that_differ_are_each_printed_with_their_node(out: str) -> None:
    lines = out.splitlines()
    assert "node0: this node is node0" in lines
    assert "node1: this node is node1" in lines


def test_a_list_message_is_one_line_per_item(out: str) -> None:
    lines = out.splitlines()
    start = lines.index("Job j1 succeeded. Results: runs/j1/")
    assert lines[start + 1] == "  loss.png"


def test_a_streaming_tasks_lines_come_between_the_steps_around_it(out: str) -> None:
    assert out.index("Change in a loop") < out.index("[here] the job's line")
    assert out.index("[here] the job's line") < out.index("Change after the job")


def test_the_recap_keeps_ansibles_host_lines(out: str) -> None:
    assert "PLAY RECAP" in out
    assert len(RECAP_LINE.findall(out)) == 2, out


def test_a_short_run_prints_few_lines(out: str) -> None:
    """4 steps, 6 message lines, the job's 2 lines, the recap (a blank line, a banner, 2 hosts
    and a blank line)."""
    assert len(out.splitlines()) == 4 + 6 + 2 + 5, out


def test_a_failure_is_printed_whole_once(tmp_path: Path) -> None:
    out = failing(tmp_path, "message")
    assert f"FAILED! => {REPORT}\n" in out
    assert out.count("Job j1 failed after 3 s.") == 1
    assert steps(out) == {"Fail the same way on every node": "node0 node1"}
    assert "Not reached" not in out
    assert len(RECAP_LINE.findall(out)) == 2, out


def test_a_failed_commands_return_code_and_stderr_follow_its_message(tmp_path: Path) -> None:
    out = failing(tmp_path, "command")
    assert "FAILED! => non-zero return code (rc 3)\nthe reason\n" in out


@pytest.mark.parametrize(
    ("names", "shown"),
    [
        (["node1", "node0"], "node0 node1"),
        (["node10", "node2", "node1", "node3"], "node1 node2 node3 node10"),
        ([f"node{n}" for n in (0, 1, 2, 3, 5, 7, 8, 9)], "node[0-3,5,7-9]"),
        (["a1", "a2", "b1", "b2", "master"], "a[1-2] b[1-2] master"),
    ],
)
def test_hosts_are_listed_in_order_and_many_as_ranges(names: list[str], shown: str) -> None:
    assert hostlist(names) == shown
