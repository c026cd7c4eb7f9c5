#!/usr/bin/python
"""Ansible module: start or stop one node's part of a torchrun job (its systemd unit)."""

from __future__ import annotations

import inspect
import os
import pwd
import shutil
import sys
from collections.abc import Callable

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.digests import (
    tree_digest,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.files import (
    newest_mtime_ns,
    read_text,
    replace_text,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.common.proc import (
    job_processes,
    port_listeners,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.failures import (
    parse_torchrun_failures,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.fence import (
    FENCE_FILE,
    HEARTBEAT_DIR,
    fence_argv,
    fence_unit,
    fence_unit_argv,
    heartbeat_path,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.gpu_release import (
    COMPUTE_APPS,
    wait_for_release,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.logs import last_lines
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.record_wrapper import (
    RECORD_WRAPPER,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.result_files import (
    matching_files,
    rsync_filters,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.sync import INCOMING
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_probe import (
    gpu_device_nodes_command,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_properties import (
    LIMIT_MEMLOCK,
    LIMIT_NOFILE,
    limit_properties,
    protection_properties,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.unit_state import (
    RUNNING,
    STOPPED,
    UNIT_PROPERTIES,
    parse_properties,
    unit_state,
)

DOCUMENTATION = r"""
module: torch_job_unit
short_description: Start or stop one node's transient systemd unit of a torchrun job
description:
  - C(state=started) checks the staged code against its digest, clears what an earlier run of
    the job left (a failed or finished unit of the same name, a stop request), and starts the
    command in a transient unit with C(systemd-run). It refuses to start over a running unit.
  - C(state=prepared) does all of that but the start, for a job that another launcher (Slurm)
    starts (the folders, the wrapper, the header in the log, the code checked).
  - C(state=absent) stops the unit (C(systemctl stop) returns once every process of its
    cgroup is gone), clears its failure, then looks for processes that still carry the job's
    C(TORCH_JOB_ID) and, when asked, for processes listening on a port.
  - No module of Ansible starts transient units; this one does, with check mode.
options:
  name:
    description: The unit's name (C(torch-job-ID)).
    type: str
    required: true
  state:
    description: Whether the unit should run or be gone.
    type: str
    choices: [started, prepared, absent]
    required: true
  job_id:
    description: The job's id; its processes carry it as C(TORCH_JOB_ID).
    type: str
    required: true
  command:
    description: The argv the unit runs (torchrun and its arguments). For I(state=started).
    type: list
    elements: str
    default: []
  description:
    description: The unit's description.
    type: str
    default: ""
  user:
    description: The user the unit runs as.
    type: str
    default: root
  working_directory:
    description: The unit's working directory, created when missing (owned by I(user)).
    type: path
  log:
    description: File that gets the unit's output (appended).
    type: path
  env:
    description: Environment variables of the unit (C(TORCH_JOB_ID) is added).
    type: dict
    default: {}
  runtime_max_sec:
    description: Stop the unit after this many seconds (0 for no limit).
    type: int
    default: 0
  limit_memlock:
    description:
      - The unit's locked-memory limit (C(LimitMEMLOCK), soft and hard), in systemd's syntax
        (C(infinity), bytes, C(64M)); empty leaves the service manager's default.
      - NCCL over InfiniBand or RoCE registers its buffers with C(ibv_reg_mr), which fails
        under a small limit; C(limits.conf) does not reach systemd units.
      - Where systemd may not raise its own hard limit (a container without
        C(CAP_SYS_RESOURCE)) the unit gets that limit instead; C(playbooks/check.yml) reports
        what a unit gets on every node.
    type: str
    default: infinity
  limit_nofile:
    description: The unit's open-files limit (C(LimitNOFILE), soft and hard); 0 leaves the
      service manager's default (1024 soft on most systems).
    type: int
    default: 1048576
  code_dir:
    description: The staged code; checked against I(code_digest) before the start.
    type: path
  code_digest:
    description: tree_digest of the controller's code.
    type: str
    default: ""
  folders:
    description: Folders created before the start when missing, owned by I(user) (job, output).
    type: list
    elements: path
    default: []
  wrapper:
    description:
      - Where to write the launcher's wrapper that runs the script under torch's error
        recording (record_wrapper.RECORD_WRAPPER); the command names it. Empty for none.
    type: path
    default: ""
  log_start:
    description:
      - With I(state=absent), where this attempt's part of the log starts; the failures
        torchrun reported there are returned.
    type: int
    default: -1
  results:
    description: With I(state=absent), glob patterns of result files, relative to I(output_dir).
    type: list
    elements: str
    default: []
  output_dir:
    description: The job's output folder, where I(results) are looked for.
    type: path
  node_name:
    description: This node's inventory hostname, for the failures returned.
    type: str
    default: ""
  tail_lines:
    description: With I(state=absent) and I(log_start), how many of the log's last lines to return.
    type: int
    default: 30
  header:
    description: A line appended to the log before the start, to tell runs and attempts apart.
    type: str
    default: ""
  remove:
    description: Files removed before the start (a stop request of an earlier run).
    type: list
    elements: path
    default: []
  port:
    description: With I(state=absent), report processes that listen on this TCP port (0 for none).
    type: int
    default: 0
  requires_mounts:
    description:
      - Paths whose mounts the unit needs (systemd's C(RequiresMountsFor)); systemd mounts them
        first, from C(/etc/fstab), and does not start the unit without them.
    type: list
    elements: path
    default: []
  protect:
    description:
      - Confine the unit (I(state=started)) with systemd's sandboxing
        (unit_properties.protection_properties) C(NoNewPrivileges=yes), C(ProtectSystem=strict)
        with C(ReadWritePaths) of I(folders), I(working_directory), I(writable) and the user's
        home, C(PrivateTmp=yes), every other home hidden (C(ProtectHome=tmpfs) with the
        user's own bound back) and the user's C(~/.ssh) inaccessible.
      - C(/dev) (the GPUs, C(/dev/shm)), C(/proc) and C(/sys) stay as they are.
    type: bool
    default: false
  writable:
    description: With I(protect), more paths the job may write to; each must exist.
    type: list
    elements: path
    default: []
  fence_timeout:
    description:
      - With I(state=started), also start the job's fence unit (plugins/module_utils/job/fence.py),
        which kills the job's processes on this node once its heartbeat file has not been
        touched by the watch for this many seconds while torchrun runs. 0 for no fence.
      - With I(state=prepared), make the fence's script and heartbeat ready, and return the
        fence's command as I(fence), for the launcher that starts torchrun (Slurm's batch
        script) to start beside it.
    type: float
    default: 0
  gpu_release_timeout:
    description:
      - With I(state=absent), on a node with nvidia-smi, how long to wait until no process of
        the stopped attempt holds GPU memory (job/gpu_release.py); what is held then is
        returned as I(gpu_held).
    type: float
    default: 30
"""

RETURN = r"""
gpu_held:
  description: With I(state=absent), the attempt's processes (pid -> MiB) still on a GPU when
    the wait for their release ended; empty once released, or on a node without GPUs.
  type: dict
  returned: when state is absent
gpu_release_seconds:
  description: With I(state=absent), how long the wait for the GPUs' release took.
  type: float
  returned: when state is absent
command:
  description: The systemd-run argv (started), or the command (prepared).
  type: list
  returned: when state is started or prepared
fence:
  description: With I(state=prepared) and I(fence_timeout), the fence's command, to which the
    launcher adds torchrun's PID and the Slurm job's id; empty without a fence.
  type: list
  returned: when state is prepared
log_start:
  description: Size of the log before the start, where this run's output begins.
  type: int
  returned: when state is started or prepared
output_newest:
  description: The newest modification time (ns) of the files in I(working_directory) before
    the start (0 for none, -1 when it cannot be read); a newer file is one the job wrote.
  type: int
  returned: when state is started or prepared
was:
  description: The unit's state before the stop (absent).
  type: dict
  returned: when state is absent
leftovers:
  description: Processes that still carry the job's TORCH_JOB_ID after the stop.
  type: list
  returned: when state is absent
port_users:
  description: Processes listening on I(port) after the stop.
  type: list
  returned: when state is absent
failures:
  description: The failed workers torchrun reported in this attempt's part of the log.
  type: list
  returned: when state is absent
tail:
  description: The last lines the workers wrote in this attempt's part of the log.
  type: str
  returned: when state is absent
results:
  description: The files of I(output_dir) that match I(results), relative to it.
  type: list
  returned: when state is absent
rsync_filters:
  description: rsync options that fetch exactly the I(results) files.
  type: list
  returned: when state is absent
"""


def show(module: AnsibleModule, name: str) -> dict[str, str]:
    argv = ["systemctl", "show", name, f"--property={','.join(UNIT_PROPERTIES)}"]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"systemctl show {name}: {err.strip()}")
    return parse_properties(out)


def clear(module: AnsibleModule, name: str, props: dict[str, str]) -> bool:
    """Stop the unit and forget its failure, so that its name is free; True if it did anything."""
    active = props.get("ActiveState", "inactive")
    if props.get("LoadState") == "not-found" or active == "inactive":
        return False
    if module.check_mode:
        return True
    # Another stop may run at the same time (playbooks/stop.yml while train.yml tears the
    # job down): a unit that is gone by the time a command reaches it is what both want.
    if active != "failed":
        rc, _, err = module.run_command(["systemctl", "stop", name])
        if rc != 0 and not gone(module, name):
            module.fail_json(msg=f"systemctl stop {name}: {err.strip()}")
    if show(module, name).get("ActiveState") == "failed":
        rc, _, err = module.run_command(["systemctl", "reset-failed", name])
        if rc != 0 and not gone(module, name):
            module.fail_json(msg=f"systemctl reset-failed {name}: {err.strip()}")
    return True


def gone(module: AnsibleModule, name: str) -> bool:
    """The unit is stopped and its name free (or about to be: inactive)."""
    props = show(module, name)
    return props.get("LoadState") == "not-found" or props.get("ActiveState") == "inactive"


# torchrun prints its summary of a failed run last: this much of the log's end holds it.
SUMMARY_BYTES = 256 * 1024


def read_tail(path: str, start: int) -> str:
    """The log from byte start on, or its last SUMMARY_BYTES when that is shorter."""
    try:
        with open(path, "rb") as log:
            size = os.fstat(log.fileno()).st_size
            log.seek(max(min(start, size), size - SUMMARY_BYTES))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def systemd_run(params: dict) -> list[str]:
    argv = [
        "systemd-run",
        f"--unit={params['name']}",
        "--remain-after-exit",
        f"--description={params['description'] or params['name']}",
        f"--property=User={params['user']}",
        f"--property=WorkingDirectory={params['working_directory']}",
        f"--property=StandardOutput=append:{params['log']}",
        f"--property=StandardError=append:{params['log']}",
        # Stopping the unit kills every process of its cgroup: torchrun's workers run in
        # sessions of their own, and outlive a kill of torchrun alone.
        "--property=KillMode=control-group",
        "--property=TimeoutStopSec=10",
    ]
    argv += [f"--property=RequiresMountsFor={path}" for path in params["requires_mounts"]]
    limits = limit_properties(params["limit_memlock"], params["limit_nofile"])
    argv += [f"--property={limit}" for limit in limits]
    if params["protect"]:
        home = pwd.getpwnam(params["user"]).pw_dir
        writable = [*params["folders"], params["working_directory"], *params["writable"]]
        argv += [f"--property={prop}" for prop in protection_properties(home, writable)]
    if params["runtime_max_sec"] > 0:
        argv.append(f"--property=RuntimeMaxSec={params['runtime_max_sec']}")
    environment = {**params["env"], "TORCH_JOB_ID": params["job_id"]}
    argv += [f"--setenv={key}={value}" for key, value in environment.items()]
    return [*argv, "--", *params["command"]]


def make_folder(folder: str, user: pwd.struct_passwd) -> None:
    """Make a folder and its missing parents, each owned by the user: on a shared folder
    another node (the user over sshfs, or root squashed to nobody over NFS) must be able to
    make its own folders beside them. Every node makes the same folders at the same time (one
    made meanwhile by another is taken as it is). Where root may not write (an NFS export that
    squashes root, as NFS does by default) the user makes them."""
    missing, path = [], os.path.abspath(folder)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            continue
        except PermissionError:
            as_user(user, lambda path=path: os.makedirs(path, mode=0o755, exist_ok=True))
            continue
        os.chown(path, user.pw_uid, user.pw_gid)


def as_user(user: pwd.struct_passwd, action: Callable[[], None]) -> None:
    """Run the action in a child process with the user's ids; its OSError is raised here."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        os.close(read)
        code = 0
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            action()
        except OSError as err:
            os.write(write, f"{err.errno}\0{err.strerror}\0{err.filename}".encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        number, message, name = ([*said.split("\0"), "", "", ""])[:3]
        raise OSError(int(number or 0), f"{message or 'failed'} (as {user.pw_name})", name)


def prepare_fence(params: dict, user: pwd.struct_passwd) -> None:
    """The fence's script and the job's heartbeat file (the watch's polls, as the training
    user, touch it), in the node-local HEARTBEAT_DIR."""
    os.makedirs(HEARTBEAT_DIR, mode=0o755, exist_ok=True)
    script = os.path.join(HEARTBEAT_DIR, FENCE_FILE)
    source = inspect.getsource(sys.modules[fence_unit.__module__])
    if read_text(script) != source:
        replace_text(script, source, mode=0o644)
    heartbeat = heartbeat_path(params["name"])
    with open(heartbeat, "a", encoding="utf-8"):
        pass
    os.utime(heartbeat)
    os.chown(heartbeat, user.pw_uid, user.pw_gid)


def prepare(params: dict) -> int:
    """Make the job's folders and files ready for a start; where the log ends now."""
    for path in params["remove"]:
        if os.path.lexists(path):
            os.remove(path)
    user = pwd.getpwnam(params["user"])
    log = params["log"]
    for folder in [*params["folders"], params["working_directory"], os.path.dirname(log)]:
        if not os.path.isdir(folder):
            make_folder(folder, user)
    log_start = os.path.getsize(log) if os.path.exists(log) else 0
    if params["wrapper"] and read_text(params["wrapper"]) != RECORD_WRAPPER:
        replace_text(params["wrapper"], RECORD_WRAPPER, mode=0o644)
    if params["fence_timeout"] > 0:
        prepare_fence(params, user)
    if params["header"]:
        with open(log, "a") as handle:
            handle.write(params["header"].rstrip("\n") + "\n")
    # Another launcher's step (Slurm's) appends to the log as the user; systemd opens it as root.
    if os.path.exists(log) and os.stat(log).st_uid != user.pw_uid:
        os.chown(log, user.pw_uid, user.pw_gid)
    return log_start


def output_newest(folder: str) -> int:
    """When the job's output folder last changed, before the start (-1: it cannot be read here):
    a file newer than that is one the job wrote (torch_job_watch's output_written)."""
    newest = newest_mtime_ns(folder, skip=(INCOMING,))
    return -1 if newest is None else newest


def prepare_or_fail(module: AnsibleModule) -> int:
    try:
        return prepare(module.params)
    except OSError as err:
        module.fail_json(
            msg=f"cannot make the job's folders and files ready: {err}. The training user "
            f"{module.params['user']} must be able to write to the parent folders (a job folder "
            "that root made, before the training user, belongs to root: chown it to that user)"
        )


def start(module: AnsibleModule) -> None:
    params = module.params
    for required in ("command", "working_directory", "log"):
        if not params[required]:
            module.fail_json(msg=f"state={params['state']} needs {required}")
    # In check mode the code was not copied: there is nothing to compare yet.
    if params["code_digest"] and not module.check_mode:
        found = tree_digest(params["code_dir"])
        if found != params["code_digest"]:
            module.fail_json(
                msg=f"the staged code in {params['code_dir']} differs from the controller's "
                f"(sha256 {found or 'none: the folder is missing'} against {params['code_digest']})"
            )
    props = show(module, params["name"])
    state = unit_state(props)
    if state.state == RUNNING:
        module.fail_json(msg=f"{params['name']} is running already ({state.detail})")
    if params["state"] == "prepared":
        # Another launcher (Slurm) starts the command: only the node's side is made ready.
        fencing = []
        if params["fence_timeout"] > 0:
            fencing = fence_argv(
                sys.executable, params["name"], params["fence_timeout"], params["log"],
                params["node_name"],
            )  # fmt: skip
        if module.check_mode:
            module.exit_json(changed=True, command=params["command"], log_start=0, fence=fencing)
        clear(module, params["name"], props)
        log_start = prepare_or_fail(module)
        module.exit_json(
            changed=True,
            command=params["command"],
            log_start=log_start,
            output_newest=output_newest(params["working_directory"]),
            fence=fencing,
        )
    argv = systemd_run(params)
    if module.check_mode:
        module.exit_json(changed=True, command=argv, log_start=0)
    clear(module, params["name"], props)
    clear(module, fence_unit(params["name"]), show(module, fence_unit(params["name"])))
    log_start = prepare_or_fail(module)
    devices = gpu_device_nodes_command()
    if devices:
        rc, out, err = module.run_command(devices)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(devices)} failed: {(err or out).strip()}")
    newest = output_newest(params["working_directory"])
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"systemd-run failed: {(err or out).strip()}", command=argv)
    start_fence(module)
    module.exit_json(changed=True, command=argv, log_start=log_start, output_newest=newest)


def gpu_apps(module: AnsibleModule) -> str | None:
    """nvidia-smi's list of the processes on the GPUs; None without nvidia-smi, or when it
    cannot answer (then there is nothing to wait for)."""
    if not shutil.which("nvidia-smi"):
        return None
    rc, out, _ = module.run_command(["timeout", "10", *COMPUTE_APPS])
    return out if rc == 0 else None


def start_fence(module: AnsibleModule) -> None:
    """The fence unit beside the job's started unit (train_fence_timeout), run by this node's
    Python (the one that runs this module)."""
    params = module.params
    if params["fence_timeout"] <= 0:
        return
    fencing = fence_unit_argv(
        sys.executable, params["name"], params["fence_timeout"], params["log"], params["node_name"]
    )
    rc, out, err = module.run_command(fencing)
    if rc != 0:
        module.fail_json(msg=f"the fence unit did not start: {(err or out).strip()}")


def stop(module: AnsibleModule) -> None:
    params = module.params
    props = show(module, params["name"])
    was = unit_state(props)
    # The attempt's processes, for the GPUs they may still hold once they are stopped.
    pids = [] if module.check_mode else [int(p.split()[0]) for p in job_processes(params["job_id"])]
    changed = clear(module, params["name"], props)
    # Bound to the job's unit, the fence has stopped with it; a failed one is cleared here.
    clear(module, fence_unit(params["name"]), show(module, fence_unit(params["name"])))
    if not module.check_mode and os.path.exists(heartbeat_path(params["name"])):
        os.remove(heartbeat_path(params["name"]))
    held, waited = (
        ({}, 0.0)
        if module.check_mode
        else wait_for_release(lambda: gpu_apps(module), pids, params["gpu_release_timeout"])
    )
    leftovers = [] if module.check_mode else job_processes(params["job_id"])
    port_users = port_listeners(params["port"]) if params["port"] else []
    results = matching_files(params["output_dir"], params["results"]) if params["results"] else []
    failures, tail = [], ""
    if params["log_start"] >= 0 and params["log"]:
        summary = read_tail(params["log"], params["log_start"])
        failures = [f.as_dict() for f in parse_torchrun_failures(summary, params["node_name"])]
        tail = last_lines(summary, params["tail_lines"])
    module.exit_json(
        changed=changed,
        was=was.as_dict(),
        gone=was.state == STOPPED and not changed,
        leftovers=leftovers,
        port_users=port_users,
        failures=failures,
        tail=tail,
        results=results,
        rsync_filters=rsync_filters(results),
        gpu_held={str(pid): memory for pid, memory in held.items()},
        gpu_release_seconds=waited,
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {
                "type": "str",
                "required": True,
                "choices": ["started", "prepared", "absent"],
            },
            "job_id": {"type": "str", "required": True},
            "command": {"type": "list", "elements": "str", "default": []},
            "description": {"type": "str", "default": ""},
            "user": {"type": "str", "default": "root"},
            "working_directory": {"type": "path"},
            "log": {"type": "path"},
            "env": {"type": "dict", "default": {}},
            "runtime_max_sec": {"type": "int", "default": 0},
            "limit_memlock": {"type": "str", "default": LIMIT_MEMLOCK},
            "limit_nofile": {"type": "int", "default": LIMIT_NOFILE},
            "code_dir": {"type": "path"},
            "code_digest": {"type": "str", "default": ""},
            "folders": {"type": "list", "elements": "path", "default": []},
            "wrapper": {"type": "path", "default": ""},
            "log_start": {"type": "int", "default": -1},
            "node_name": {"type": "str", "default": ""},
            "results": {"type": "list", "elements": "str", "default": []},
            "output_dir": {"type": "path"},
            "header": {"type": "str", "default": ""},
            "tail_lines": {"type": "int", "default": 30},
            "remove": {"type": "list", "elements": "path", "default": []},
            "port": {"type": "int", "default": 0},
            "requires_mounts": {"type": "list", "elements": "path", "default": []},
            "protect": {"type": "bool", "default": False},
            "writable": {"type": "list", "elements": "path", "default": []},
            "fence_timeout": {"type": "float", "default": 0},
            "gpu_release_timeout": {"type": "float", "default": 30},
        },
        supports_check_mode=True,
    )
    if module.params["state"] in ("started", "prepared"):
        start(module)
    else:
        stop(module)


if __name__ == "__main__":
    main()
