"""A step stopped with its job (``scancel`` of the job, or the step's own ``scancel N.S``)
shows ExitCode ``0:15`` in sacct, as Slurm 22.05's accounting records it (reference
nodefail_sacct_D and fmt_sacct_default: ``8653.0 ... CANCELLED 0:15``), not ``0:0``."""

from __future__ import annotations

import pathlib

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.core.steps import StepRequest, StepWait
from muster.ctld.controller import Controller, Identity
from muster.ctld.steps import StepBook
from muster.ctld.store import Store

CONF = "ClusterName=t\nNodeName=node1 CPUs=8 RealMemory=8000\nPartitionName=gpu Nodes=ALL Default=YES\n"
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


def _running(tmp_path: pathlib.Path) -> tuple[Controller, StepBook, int]:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    ctl.agents.register({"node": "node1", "gpus": 0, "running": []})
    book = StepBook(ctl, b"k" * 32)
    book.load()
    job = ctl.queue.submit(JobSpec(script="#!/bin/sh\n"), ALICE)

    class Start:
        job_id, partition, backfilled = job.job_id, "gpu", False
        alloc = [NodeAlloc("node1", 1, 1000, [])]

    ctl.launches.apply_starts([Start()], 1000.0)
    ctl.launches.launch_done(job.job_id)
    return ctl, book, job.job_id


def test_a_step_ended_by_the_sweep_after_its_job_was_cancelled_is_0_15(tmp_path: pathlib.Path) -> None:
    ctl, book, job_id = _running(tmp_path)
    assert not isinstance(book.create(ctl.jobs[job_id], ALICE, StepRequest()), StepWait)
    ctl.queue.cancel(ctl.jobs[job_id], ALICE)
    book.sweep()
    assert [(s.state, s.exit_code, s.exit_signal) for s in ctl.store.load_steps([job_id])] == [("CANCELLED", 0, 15)]


def test_a_step_scancelled_whose_srun_reports_nothing_is_0_15(tmp_path: pathlib.Path) -> None:
    ctl, book, job_id = _running(tmp_path)
    step = book.create(ctl.jobs[job_id], ALICE, StepRequest())
    assert not isinstance(step, StepWait)
    book.signal_step(ctl.jobs[job_id], ALICE, step.step_id, None)
    book.finish(ctl.jobs[job_id], ALICE, step.step_id, exit_code=0, signal=0)
    assert [(s.state, s.exit_code, s.exit_signal) for s in ctl.store.load_steps([job_id])] == [("CANCELLED", 0, 15)]
