"""Applying a pass's ``Decisions``: the one function the controller's loop, the simulator and
the parity test between them all call, so that what a decision means is written once.

``apply_decisions`` writes what the pass found onto the waiting jobs (their priority; and,
asking ``core.lifecycle``, the one writer of a job's changes, the pending reason unless the
job is held, the planned start and nodes, a plan that no longer holds cleared), then hands
the starts to its ``Book``, the side that owns the jobs: the controller commits them and
launches the jobs (``ctld.loop``), the simulator books their ends on its virtual clock
(``sim.engine``). Preemptions go to ``Book.preempt`` first (the victims get their grace
time, the preemptors hold their nodes); a new kind of decision is one more step here and
one more method of ``Book``, in one place.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from muster.core import lifecycle
from muster.core.job import Job
from muster.sched.decisions import Decisions, Preemption, Start

__all__ = ["Book", "apply_decisions"]


class Book(Protocol):
    """Who owns the jobs a pass decided about."""

    @property
    def waiting(self) -> Mapping[int, Job]:
        """The pending jobs the pass saw, by id (jobs that left meanwhile may be missing)."""

    # Ids of the jobs that carry a planned start from an earlier pass.
    planned: set[int]

    def start(self, starts: list[Start], now: float) -> None:
        """Take the starts: each job still pending runs on its allocation from ``now``."""

    def preempt(self, preemptions: list[Preemption], holds: dict[int, list[str]], now: float) -> None:
        """Signal the victims (each ends, requeued or cancelled, after its grace time) and
        let each preemptor hold its nodes until it starts."""


def apply_decisions(decisions: Decisions, book: Book, now: float) -> None:
    waiting = book.waiting
    for job_id, prio in decisions.priorities.items():
        job = waiting.get(job_id)
        if job is not None:
            job.priority = prio
    for job_id, reason in decisions.reasons.items():
        job = waiting.get(job_id)
        # Asked only when it changes: most waiting jobs keep their reason pass after pass,
        # and a pass at 100,000 pending would otherwise spend most of its time here.
        if job is not None and not job.hold and job.reason is not reason:
            lifecycle.wait(job, reason, now)
    # Only the jobs that had a plan are revisited: time proportional to what the pass saw.
    for job_id in book.planned - decisions.plans.keys():
        job = waiting.get(job_id)
        if job is not None:
            lifecycle.plan(job, None, (), now)
    for job_id, plan in decisions.plans.items():
        job = waiting.get(job_id)
        if job is not None:
            lifecycle.plan(job, plan.start_time, plan.nodes, now)
    book.planned.clear()
    book.planned.update(decisions.plans)
    if decisions.preemptions:
        book.preempt(decisions.preemptions, decisions.holds, now)
    if decisions.starts:
        book.start(decisions.starts, now)
