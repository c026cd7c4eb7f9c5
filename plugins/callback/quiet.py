"""Stdout callback: what a person reads of a playbook run; -v gives Ansible's usual output.

By default a run prints, in order:
- one line per step that changed something or failed: the task's name, its nodes and the
  seconds it took ("Stage the code and the data ........ node0 node1 (3.1 s)");
- the messages of debug tasks (their only line), once when every node says the same, else
  each prefixed with its nodes (the launcher's "Job demo, attempt 1: ..." and its verdict);
- what the project's actions print while they run (a followed job's lines, the watch line);
- each failure whole, once: "FAILED! => " and the task's message as it was written, its
  lines kept (a failed job's report is long), then the command's stderr if any;
- Ansible's PLAY RECAP, its host lines as they are (tests and users parse them).
Tasks that were ok, skipped or included, and failures that the task ignores, print nothing.
With -v (or more) every method is the default callback's (ansible.builtin.default).

Why not a callback of the bundled collections (each tried on a playbook with changed,
skipped, looped, delegated, run_once, debug and failing tasks and a printing action):
- community.general.dense rewrites the current line with VT100 cursor codes: in a pipe or
  a CI log the lines are escape sequences, and lines that an action prints are overwritten;
- community.general.unixy prints every task's name, skipped ones too, then a line per
  host, debug messages once per host as JSON, and its recap is indented ("  node0 :
  ok=..."), which the recap's parsers do not read; -v does not give the default's output;
- community.general.selective shows only tasks tagged print_action (a tag on every debug
  task of every role), a dot for each other task, failures with "(traceback unavailable)",
  and a recap of its own ("# STATS", tabs);
- community.general.diy renders one template per event and host: it cannot merge the nodes
  of a step, time a step or say a message once;
- ansible.builtin.minimal and oneline print a line per host and task; community.general's
  tasks_only, default_without_diff, counter_enabled and timestamp are the default's output
  with a part left out or added; ansible.posix.profile_tasks only adds timings to it.
None groups the nodes of a step or says a message once, so the project keeps its own,
small, on top of the default callback.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field

import yaml
from ansible import constants as C
from ansible.parsing.yaml.dumper import AnsibleDumper
from ansible.playbook.task_include import TaskInclude
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

DOCUMENTATION = r"""
name: quiet
type: stdout
short_description: A line per step that did something, messages once, failures whole
description:
  - One line per task that changed something or failed, with its hosts and seconds; debug
    messages once when every host says the same; each failure's message whole, once; the
    PLAY RECAP. Tasks that were ok or skipped print nothing.
  - With -v or more, the output of the default callback (ansible.builtin.default).
extends_documentation_fragment:
  - default_callback
  - result_format_callback
"""

# Where the hosts of a step line begin (a longer name pushes them right).
HOSTS_COLUMN = 56
# More hosts than this are written as ranges: node[0-15,17].
LISTED_HOSTS = 4
# What a failed result holds beyond its message, printed after it: its errors, else its output.
FAILURE_DETAILS = ("stderr", "module_stderr")
OUTPUT = ("stdout", "module_stdout")


def _natural(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def hostlist(names) -> str:
    """The hosts, in natural order: listed when few, else as ranges (node[0-3,5])."""
    names = sorted(set(names), key=_natural)
    if len(names) <= LISTED_HOSTS:
        return " ".join(names)
    numbered: dict[str, list[str]] = {}
    for name in names:
        prefix, number = re.fullmatch(r"(.*?)(\d*)", name).groups()
        numbered.setdefault(prefix if number else name, []).append(number)
    shown = []
    for prefix, numbers in numbered.items():
        if numbers == [""] or len(numbers) == 1:
            shown.append(prefix + numbers[0])
            continue
        runs: list[list[str]] = []
        for number in numbers:
            if runs and int(number) == int(runs[-1][-1]) + 1:
                runs[-1].append(number)
            else:
                runs.append([number])
        spans = (run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
        shown.append(f"{prefix}[{','.join(spans)}]")
    return " ".join(shown)


def _name(task) -> str:
    """The task's name without its role's."""
    return (task.name or task.action).strip()


def _says(task) -> bool:
    """Whether the task's result is a message: debug's; assert's only when the task wrote
    one (its own is "All assertions passed")."""
    return task.action.rpartition(".")[2] != "assert" or "success_msg" in task.args


def _seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def _text(value) -> str:
    """A message as a person reads it: strings as they are, a list one item a line."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "\n".join(value)
    return yaml.dump(
        value, Dumper=AnsibleDumper, default_flow_style=False, sort_keys=False
    ).rstrip()


def _said(texts: dict[str, str], everyone: set[str], marker: str = "") -> list[str]:
    """Each text once, prefixed with the hosts that said it unless those are everyone (or the
    one host, which the text names first)."""
    hosts_of: dict[str, list[str]] = {}
    for host in sorted(texts, key=_natural):
        hosts_of.setdefault(texts[host], []).append(host)
    lines = []
    for text, hosts in hosts_of.items():
        named = set(hosts) == everyone or (len(hosts) == 1 and text.startswith(f"{hosts[0]}:"))
        lines.append(marker + (text if named else f"{hostlist(hosts)}: {text}"))
    return lines


