"""``scontrol suspend``/``resume`` and ``scancel --signal=STOP`` in the controller, on a
manual clock with a real SQLite store: who may, which jobs, what is committed and what the
nodes are asked."""

from __future__ import annotations

import pathlib
import signal

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidRequest, PermissionDenied
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.ctld.actions import SignalJob, SuspendJob, Terminate
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import Store

CONF = """
ClusterName=t
NodeName=node[1-2] CPUs=8 RealMemory=8000
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


def make(db: str, clock: ManualClock | None = None, protocol: int = 3) -> Controller:
    ctl = Controller(parse_config(CONF, "test.conf"), Store(db), clock or ManualClock(1000.0))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "running": []}, protocol=protocol)
    return ctl


def running(ctl: Controller) -> int:
    job = ctl.queue.submit(JobSpec(script="#!/bin/sh\nsleep 100\n", workdir="/tmp", min_nodes=2), ALICE)

    class S:  # the scheduler's Start, reduced to what apply_starts reads
        job_id, partition, backfilled = job.job_id, "p", False
        alloc = [NodeAlloc("node1", 1, 0), NodeAlloc("node2", 1, 0)]

    ctl.launches.apply_starts([S()], ctl.clock.now())
    ctl.launches.launch_done(job.job_id)
    return job.job_id


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "muster.db")


def test_suspend_is_committed_then_every_node_freezes_and_resume_counts_the_time(db: str) -> None:
    clock = ManualClock(1000.0)
    ctl = make(db, clock)
    job_id = running(ctl)
    assert ctl.suspensions.suspend(ctl.jobs[job_id], ROOT) == [SuspendJob(job_id, ["node1", "node2"], True)]
    reborn = make(db, clock)  # the store has it: a restarted controller shows it suspended
    job = reborn.jobs[job_id]
    assert job.state is JobState.RUNNING and job.display_state is JobState.SUSPENDED
    assert reborn.nodes["node1"].cpus_alloc == 1  # its resources stay allocated
    clock.advance(30)
    assert reborn.suspensions.resume(job, ROOT) == [SuspendJob(job_id, ["node1", "node2"], False)]
    assert make(db, clock).jobs[job_id].suspended_secs == 30.0


def test_refusals_say_why_and_change_nothing(db: str) -> None:
    ctl = make(db)
    job_id = running(ctl)
    job = ctl.jobs[job_id]
    with pytest.raises(PermissionDenied):
        ctl.suspensions.suspend(job, ALICE)  # her own job, but she is no operator
    with pytest.raises(InvalidRequest, match="^Job is not suspended$"):
        ctl.suspensions.resume(job, ROOT)
    pending = ctl.queue.submit(JobSpec(hold=True), ALICE)
    with pytest.raises(InvalidRequest, match="^Job is pending execution$"):
        ctl.suspensions.suspend(pending, ROOT)
    ctl.suspensions.suspend(job, ROOT)
    with pytest.raises(InvalidRequest, match="^Job is not running$"):
        ctl.suspensions.suspend(job, ROOT)
    assert make(db).jobs[job_id].suspended_at is not None and make(db).jobs[pending.job_id].state is JobState.PENDING


def test_an_agent_too_old_to_suspend_refuses_the_suspension(db: str) -> None:
    ctl = make(db, protocol=2)
    job = ctl.jobs[running(ctl)]
    with pytest.raises(InvalidRequest, match="not supported on this system .the agent of node1 is too old"):
        ctl.suspensions.suspend(job, ROOT)
    assert job.suspended_at is None


def test_a_suspended_job_requeued_is_held(db: str) -> None:
    ctl = make(db)
    job = ctl.jobs[running(ctl)]
    ctl.suspensions.suspend(job, ROOT)
    actions = ctl.queue.requeue_job(job, ROOT)
    assert [type(a) for a in actions] == [Terminate]  # the agents thaw it before they end it
    assert job.state is JobState.PENDING and job.hold == "admin" and job.suspended_at is None


def test_sigstop_shows_the_job_stopped_until_sigcont(db: str) -> None:
    ctl = make(db)
    job = ctl.jobs[running(ctl)]
    actions = ctl.queue.signal(job, ALICE, int(signal.SIGSTOP), batch_only=False)
    assert [type(a) for a in actions] == [SignalJob] and job.display_state is JobState.STOPPED
    assert make(db).jobs[job.job_id].stopped
    ctl.queue.signal(job, ALICE, int(signal.SIGCONT), batch_only=False)
    assert job.display_state is JobState.RUNNING and not make(db).jobs[job.job_id].stopped
    ctl.queue.signal(job, ALICE, int(signal.SIGSTOP), batch_only=True)  # the batch shell alone: not STOPPED
    assert job.display_state is JobState.RUNNING
