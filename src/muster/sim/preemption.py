"""The simulator's side of preemption (``sched.preempt`` decides, as for the controller):
victims are booked to end after their grace time, each preemptor holds its nodes
meanwhile (as ``ctld.preemption`` does), and the work the victims lose is counted.

Work lost by a victim: under the failure model (``sim.failures``), what its checkpoints did
not save; otherwise the work since the checkpoint it reported (``Job.progress``), else its
whole run so far, since plain traces model no checkpoints. Counted in unit-hours (node- or
GPU-hours of the trace's unit)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from muster.core import lifecycle
from muster.core.job import Job
from muster.core.states import JobState
from muster.sched.decisions import Preemption
from muster.sched.preempt import lost_work
from muster.sim.failures import JobWork

__all__ = ["SimPreemptions"]


class SimPreemptions:
    def __init__(self) -> None:
        self.victims: dict[int, str] = {}  # job id -> PreemptMode, while in its grace time
        self.count = 0
        self.lost_hours = 0.0

    def book(
        self,
        preemptions: list[Preemption],
        holds: dict[int, list[str]],
        running: Mapping[int, Job],
        pending: Mapping[int, Job],
        now: float,
        at: Callable[[float, int], None],
    ) -> None:
        """Note the victims and call ``at(time, job index)`` for each one's end; let each
        preemptor hold its nodes until its victims are gone."""
        grace: dict[int, float] = {}
        for p in preemptions:
            victim = running.get(p.job_id)
            if victim is None or p.job_id in self.victims:
                continue
            self.victims[p.job_id] = p.mode
            victim.preempted_by, victim.preempt_deadline = p.preemptor, now + p.grace_time
            grace[p.preemptor] = max(grace.get(p.preemptor, 0.0), float(p.grace_time))
            at(now + p.grace_time, p.job_id - 1)
        for job_id, nodes in holds.items():
            job = pending.get(job_id)
            if job is not None and job_id in grace:
                lifecycle.hold_nodes(job, nodes, now + grace[job_id] + 1, now)

    def end(self, job: Job, now: float, size: int, work: JobWork | None) -> str | None:
        """The victim's grace time is over: its mode (None when it is no victim any more),
        with the work it loses counted (and, under the failure model, its attempt cut)."""
        mode = self.victims.pop(job.job_id, None)
        if mode is None or job.state is not JobState.RUNNING:
            return None
        assert job.start_time is not None
        if work is not None and work.current is not None:
            lost = work.current.cut(now - job.start_time)[1]
            work.interrupt(now - job.start_time)
        else:
            lost = lost_work(job, now)[0]
        self.count += 1
        self.lost_hours += lost * size / 3600.0
        return mode
