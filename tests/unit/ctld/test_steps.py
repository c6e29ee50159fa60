"""The controller's job steps on a manual clock, with a real SQLite store (ctld.steps)."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidRequest, PermissionDenied
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.core.steps import Step, StepRequest, StepState, StepWait
from muster.ctld.actions import SuspendJob
from muster.ctld.controller import Controller, Identity, Terminate
from muster.ctld.steps import SUSPENDED_JOB, StepBook, parse_step_id, step_wire
from muster.ctld.store import Store
from muster.protocol.stepcred import verify_grant

CONF = """
ClusterName=t
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
KEY = b"s" * 32
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
BOB = Identity(1002, 1002, "bob", "bob", "h", admin=False)


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "muster.db")


def make(db: str, clock: ManualClock | None = None) -> tuple[Controller, StepBook]:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(db), clock or ManualClock(1000.0))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    book = StepBook(ctl, KEY)
    book.load()
    return ctl, book


def running_job(ctl: Controller, spec: JobSpec, nodes: list[str], cpus: int = 2, gpus: int = 2) -> int:
    job = ctl.queue.submit(spec, ALICE)

    class Start:
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job.job_id, "gpu", False
            self.alloc = [NodeAlloc(n, cpus, 1000, list(range(gpus))) for n in nodes]

    ctl.launches.apply_starts([Start()], ctl.clock.now())
    ctl.launches.launch_done(job.job_id)
    return job.job_id


def test_steps_are_numbered_placed_granted_and_recorded(db: str) -> None:
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n", min_nodes=2), ["node1", "node2"])
    job = ctl.jobs[job_id]
    first = book.create(job, ALICE, StepRequest(min_nodes=2, ntasks=4), argv=["python", "train.py"])
    assert not isinstance(first, StepWait)
    assert (first.step_id, first.name, first.layout.tasks) == (0, "python", [[0, 1], [2, 3]])
    answer = book.answer(job, first)
    grant = verify_grant(KEY, answer["grant"], answer["sig"], ctl.clock.now())
    assert grant["uid"] == 1001 and grant["step"]["tasks"] == [[0, 1], [2, 3]]
    assert [n["name"] for n in answer["nodes"]] == ["node1", "node2"]
    # The allocation is full: the next step waits until the first ends.
    assert isinstance(book.create(job, ALICE, StepRequest(ntasks=1)), StepWait)
    book.finish(job, ALICE, 0, exit_code=3, signal=0)
    second = book.create(job, ALICE, StepRequest(ntasks=1))
    assert not isinstance(second, StepWait) and second.step_id == 1
    rows = ctl.store.load_steps([job_id])
    assert [(s.step_id, s.state, s.exit_code) for s in rows] == [(0, "FAILED", 3), (1, "RUNNING", 0)]


def test_only_the_owner_runs_steps_and_only_in_a_running_job(db: str) -> None:
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n"), ["node1"])
    with pytest.raises(PermissionDenied):
        book.create(ctl.jobs[job_id], BOB, StepRequest())
    pending = ctl.queue.submit(JobSpec(script="#!/bin/sh\n"), ALICE)
    with pytest.raises(InvalidRequest):
        book.create(pending, ALICE, StepRequest())
    with pytest.raises(InvalidRequest, match="More processors"):
        book.create(ctl.jobs[job_id], ALICE, StepRequest(ntasks=3))


def test_steps_of_a_job_that_ends_are_cancelled_and_their_nodes_cleaned(db: str) -> None:
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n", min_nodes=2), ["node1", "node2"])
    book.create(ctl.jobs[job_id], ALICE, StepRequest(min_nodes=2))
    ctl.queue.cancel(ctl.jobs[job_id], ALICE)
    book.sweep()
    assert book.steps_of(job_id) == []
    assert ctl.store.load_steps([job_id])[0].state == StepState.CANCELLED


