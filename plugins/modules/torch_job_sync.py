#!/usr/bin/python
"""Ansible module: keep a job's output folders in step on nodes that share no filesystem."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.proc import open_files
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.ssh import (
    SSH_OPTIONS,
    on_node,
    ssh_argv,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.sync import (
    INCOMING,
    LIST_SCRIPT,
    SETTLE_SCRIPT,
    after_gathering,
    lacking,
    newest_copies,
    next_round,
    rsync_stats,
    settled_files,
    unchanged,
)

DOCUMENTATION = r"""
module: torch_job_sync
short_description: Keep a job's output folders in step on nodes that share no filesystem
description:
  - Runs on the master, as the training user, whose SSH trust reaches every node; the output
    folder has the same path on every node. Only files that differ travel (rsync).
  - C(phase=before) (before an attempt) lists every node's folder at once, fetches to the master
    the newest copy of each file that it lacks or holds in an older version (so that a copy on
    another node replaces one that the master lost), then sends the files to every node that
    lacks any, in rounds in which every node that has them sends to one that does not. Fails,
    naming the node, when a node cannot be listed or sent to.
  - C(phase=after) (after an attempt) copies the master's folder to the next I(copies) nodes in
    rank order that answer, so that a lost master loses no file. Its problems are returned,
    never raised.
  - C(phase=during) (while the job runs, from the watch) copies the master's files that have not
    changed for I(settle) seconds and that no process holds open to the next I(copies) nodes,
    into a folder of their own on each node first; a file moves into place there only when it
    did not change while it travelled, so a checkpoint being written is never copied
    half-written. A file that changed on the way, or was too new to travel, is tried again
    once it has settled, up to I(tries) looks; a node is named in C(holders) only when it has
    every file of the master's last listing. Problems are returned.
  - C(phase=spread) (staging, not a job) sends the first node's folder to every other node
    that lacks a file of it, in the same doubling rounds, so that a sender outside the cluster
    (the controller) sends it to one node only. Fails, naming the node, when one cannot be
    sent to.
  - "No deletion ever travels: a file removed on one node comes back from another."
