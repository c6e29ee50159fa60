"""An agent's report of a run its cgroup saw OOM-killed (``terminated_by: "oom"``) ends the
job OUT_OF_MEMORY with Reason=OutOfMemory and Slurm's ExitCode 0:125."""

from __future__ import annotations

import pathlib

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState, Reason
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import Store

CONF = """
ClusterName=t
NodeName=node1 CPUs=4 RealMemory=8000
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


class _Start:
    def __init__(self, job_id: int) -> None:
        self.job_id, self.partition, self.backfilled = job_id, "p", False
        self.alloc = [NodeAlloc("node1", 1, 64, [])]


def test_an_oom_report_ends_the_job_out_of_memory(tmp_path: pathlib.Path) -> None:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "db")), ManualClock(1000.0))
    ctl.load()
    ctl.agents.register({"node": "node1", "gpus": 0, "running": []})
    job_id = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/w", mem_per_node=64), ALICE).job_id
    ctl.launches.apply_starts([_Start(job_id)], ctl.clock.now())
    ctl.launches.launch_done(job_id)
    ctl.launches.job_done(
        {"job_id": job_id, "node": "node1", "restart_count": 0, "exit_code": 0, "terminated_by": "oom"}
    )
    job = ctl.jobs[job_id]
    assert (job.state, job.reason) == (JobState.OUT_OF_MEMORY, Reason.OUT_OF_MEMORY)
    assert (job.exit_code, job.exit_signal, job.completing) == (0, 125, False)
    again = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "db")), ManualClock(1001.0))
    again.load()  # what the store replays is the same end
    assert (again.jobs[job_id].state, again.jobs[job_id].exit_signal) == (JobState.OUT_OF_MEMORY, 125)
