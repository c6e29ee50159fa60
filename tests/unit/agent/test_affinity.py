"""The agent's ledger of the host's CPUs: jobs get the least used, steps split the job's."""

from __future__ import annotations

import os

import pytest

from muster.agent.affinity import CpuLedger, apply, binding_env, task_affinity
from muster.core.config import Config
from muster.core.cpubind import CpuBind, parse_cpu_bind


def test_jobs_get_the_least_used_cpus_and_give_them_back() -> None:
    ledger = CpuLedger([0, 1, 2, 3])
    assert ledger.job_cpus(1, 2) == [0, 1]
    assert ledger.job_cpus(2, 2) == [2, 3]
    assert ledger.job_cpus(1, 2) == [0, 1]  # the same job: the same CPUs, held twice
    assert ledger.job_cpus(3, 1) == [0]  # all taken: shared with the least loaded
    ledger.release(1)
    assert ledger.held()[1] == [0, 1]  # still held once
    ledger.release(1)
    assert 1 not in ledger.held()
    assert ledger.job_cpus(4, 8) == [0, 1, 2, 3]  # never more than the host has


def test_steps_of_a_job_split_its_cpus_and_end_with_their_tasks() -> None:
    ledger = CpuLedger([0, 1, 2, 3])
    first = ledger.step_cpus(7, 0, 4, [1, 1], CpuBind("task"), "none")
    second = ledger.step_cpus(7, 1, 4, [2], CpuBind("task"), "none")
    assert first == [(0,), (1,)] and second == [(2, 3)]
    assert ledger.step_cpus(7, 2, 4, [1], CpuBind(), "none") is None  # not bound
    ledger.release_step(7, 0)
    ledger.release_step(7, 2)
    assert ledger.step_cpus(7, 3, 4, [1, 1], CpuBind("task"), "none") == [(0,), (1,)]
    for step in (1, 3):
        ledger.release_step(7, step)
    assert ledger.held() == {}


def test_an_adopted_job_keeps_its_pinned_cpus() -> None:
    ledger = CpuLedger([0, 1, 2, 3])
    assert ledger.adopt(5, [2, 3, 9])
    assert not ledger.adopt(6, [9])
    assert ledger.job_cpus(8, 2) == [0, 1]


def test_binding_is_told_to_the_tasks_as_slurm_does() -> None:
    env = binding_env(parse_cpu_bind("verbose,cores"), [(0,), (1, 2)])
    assert env == {
        "SLURM_CPU_BIND": "verbose,mask_cpu:0x1,0x6",
        "SLURM_CPU_BIND_VERBOSE": "verbose",
        "SLURM_CPU_BIND_TYPE": "mask_cpu:",
        "SLURM_CPU_BIND_LIST": "0x1,0x6",
    }


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [(None, False), ("task/none", False), ("task/affinity", True), ("task/affinity,task/cgroup", True)],
)
def test_task_plugin_decides_the_default(plugin: str | None, expected: bool) -> None:
    settings = {"TaskPlugin": plugin} if plugin else {}
    assert task_affinity(Config(settings=settings)) is expected


def test_apply_pins_a_forked_child() -> None:
    target = min(os.sched_getaffinity(0))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = apply([target])
        os.write(w, f"{ok} {sorted(os.sched_getaffinity(0))}".encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode()
    os.waitpid(pid, 0)
    assert got == f"True [{target}]"
    assert apply(None) is False and apply([]) is False