@dataclass
class _Step:
    """What one task did, gathered from its results until the next task starts."""

    name: str
    started: float = field(default_factory=time.monotonic)
    ended: float = 0.0
    changed: set[str] = field(default_factory=set)
    # Host -> the messages of its debug results (one per item of a loop).
    messages: dict[str, list[str]] = field(default_factory=dict)
    # Host -> (marker, text) of its failure.
    failures: dict[str, tuple[str, str]] = field(default_factory=dict)

    def lines(self) -> list[tuple[str, str | None]]:
        """Each line, with its colour."""
        lines: list[tuple[str, str | None]] = []
        hosts = self.changed | set(self.failures)
        if hosts:
            dots = "." * max(3, HOSTS_COLUMN - len(self.name) - 2)
            took = _seconds(self.ended - self.started)
            color = C.COLOR_ERROR if self.failures else C.COLOR_CHANGED
            lines.append((f"{self.name} {dots} {hostlist(hosts)} ({took})", color))
        said = {host: "\n".join(texts) for host, texts in self.messages.items()}
        lines += [(line, None) for line in _said(said, set(said))]
        for marker in ("FAILED! => ", "UNREACHABLE! => "):
            failed = {host: text for host, (mark, text) in self.failures.items() if mark == marker}
            lines += [(line, C.COLOR_ERROR) for line in _said(failed, hosts, marker)]
        return lines


def _default_when_verbose(method):
    """With -v or more, the default callback's method instead."""

    @functools.wraps(method)
    def chosen(self, *args, **kwargs):
        if self._display.verbosity:
            return getattr(DefaultCallback, method.__name__)(self, *args, **kwargs)
        return method(self, *args, **kwargs)

    return chosen


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "quiet"

    def __init__(self):
        super().__init__()
        self._step: _Step | None = None

    def _finish_step(self) -> None:
        if self._step:
            for line, color in self._step.lines():
                self._display.display(line, color=color)
        self._step = None

    def _step_of(self, result) -> _Step:
        """The current step, with the result's time as its end."""
        if self._step is None:  # a result without its task's start (the free strategy)
            self._step = _Step(_name(result.task))
        self._step.ended = time.monotonic()
        self._handle_warnings(result.result)
        return self._step

    def _failed(self, result, marker: str, item: bool = False) -> None:
        step, host, answer = self._step_of(result), result.host.get_name(), result.result
        if "results" in answer and host in step.failures:
            return  # a loop's summary: its items said what failed
        text = [_text(answer.get("msg", "failed"))]
        if answer.get("rc") and "\n" not in text[0]:
            text[0] += f" (rc {answer['rc']})"
        details = [key for key in FAILURE_DETAILS if answer.get(key)] or [
            key for key in OUTPUT if answer.get(key)
        ]
        text += [str(answer[key]).rstrip() for key in details]
        if item:
            text[0] = f"(item={self._get_item_label(answer)}) {text[0]}"
        if host in step.failures:
            text.insert(0, step.failures[host][1])
        step.failures[host] = (marker, "\n".join(text))

    def _ok(self, result) -> None:
        step, answer = self._step_of(result), result.result
        if isinstance(result.task, TaskInclude):
            return
        if answer.get("changed"):
            step.changed.add(result.host.get_name())
        if self._run_is_verbose(result) and "results" not in answer and _says(result.task):
            self._clean_results(answer, result.task.action)
            shown = answer.get("msg", {k: v for k, v in answer.items() if not k.startswith("_")})
            step.messages.setdefault(result.host.get_name(), []).append(_text(shown))

    @_default_when_verbose
    def v2_playbook_on_play_start(self, play):
        self._finish_step()
        self._play = play

    @_default_when_verbose
    def v2_playbook_on_task_start(self, task, is_conditional):
        self._finish_step()
        self._step = _Step(_name(task))

    @_default_when_verbose
    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    @_default_when_verbose
    def v2_runner_on_ok(self, result):
        self._ok(result)

    @_default_when_verbose
    def v2_runner_item_on_ok(self, result):
        self._ok(result)

    @_default_when_verbose
    def v2_runner_on_failed(self, result, ignore_errors=False):
        if ignore_errors:
            self._step_of(result)
        else:
            self._failed(result, "FAILED! => ")

    @_default_when_verbose
    def v2_runner_item_on_failed(self, result):
        if not result.task.ignore_errors:
            self._failed(result, "FAILED! => ", item=True)

    @_default_when_verbose
    def v2_runner_on_unreachable(self, result):
        if result.task.ignore_unreachable:
            self._step_of(result)
        else:
            self._failed(result, "UNREACHABLE! => ")

    @_default_when_verbose
    def v2_runner_on_skipped(self, result):
        self._step_of(result)

    @_default_when_verbose
    def v2_runner_item_on_skipped(self, result):
        self._step_of(result)

    @_default_when_verbose
    def v2_playbook_on_include(self, included_file):
        pass

    @_default_when_verbose
    def v2_runner_retry(self, result):
        pass

    @_default_when_verbose
    def v2_playbook_on_no_hosts_remaining(self):
        self._finish_step()

    def v2_playbook_on_stats(self, stats):
        self._finish_step()
        super().v2_playbook_on_stats(stats)