@pytest.mark.parametrize(("exit_code", "signal"), [(143, 0), (0, 15), (0, 9)])
def test_a_step_that_srun_reports_after_its_job_was_cancelled_is_cancelled(
    db: str, exit_code: int, signal: int
) -> None:
    """``scancel`` of a batch job while its srun step runs: srun sees its tasks killed and
    reports first (before the sweep): the step's row is CANCELLED, as Slurm's sacct says."""
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n"), ["node1"])
    step = book.create(ctl.jobs[job_id], ALICE, StepRequest())
    assert not isinstance(step, StepWait)
    ctl.queue.cancel(ctl.jobs[job_id], ALICE)
    book.finish(ctl.jobs[job_id], ALICE, step.step_id, exit_code=exit_code, signal=signal)
    rows = ctl.store.load_steps([job_id])
    assert [(s.step_id, s.state, s.exit_code, s.exit_signal) for s in rows] == [(0, "CANCELLED", exit_code, signal)]
    assert book.steps_of(job_id) == []


def test_a_step_that_ended_well_as_its_job_ended_stays_completed(db: str) -> None:
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n"), ["node1"])
    step = book.create(ctl.jobs[job_id], ALICE, StepRequest())
    assert not isinstance(step, StepWait)
    ctl.queue.cancel(ctl.jobs[job_id], ALICE)
    book.finish(ctl.jobs[job_id], ALICE, step.step_id, exit_code=0, signal=0)
    assert [s.state for s in ctl.store.load_steps([job_id])] == ["COMPLETED"]


def test_an_interactive_allocation_ends_with_its_holders_exit_code(db: str) -> None:
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(interactive=True, argv=["bash"]), ["node1"])
    job = ctl.jobs[job_id]
    step = book.create(job, ALICE, StepRequest())
    assert not isinstance(step, StepWait)
    actions = book.finish(job, ALICE, step.step_id, exit_code=7, signal=0, end_job=True)
    assert job.state is JobState.FAILED and job.exit_code == 7
    assert actions == [Terminate(job_id, 0, ["node1"], "cleanup")]
    assert ctl.nodes["node1"].allocs == {}
    with pytest.raises(InvalidRequest, match="batch job"):
        other = running_job(ctl, JobSpec(script="#!/bin/sh\n"), ["node2"])
        book.complete_allocation(ctl.jobs[other], ALICE, 0, 0)


def test_a_step_whose_tasks_were_oom_killed_ends_out_of_memory(db: str) -> None:
    """srun reports OOM kills in its tasks' cgroups: the step's row is OUT_OF_MEMORY 0:125
    whatever the tasks' own exit (Slurm's); srun's own allocation ends OUT_OF_MEMORY too."""
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n"), ["node1"])
    step = book.create(ctl.jobs[job_id], ALICE, StepRequest())
    assert not isinstance(step, StepWait)
    book.finish(ctl.jobs[job_id], ALICE, step.step_id, exit_code=0, signal=9, oom_kills=1)
    rows = ctl.store.load_steps([job_id])
    assert [(s.state, s.exit_code, s.exit_signal) for s in rows] == [("OUT_OF_MEMORY", 0, 125)]
    assert ctl.jobs[job_id].state is JobState.RUNNING  # a batch job ends with its script
    alloc = running_job(ctl, JobSpec(interactive=True, argv=["bash"]), ["node2"])
    job = ctl.jobs[alloc]
    step = book.create(job, ALICE, StepRequest())
    assert not isinstance(step, StepWait)
    book.finish(job, ALICE, step.step_id, exit_code=137, signal=0, end_job=True, oom_kills=2)
    assert job.state is JobState.OUT_OF_MEMORY and (job.exit_code, job.exit_signal) == (0, 125)
    assert [s.state for s in ctl.store.load_steps([alloc])] == ["OUT_OF_MEMORY"]