options:
  phase:
    description: before, during or after an attempt; or spread (staging).
    type: str
    choices: [before, during, after, spread]
    required: true
  folder:
    description: The job's output folder (the same path on every node).
    type: path
    required: true
  nodes:
    description: Every node of the job, name to address, in rank order; the first is the master.
    type: dict
    required: true
  copies:
    description: With C(phase=after) or C(during), how many other nodes get the master's folder.
    type: int
    default: 1
  settle:
    description: With C(phase=during), seconds a file must have been left unchanged to travel.
    type: float
    default: 0.5
  tries:
    description: With C(phase=during), how often a receiver's missing files are looked at.
    type: int
    default: 3
  only:
    description: With C(phase=spread), the top-level names of the folder that travel; empty for all.
    type: list
    elements: str
    default: []
  timeout:
    description: rsync's I/O timeout in seconds (a transfer that stalls this long fails).
    type: int
    default: 60
  seeded:
    description:
      - With C(phase=spread), what C(rsync --stats) printed for the copy that brought the folder
        to the first node (the controller's, through ansible.posix.synchronize); its bytes sent
        are returned as C(seed_bytes), read as every transfer's are.
    type: str
    default: ""
  max_seconds:
    description:
      - With C(phase=during), the longest the copy may take (0 for no limit). A transfer still
        running then is cut short, keeping what arrived (C(--partial)) in the receiver's
        incoming folder, and C(incomplete) is returned; the next copy goes on from there.
    type: float
    default: 0
"""

RETURN = r"""
incomplete:
  description: With C(phase=during), whether I(max_seconds) cut the copy short.
  type: bool
  returned: when phase is during
seconds:
  description: How long the whole step took.
  type: float
  returned: always
bytes:
  description: The bytes that crossed the network (rsync's sent and received, every transfer).
  type: int
  returned: always
files:
  description: The files transferred, every copy counted.
  type: int
  returned: always
transfers:
  description: "Each rsync: from, to, files, bytes, seconds, error."
  type: list
  returned: always
rounds:
  description: (before) How many rounds the sending took.
  type: int
  returned: always
seed_bytes:
  description: (spread) The bytes that the copy to the first node sent (from I(seeded)).
  type: int
  returned: always
holders:
  description: (after, during) The other nodes that hold the master's files now.
  type: list
  returned: always
problems:
  description: One sentence per node that could not be listed or sent to.
  type: list
  returned: always
"""


def run(
    argv: list[str], stdin: str = "", timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """argv's result; one that outlives `timeout` is killed (rsync with --partial keeps what
    had arrived, for the next copy to go on from)."""
    try:
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, TIMED_OUT, "", "cut short: max_seconds passed")
    except OSError as error:
        return subprocess.CompletedProcess(argv, 127, "", str(error))


def rsync(timeout: int, *args: str) -> list[str]:
    """rsync over the nodes' SSH trust, in the C locale (its --stats figures are then plain)."""
    ssh = shlex.join(["ssh", *SSH_OPTIONS])
    return [
        "env", "LC_ALL=C", "rsync", "--archive", "--stats", "--mkpath",
        f"--timeout={timeout}", "--rsh", ssh, *args,
    ]  # fmt: skip


# The exit status given to a command cut short by max_seconds.
TIMED_OUT = 124


class Sync:
    def __init__(self, params: dict) -> None:
        self.folder = params["folder"].rstrip("/")
        self.nodes: dict[str, str] = params["nodes"]
        self.order = list(self.nodes)
        self.master = self.order[0]
        self.timeout = params["timeout"]
        self.transfers: list[dict] = []
        self.problems: list[str] = []
        # phase=during: the monotonic time by which the copy stops (None: no limit).
        limit = params.get("max_seconds") or 0
        self.deadline = time.monotonic() + limit if limit else None
        self.incomplete = False

    def left(self) -> float | None:
        """Seconds left before the deadline (None without one)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def out_of_time(self) -> bool:
        left = self.left()
        self.incomplete = self.incomplete or left == 0.0
        return left == 0.0

    def address(self, name: str) -> str | None:
        return None if name == self.master else self.nodes[name]

    def list_all(self, names: list[str]) -> dict[str, dict]:
        def listing(name: str) -> dict | None:
            done = run(on_node(self.address(name), ["python3", "-c", LIST_SCRIPT, self.folder]))
            try:
                return json.loads(done.stdout) if done.returncode == 0 else None
            except ValueError:
                return None

        with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
            found = dict(zip(names, pool.map(listing, names)))
        for name, value in found.items():
            if value is None:
                self.problems.append(f"{name}: its output folder {self.folder} could not be listed")
        return {name: value for name, value in found.items() if value is not None}

    def transfer(
        self, sender: str, receiver: str, files: list[str] | None = None, into: str = ""
    ) -> bool:
        """Send the folder (or the files listed, relative to it) from sender to receiver; the
        command runs on the master or on the sender. `into`: a folder under the receiver's
        output folder, for the master's files sent while the job runs."""
        started = time.monotonic()
        if into:
            argv = rsync(
                self.timeout,
                # A copy cut short by max_seconds goes on from what arrived.
                "--partial",
                "--files-from=-",
                f"{self.folder}/",
                f"{self.nodes[receiver]}:{self.folder}/{into}/",
            )
        elif files is not None and receiver == self.master:  # a fetch to the master
            argv = rsync(
                self.timeout,
                "--files-from=-",
                f"{self.nodes[sender]}:{self.folder}/",
                f"{self.folder}/",
            )
        elif files is not None:  # some files, from any node that has them
            argv = on_node(
                self.address(sender),
                rsync(
                    self.timeout,
                    "--files-from=-",
                    f"{self.folder}/",
                    f"{self.nodes[receiver]}:{self.folder}/",
                ),
            )
        else:
            source = f"{self.folder}/"
            argv = on_node(
                self.address(sender),
                rsync(self.timeout, source, f"{self.nodes[receiver]}:{self.folder}/"),
            )
        done = run(argv, "\n".join(files or []) + "\n" if files else "", self.left())
        if done.returncode == TIMED_OUT and self.deadline is not None:
            self.incomplete = True
        stats = rsync_stats(done.stdout)
        error = "" if done.returncode == 0 else " ".join(done.stderr.split())[-300:]
        self.transfers.append(
            {
                "from": sender,
                "to": receiver,
                "files": stats["files"],
                "bytes": stats["sent"] + stats["received"],
                "seconds": round(time.monotonic() - started, 2),
                "error": error,
            }
        )
        if error and done.returncode != TIMED_OUT:
            self.problems.append(f"{sender} -> {receiver}: rsync failed: {error}")
        return not error

    def parallel(self, jobs: list[tuple]) -> list[bool]:
        if not jobs:
            return []
        with ThreadPoolExecutor(max_workers=min(32, len(jobs))) as pool:
            return list(pool.map(lambda job: self.transfer(*job), jobs))

    def before(self) -> dict:
        listings = self.list_all(self.order)
        if self.master not in listings:
            return {"rounds": 0, "holders": []}
        fetch = newest_copies(listings, [n for n in self.order if n in listings])
        fetched = self.parallel([(holder, self.master, paths) for holder, paths in fetch.items()])
        gathered = {holder: fetch[holder] for holder, ok in zip(fetch, fetched) if ok}
        return self.send_rounds(listings, after_gathering(listings, self.master, gathered))

    def spread(self, only: list[str] | None = None) -> dict:
        """The first node's folder to every other node that lacks a file of it, in rounds
        that double the nodes that have it (staging: the controller sent it to one node).
        `only`: the top-level names of the folder that travel (the rest is each node's own)."""
        listings = self.list_all(self.order)
        wanted = {
            path: value
            for path, value in (listings.get(self.master) or {}).items()
            if not only or path.split("/", 1)[0] in only
        }
        if not wanted:
            self.problems.append(f"{self.master}: nothing to send in {self.folder}")
            return {"rounds": 0, "holders": []}
        return self.send_rounds(listings, wanted, sorted(wanted) if only else None)

    def send_rounds(
        self, listings: dict[str, dict], wanted: dict, paths: list[str] | None = None
    ) -> dict:
        """Send the master's folder (or only `paths` of it) to the nodes whose listing lacks a
        file of `wanted`: in each round, every node that has it sends to one that waits."""
        have = [self.master]
        waiting = [
            name
            for name in self.order[1:]
            if name in listings and wanted and lacking(listings[name], wanted)
        ]
        rounds = 0
        while waiting:
            pairs = next_round(have, waiting)
            sent = self.parallel([(a, b, paths) if paths else (a, b) for a, b in pairs])
            have += [receiver for (_, receiver), ok in zip(pairs, sent) if ok]
            waiting = waiting[len(pairs) :]
            rounds += 1
        return {"rounds": rounds, "holders": have[1:]}

    def during(self, copies: int, settle: float, tries: int = 3) -> dict:
        """While the job runs: the master's files not modified for `settle` seconds and held
        open by no process, to the next `copies` nodes, through their INCOMING folder. A file
        that changed while it travelled is dropped there (the receiver keeps its older copy),
        and a file written too recently to travel is waited for: both are tried again once
        they have settled, up to `tries` looks in all. A receiver is a holder only when it
        has every file of the master's last listing, in that version."""
        names = [self.master, *self.order[1:][:copies]]
        listings = self.list_all(names)
        holders: list[str] = []
        for name in names[1:]:
            if self.out_of_time():
                break
            if name in listings and self.copy_during(name, listings, settle, tries):
                holders.append(name)
        found = {"rounds": 1 if self.transfers else 0, "holders": holders}
        return {**found, "incomplete": self.incomplete}

    def copy_during(self, name: str, listings: dict[str, dict], settle: float, tries: int) -> bool:
        """Bring one receiver up to date with the master's files; whether it is."""
        have = dict(listings[name])
        master = listings.get(self.master) or {}
        late: list[str] = []
        for attempt in range(tries):
            if self.out_of_time():
                return False
            if attempt:
                time.sleep(min(settle + 0.1, self.left() or settle + 0.1))  # it settles first
                master = self.list_all([self.master]).get(self.master) or {}
            differ = sorted(p for p, v in master.items() if list(have.get(p) or []) != list(v))
            if not differ:
                return True
            wanted = settled_files(
                {p: master[p] for p in differ}, time.time_ns(), settle, open_files(self.folder)
            )
            paths = sorted(wanted)
            if paths and not self.transfer(self.master, name, paths, INCOMING):
                return False
            keep = []
            if paths:
                now = self.list_all([self.master]).get(self.master) or {}
                keep = unchanged(wanted, now, paths)
                done = run(
                    ssh_argv(self.nodes[name], ["python3", "-c", SETTLE_SCRIPT, self.folder]),
                    json.dumps(keep),
                )
                if done.returncode != 0:
                    self.problems.append(f"{name}: the copies could not be moved into place")
                    return False
                have.update({path: wanted[path] for path in keep})
            late = [path for path in differ if path not in keep]
            if not late:
                return True
        self.problems.append(
            f"{name}: {', '.join(late)} kept changing (being written, or changed while it "
            f"travelled) through {tries} looks; its older copy is kept"
        )
        return False

    def after(self, copies: int) -> dict:
        listings = self.list_all(self.order)
        wanted = listings.get(self.master) or {}
        if not wanted:
            return {"rounds": 0, "holders": []}
        candidates = [name for name in self.order[1:] if name in listings]
        holders: list[str] = []
        rounds = 0
        while candidates and len(holders) < copies:
            batch, candidates = (
                candidates[: copies - len(holders)],
                candidates[copies - len(holders) :],
            )
            needing = [name for name in batch if lacking(listings[name], wanted)]
            holders += [name for name in batch if name not in needing]
            sent = self.parallel([(self.master, name) for name in needing])
            holders += [name for name, ok in zip(needing, sent) if ok]
            rounds += bool(needing)
        if len(holders) < copies:
            self.problems.append(
                f"the master's output folder is on {len(holders)} other node(s), not {copies}"
            )
        return {"rounds": rounds, "holders": holders}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "phase": {
                "type": "str",
                "required": True,
                "choices": ["before", "during", "after", "spread"],
            },
            "folder": {"type": "path", "required": True},
            "nodes": {"type": "dict", "required": True},
            "copies": {"type": "int", "default": 1},
            "timeout": {"type": "int", "default": 60},
            "settle": {"type": "float", "default": 0.5},
            "tries": {"type": "int", "default": 3},
            "only": {"type": "list", "elements": "str", "default": []},
            "seeded": {"type": "str", "default": ""},
            "max_seconds": {"type": "float", "default": 0},
        },
        supports_check_mode=False,
    )
    p = module.params
    if not p["nodes"]:
        module.fail_json(msg="nodes must name at least the master")
    started = time.monotonic()
    sync = Sync(p)
    if p["phase"] == "before":
        found = sync.before()
    elif p["phase"] == "spread":
        found = sync.spread(p["only"])
    elif p["phase"] == "during":
        found = sync.during(p["copies"], p["settle"], max(1, p["tries"]))
    else:
        found = sync.after(p["copies"])
    result = {
        "changed": bool(sync.transfers),
        "seconds": round(time.monotonic() - started, 2),
        "bytes": sum(t["bytes"] for t in sync.transfers),
        "files": sum(t["files"] for t in sync.transfers),
        "transfers": sync.transfers,
        "problems": sync.problems,
        "seed_bytes": rsync_stats(p["seeded"])["sent"],
        **found,
    }
    if p["phase"] in ("before", "spread") and sync.problems:
        what = (
            "The output folders could not be brought up to date before the start"
            if p["phase"] == "before"
            else f"{p['folder']} could not be spread to every node"
        )
        module.fail_json(msg=f"{what}: " + "; ".join(sync.problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
