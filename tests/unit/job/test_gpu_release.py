"""Before a restart, the stopped attempt's processes must have left every GPU; past
train_gpu_release_timeout the teardown names the node."""

from __future__ import annotations

from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.attempts import (
    teardown_problems,
)
from ansible_collections.torch_cluster.cluster.plugins.module_utils.job.gpu_release import (
    parse_compute_apps,
    wait_for_release,
)

APPS = "4242, 30001\n4243, 29950\n777, 100\n4242, 10\n"


def test_the_compute_apps_are_read_per_process() -> None:
    assert parse_compute_apps(APPS) == {4242: 30011, 4243: 29950, 777: 100}
    assert parse_compute_apps("No running processes found\n") == {}
    assert parse_compute_apps("4242, [N/A]\n") == {4242: 0}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_wait_ends_once_the_jobs_processes_left_the_gpus() -> None:
    answers = iter([APPS, "4243, 29950\n777, 100\n", "777, 100\n"])
    clock = Clock()
    held, waited = wait_for_release(
        lambda: next(answers),
        [4242, 4243],
        30,
        clock=clock,
        sleep=clock.sleep,
        alive=lambda pid: pid == 777,
    )
    # Another program's running process (777) is not the job's to wait for.
    assert (held, waited) == ({}, 1.0)


def test_an_ended_process_whose_memory_is_not_released_yet_is_waited_for() -> None:
    """The job's processes had all ended by the stop (so it knew none of their pids), but the
    driver still lists one with its memory."""
    answers = iter(["5000, 20000\n777, 100\n", "777, 100\n"])
    clock = Clock()
    held, waited = wait_for_release(
        lambda: next(answers), [], 30, clock=clock, sleep=clock.sleep, alive=lambda pid: pid == 777
    )
    assert (held, waited) == ({}, 0.5)


def test_the_wait_gives_up_at_the_limit_and_the_teardown_names_the_node() -> None:
    clock = Clock()
    held, waited = wait_for_release(
        lambda: APPS, [4242], 3, clock=clock, sleep=clock.sleep, alive=lambda pid: pid != 4242
    )
    assert (held, waited) == ({4242: 30011}, 3.0)
    result = {"gpu_held": {str(pid): mib for pid, mib in held.items()}, "gpu_release_seconds": 3}
    _, problems = teardown_problems({"node1": result, "node0": {"leftovers": []}})
    assert problems == [
        "node1: the GPU memory of the stopped attempt is still held 3 s after the stop "
        "(train_gpu_release_timeout) by pid 4242 (30011 MiB): the next attempt cannot use "
        "that node"
    ]


def test_nothing_is_waited_for_without_nvidia_smi_or_processes() -> None:
    clock = Clock()
    assert wait_for_release(lambda: None, [4242], 30, clock=clock, sleep=clock.sleep) == ({}, 0.0)
    everyone_runs = wait_for_release(
        lambda: APPS, [], 30, clock=clock, sleep=clock.sleep, alive=lambda pid: True
    )
    assert everyone_runs == ({}, 0.0)