def test_interactive_allocations_time_out_here(db: str) -> None:
    clock = ManualClock(1000.0)
    ctl, book = make(db, clock)
    job_id = running_job(ctl, JobSpec(interactive=True, time_limit=60), ["node1"])
    book.watch(ctl.jobs[job_id])
    clock.advance(59)
    assert book.sweep() == []
    clock.advance(2)
    assert book.sweep() == [Terminate(job_id, 0, ["node1"], "timeout")]
    assert ctl.jobs[job_id].state is JobState.TIMEOUT and ctl.jobs[job_id].completing


def test_a_suspended_allocation_is_not_timed_and_its_new_steps_wait(db: str) -> None:
    clock = ManualClock(1000.0)
    ctl, book = make(db, clock)
    job_id = running_job(ctl, JobSpec(interactive=True, time_limit=60), ["node1"])
    book.watch(ctl.jobs[job_id])
    admin = Identity(0, 0, "root", "root", "h", admin=True)
    clock.advance(10)
    assert ctl.suspensions.suspend(ctl.jobs[job_id], admin) == [SuspendJob(job_id, ["node1"], True)]
    clock.advance(120)  # far past its limit, suspended: not timed out
    assert book.sweep() == [] and ctl.jobs[job_id].state is JobState.RUNNING
    assert book.create(ctl.jobs[job_id], ALICE, StepRequest(ntasks=1)) == StepWait(SUSPENDED_JOB)  # srun waits
    ctl.suspensions.resume(ctl.jobs[job_id], admin)
    assert isinstance(book.create(ctl.jobs[job_id], ALICE, StepRequest(ntasks=1)), Step)
    clock.advance(49)  # 59 s run of its 60
    assert book.sweep() == []
    clock.advance(2)
    assert book.sweep() == [Terminate(job_id, 0, ["node1"], "timeout")]


def test_running_steps_survive_a_controller_restart(db: str) -> None:
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n"), ["node1"])
    book.create(ctl.jobs[job_id], ALICE, StepRequest(ntasks=2))
    _ctl2, book2 = make(db)
    assert [s.step_id for s in book2.steps_of(job_id)] == [0]
    assert book2.next_ids[(job_id, 0)] == 1


def test_listing_shows_the_batch_step_first(db: str) -> None:
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n", gpus_per_node=2), ["node1"])
    book.create(ctl.jobs[job_id], ALICE, StepRequest(ntasks=1, gpus_per_node=1), argv=["sleep"])
    rows = book.listing([ctl.jobs[job_id]])
    assert [r["id"] for r in rows] == [f"{job_id}.batch", f"{job_id}.0"]
    assert rows[1]["tres"] == "cpu=1,gres/gpu=1,mem=1000M,node=1"
    assert step_wire(book.steps_of(job_id)[0], 1000.0)["tres_per_node"] == "gres:gpu:1"
    assert parse_step_id("12.batch") == (12, -5) and parse_step_id("12") == (12, None)


def test_a_steps_gpu_binding_travels_in_its_grant_and_survives_a_restart(db: str) -> None:
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n"), ["node1"], cpus=4, gpus=2)
    job = ctl.jobs[job_id]
    default = book.create(job, ALICE, StepRequest(ntasks=2))  # Slurm's default: both see both
    assert not isinstance(default, StepWait) and default.layout.task_gpus == [[[0, 1], [0, 1]]]
    book.finish(job, ALICE, default.step_id, exit_code=0, signal=0)
    step = book.create(job, ALICE, StepRequest(ntasks=2, gpus_per_node=2, gpu_bind="verbose,map_gpu:1,0"))
    assert not isinstance(step, StepWait)
    answer = book.answer(job, step)
    grant = verify_grant(KEY, answer["grant"], answer["sig"], ctl.clock.now())
    assert grant["step"]["task_gpus"] == [[[1], [0]]]
    assert grant["step"]["gpu_bind"] == "verbose,map_gpu:1,0"  # the tasks' SLURMD_TRES_BIND
    _ctl2, book2 = make(db)
    [again] = book2.steps_of(job_id)
    assert again.request.gpu_bind == "verbose,map_gpu:1,0" and again.layout.task_gpus == [[[1], [0]]]
