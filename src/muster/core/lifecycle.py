"""The job state machine: an explicit transition table and pure functions that apply it.

Every change of a job's state goes through ``transition``; an edge missing from
``TRANSITIONS`` raises ``IllegalTransition`` naming the job, its state and the event.
The controller and the simulator call the same functions, so replaying the same events
gives the same jobs.
"""

from __future__ import annotations

from enum import StrEnum

from muster.core import goodput
from muster.core.errors import IllegalTransition
from muster.core.job import Job, NodeAlloc
from muster.core.states import JobState, Reason


class JobEvent(StrEnum):
    START = "start"
    COMPLETE = "complete"  # the batch script exited 0
    FAIL = "fail"  # the batch script exited non-zero or was killed by a signal
    CANCEL = "cancel"
    TIMEOUT = "timeout"
    NODE_FAIL = "node_fail"
    OUT_OF_MEMORY = "out_of_memory"
    REQUEUE = "requeue"
    PREEMPT = "preempt"  # preempted with PreemptMode=CANCEL
    DEADLINE = "deadline"  # it can no longer end by its --deadline: it never starts


_P, _R = JobState.PENDING, JobState.RUNNING
_ENDED = (
    JobState.COMPLETED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.TIMEOUT,
    JobState.NODE_FAIL,
    JobState.OUT_OF_MEMORY,
    JobState.PREEMPTED,
)

TRANSITIONS: dict[tuple[JobState, JobEvent], JobState] = {
    (_P, JobEvent.START): _R,
    (_P, JobEvent.CANCEL): JobState.CANCELLED,
    (_P, JobEvent.DEADLINE): JobState.DEADLINE,
    (_R, JobEvent.COMPLETE): JobState.COMPLETED,
    (_R, JobEvent.FAIL): JobState.FAILED,
    (_R, JobEvent.CANCEL): JobState.CANCELLED,
    (_R, JobEvent.TIMEOUT): JobState.TIMEOUT,
    (_R, JobEvent.NODE_FAIL): JobState.NODE_FAIL,
    (_R, JobEvent.OUT_OF_MEMORY): JobState.OUT_OF_MEMORY,
    (_R, JobEvent.REQUEUE): _P,
    (_R, JobEvent.PREEMPT): JobState.PREEMPTED,
    # A batch job that ended may be requeued (scontrol requeue), as in Slurm.
    **{(s, JobEvent.REQUEUE): _P for s in _ENDED if s is not JobState.CANCELLED},
}


def next_state(job: Job, event: JobEvent) -> JobState:
    try:
        return TRANSITIONS[(job.state, event)]
    except KeyError:
        raise IllegalTransition(f"job {job.job_id}: event '{event}' is not allowed in state {job.state}") from None


def can(job: Job, event: JobEvent) -> bool:
    return (job.state, event) in TRANSITIONS


def start(job: Job, alloc: list[NodeAlloc], now: float, scheduler: str = "Main") -> None:
    job.state = next_state(job, JobEvent.START)
    job.alloc = list(alloc)
    job.start_time = now
    job.end_time = None
    job.reason = Reason.NONE
    job.planned_start = None
    job.planned_nodes = []
    job.held_nodes = []  # what was held for it (preemption, expedited requeue) is its now
    job.hold_until = None
    job.expedited = False
    job.scheduler = scheduler
    job.exit_code = 0
    job.exit_signal = 0
    job.usage = None
    job.progress = None  # a new attempt reports afresh
    job.suspended_at, job.suspended_secs, job.suspend_time = None, 0.0, None
    job.stopped = False


def suspend(job: Job, now: float) -> None:
    """``scontrol suspend``: a running job stops counting time (it stays RUNNING in this
    table and keeps its resources; ``Job.display_state`` says SUSPENDED)."""
    if job.state is not _R or job.suspended_at is not None:
        raise IllegalTransition(f"job {job.job_id}: cannot suspend in state {job.display_state}")
    job.suspended_at = job.suspend_time = now


def resume(job: Job, now: float) -> None:
    """``scontrol resume``: the suspension's length is added to what is not counted."""
    if job.suspended_at is None:
        raise IllegalTransition(f"job {job.job_id}: cannot resume in state {job.display_state}")
    job.suspended_secs += max(0.0, now - job.suspended_at)
    job.suspended_at = None
    job.suspend_time = now


def _end_suspension(job: Job, now: float) -> None:
    """A suspended job that ends (cancel, node failure, requeue) ends its suspension."""
    if job.suspended_at is not None:
        resume(job, now)


def finish(job: Job, exit_code: int, signal: int, now: float) -> None:
    """The batch script ended by itself (or was killed by a signal nobody asked for)."""
    event = JobEvent.COMPLETE if exit_code == 0 and signal == 0 else JobEvent.FAIL
    _end_suspension(job, now)
    job.state = next_state(job, event)
    goodput.close_attempt(job, now, str(job.state))
    job.exit_code = exit_code
    job.exit_signal = signal
    job.end_time = now
    job.completing = False
    job.reason = (
        Reason.NONE if event is JobEvent.COMPLETE else (Reason.RAISED_SIGNAL if signal else Reason.NON_ZERO_EXIT)
    )


_END_REASONS = {
    JobEvent.TIMEOUT: Reason.TIME_LIMIT,
    JobEvent.NODE_FAIL: Reason.NODE_DOWN,
    JobEvent.OUT_OF_MEMORY: Reason.OUT_OF_MEMORY,
}


def end(job: Job, event: JobEvent, now: float, *, completing: bool) -> None:
    """Decide a final state (cancel, timeout, node failure) before processes are gone.

    ``completing`` says whether processes may still be alive: the job keeps its
    resources until ``cleaned`` is called.
    """
    was_running = job.state is JobState.RUNNING
    _end_suspension(job, now)
    job.state = next_state(job, event)
    if was_running:
        goodput.close_attempt(job, now, str(job.state))
    job.end_time = now
    job.completing = completing and was_running
    job.reason = _END_REASONS.get(event, Reason.NONE) if was_running else Reason.NONE


def cleaned(job: Job, exit_code: int | None = None, signal: int | None = None) -> None:
    """The agent confirmed that the job's processes are gone; resources are free."""
    job.completing = False
    if exit_code is not None:
        job.exit_code = exit_code
    if signal is not None:
        job.exit_signal = signal


def requeue(job: Job, now: float, *, hold: str | None = None, outcome: str | None = None) -> None:
    """Back to PENDING under the same ID, counting the restart."""
    if job.state is JobState.RUNNING:
        goodput.close_attempt(job, now, outcome or "REQUEUED")
    _end_suspension(job, now)
    job.state = next_state(job, JobEvent.REQUEUE)
    job.restart_count += 1
    job.preempted_by = None
    job.preempt_deadline = None
    job.preempt_mode = None
    job.preempt_time = None
    job.alloc = []
    job.start_time = None
    job.end_time = None
    job.completing = False
    job.exit_code = 0
    job.exit_signal = 0
    job.eligible_time = now
    job.hold = hold
    job.reason = Reason.HELD_ADMIN if hold == "admin" else (Reason.HELD_USER if hold == "user" else Reason.NONE)
