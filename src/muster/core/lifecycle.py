"""The job state machine and the one writer of a job's changes: an explicit transition
table, and ``apply``, the function through which every change of a job's state, reason,
plan, holds and suspension goes.

A module that wants a job to change asks: it builds a ``Change`` (a ``JobEvent`` and what
that event carries) and calls ``apply(job, change, now)``. ``apply`` checks the event
against the job's current state (``TRANSITIONS`` for an edge between states, ``AMENDS``
for a change within a state); an event that is not allowed raises ``IllegalTransition``
naming the job, its state and the event, and leaves the job untouched. Otherwise it
updates the job and returns an ``Outcome`` (the event, the state before and after) for
the caller to commit and act on. No other module assigns a job's ``state``, ``reason``,
``planned_*``, ``held_nodes`` or ``hold_until`` (``tests/test_architecture.py`` checks
it). The named helpers (``start``, ``finish``, ``end``, ``requeue``...) are thin callers
of ``apply``. The controller and the simulator call the same functions, so replaying
the same events gives the same jobs.

Pure: no I/O, no clock (``now`` is a parameter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from muster.core import goodput
from muster.core.errors import IllegalTransition
from muster.core.job import Job, NodeAlloc
from muster.core.states import JobState, Reason


class JobEvent(StrEnum):
    """Every kind of change of a job: the edges between states first, then the changes
    within a state."""

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
    # Within a state (``AMENDS``):
    WAIT = "wait"  # why a pending job waits (the scheduler's reason, a limit's)
    PLAN = "plan"  # the scheduler's planned start and nodes for a pending job
    UNPLAN = "unplan"  # a plan that no longer holds is cleared
    HOLD_NODES = "hold_nodes"  # nodes held for a pending job until a time (preemptor, expedited requeue)
    HOLD = "hold"  # scontrol hold/uhold, sbatch -H
    RELEASE = "release"  # scontrol release
    SUSPEND = "suspend"  # scontrol suspend: a running job stops counting time
    RESUME = "resume"
    CLEANED = "cleaned"  # the agent confirmed the job's processes are gone


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

# The changes that keep the job's state, and the states each is allowed in. A plan is
# cleared whatever the job became meanwhile (a cancelled job's stale plan goes too); the
# agent may confirm a cleanup in any state.
AMENDS: dict[JobEvent, frozenset[JobState]] = {
    JobEvent.WAIT: frozenset({_P}),
    JobEvent.PLAN: frozenset({_P}),
    JobEvent.UNPLAN: frozenset(JobState),
    JobEvent.HOLD_NODES: frozenset({_P}),
    JobEvent.HOLD: frozenset({_P}),
    JobEvent.RELEASE: frozenset({_P}),
    JobEvent.SUSPEND: frozenset({_R}),
    JobEvent.RESUME: frozenset({_R}),
    JobEvent.CLEANED: frozenset(JobState),
}


@dataclass(frozen=True, slots=True)
class Change:
    """One change a module asks of a job: the event and what it carries. Each event reads
    only its own fields (the comments say which); the others keep their defaults."""

    event: JobEvent
    # WAIT: the reason; an end, a requeue or a hold: a reason other than the usual one
    reason: Reason | None = None
    alloc: tuple[NodeAlloc, ...] = ()  # START
    scheduler: str = "Main"  # START: Main or Backfill
    exit_code: int | None = None  # COMPLETE, FAIL, CLEANED
    signal: int | None = None  # COMPLETE, FAIL, CLEANED
    completing: bool = False  # an end: processes may still be alive (resources kept)
    start: float | None = None  # PLAN: the planned start
    nodes: tuple[str, ...] = ()  # PLAN, HOLD_NODES
    until: float | None = None  # HOLD_NODES: held until then
    expedite: bool = False  # HOLD_NODES: first in the queue (--requeue=expedite)
    hold: str | None = None  # HOLD, REQUEUE: "user" or "admin" (a held requeue)
    outcome: str | None = None  # REQUEUE of a running job: its attempt's outcome (goodput)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What ``apply`` did: the event and the job's state before and after it."""

    job_id: int
    event: JobEvent
    before: JobState
    after: JobState

    @property
    def ended(self) -> bool:
        """The job left RUNNING for an end (its resources are to be freed once clean)."""
        return self.before is _R and self.after.is_terminal


def next_state(job: Job, event: JobEvent) -> JobState:
    """The state ``event`` takes ``job`` to; ``IllegalTransition`` when it is not allowed."""
    if (allowed := AMENDS.get(event)) is not None:
        if job.state in allowed:
            return job.state
    else:
        try:
            return TRANSITIONS[(job.state, event)]
        except KeyError:
            pass
    raise IllegalTransition(f"job {job.job_id}: event '{event}' is not allowed in state {job.state}")


def can(job: Job, event: JobEvent) -> bool:
    if (allowed := AMENDS.get(event)) is not None:
        return job.state in allowed
    return (job.state, event) in TRANSITIONS


def apply(job: Job, change: Change, now: float) -> Outcome:
    """The one writer: check ``change`` against the job's state, update the job, and say
    what happened. An illegal change raises ``IllegalTransition`` with the job untouched."""
    before = job.state
    after = next_state(job, change.event)
    if change.event is JobEvent.SUSPEND and job.suspended_at is not None:
        raise IllegalTransition(f"job {job.job_id}: cannot suspend in state {job.display_state}")
    if change.event is JobEvent.RESUME and job.suspended_at is None:
        raise IllegalTransition(f"job {job.job_id}: cannot resume in state {job.display_state}")
    if change.event in (JobEvent.HOLD, JobEvent.REQUEUE) and change.hold not in (None, *_HOLD_REASONS):
        raise IllegalTransition(f"job {job.job_id}: no hold of kind '{change.hold}'")
    _WRITERS.get(change.event, _end)(job, change, after, now)
    return Outcome(job.job_id, change.event, before, after)


# --- what each event writes (called by ``apply`` only, after its check) ----------------


def _start(job: Job, c: Change, after: JobState, now: float) -> None:
    job.state = after
    job.alloc = list(c.alloc)
    job.start_time = now
    job.end_time = None
    job.reason = Reason.NONE
    job.planned_start = None
    job.planned_nodes = []
    job.held_nodes = []  # what was held for it (preemption, expedited requeue) is its now
    job.hold_until = None
    job.expedited = False
    job.scheduler = c.scheduler
    job.exit_code = 0
    job.exit_signal = 0
    job.usage = None
    job.progress = None  # a new attempt reports afresh
    job.suspended_at, job.suspended_secs, job.suspend_time = None, 0.0, None
    job.stopped = False


def _suspend(job: Job, c: Change, after: JobState, now: float) -> None:
    job.suspended_at = job.suspend_time = now
    if c.reason is not None:  # Preempted: suspended for a preemptor (PreemptMode=SUSPEND)
        job.reason = c.reason


def _resume(job: Job, c: Change, after: JobState, now: float) -> None:
    assert job.suspended_at is not None
    job.suspended_secs += max(0.0, now - job.suspended_at)
    job.suspended_at = None
    job.suspend_time = now
    if job.reason is Reason.PREEMPTED:
        job.reason = Reason.NONE


def _end_suspension(job: Job, now: float) -> None:
    """A suspended job that ends (cancel, node failure, requeue) ends its suspension."""
    if job.suspended_at is not None:
        _resume(job, Change(JobEvent.RESUME), job.state, now)


_HOLD_REASONS = {"admin": Reason.HELD_ADMIN, "user": Reason.HELD_USER}
_END_REASONS = {
    JobEvent.TIMEOUT: Reason.TIME_LIMIT,
    JobEvent.NODE_FAIL: Reason.NODE_DOWN,
    JobEvent.OUT_OF_MEMORY: Reason.OUT_OF_MEMORY,
}


def _end(job: Job, c: Change, after: JobState, now: float) -> None:
    """A final state: the batch script ended by itself (COMPLETE, FAIL with its exit
    status), or one decided before its processes are gone (cancel, timeout, node
    failure, preemption, deadline; ``completing`` keeps its resources until cleaned)."""
    was_running = job.state is JobState.RUNNING
    _end_suspension(job, now)
    job.state = after
    if was_running:
        goodput.close_attempt(job, now, str(job.state))
    job.end_time = now
    job.completing = c.completing and was_running
    if c.exit_code is not None:
        job.exit_code = c.exit_code
    if c.signal is not None:
        job.exit_signal = c.signal
    if c.reason is not None:
        job.reason = c.reason
    elif c.event is JobEvent.FAIL and c.exit_code is not None:
        job.reason = Reason.RAISED_SIGNAL if c.signal else Reason.NON_ZERO_EXIT
    else:
        job.reason = _END_REASONS.get(c.event, Reason.NONE) if was_running else Reason.NONE


def _cleaned(job: Job, c: Change, after: JobState, now: float) -> None:
    job.completing = False
    if c.exit_code is not None:
        job.exit_code = c.exit_code
    if c.signal is not None:
        job.exit_signal = c.signal


def _requeue(job: Job, c: Change, after: JobState, now: float) -> None:
    if job.state is JobState.RUNNING:
        goodput.close_attempt(job, now, c.outcome or "REQUEUED")
    _end_suspension(job, now)
    job.state = after
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
    job.hold = c.hold
    if c.reason is not None:
        job.reason = c.reason
    else:
        job.reason = _HOLD_REASONS.get(c.hold or "", Reason.NONE)


def _wait(job: Job, c: Change, after: JobState, now: float) -> None:
    job.reason = c.reason if c.reason is not None else Reason.NONE


def _plan(job: Job, c: Change, after: JobState, now: float) -> None:
    job.planned_start = c.start
    job.planned_nodes = list(c.nodes)


def _unplan(job: Job, c: Change, after: JobState, now: float) -> None:
    job.planned_start = None
    job.planned_nodes = []


def _hold_nodes(job: Job, c: Change, after: JobState, now: float) -> None:
    job.held_nodes = list(c.nodes)
    job.hold_until = c.until
    if c.expedite:
        job.expedited = True


def _hold(job: Job, c: Change, after: JobState, now: float) -> None:
    job.hold = c.hold or "user"
    job.reason = c.reason if c.reason is not None else _HOLD_REASONS[job.hold]


def _release(job: Job, c: Change, after: JobState, now: float) -> None:
    job.hold = None
    job.reason = Reason.NONE


_WRITERS: dict[JobEvent, Callable[[Job, Change, JobState, float], None]] = {
    JobEvent.START: _start,
    JobEvent.REQUEUE: _requeue,
    JobEvent.WAIT: _wait,
    JobEvent.PLAN: _plan,
    JobEvent.UNPLAN: _unplan,
    JobEvent.HOLD_NODES: _hold_nodes,
    JobEvent.HOLD: _hold,
    JobEvent.RELEASE: _release,
    JobEvent.SUSPEND: _suspend,
    JobEvent.RESUME: _resume,
    JobEvent.CLEANED: _cleaned,
}  # every other event is an end (``_end``)


# --- the named requests: thin callers of ``apply`` -------------------------------------


def start(job: Job, alloc: Iterable[NodeAlloc], now: float, scheduler: str = "Main") -> Outcome:
    return apply(job, Change(JobEvent.START, alloc=tuple(alloc), scheduler=scheduler), now)


def suspend(job: Job, now: float, reason: Reason | None = None) -> Outcome:
    """``scontrol suspend``: a running job stops counting time (it stays RUNNING in this
    table and keeps its resources; ``Job.display_state`` says SUSPENDED); ``reason``:
    Preempted for a preemption victim (``ctld.preemption``), cleared on resume."""
    if job.state is not _R:
        raise IllegalTransition(f"job {job.job_id}: cannot suspend in state {job.display_state}")
    return apply(job, Change(JobEvent.SUSPEND, reason=reason), now)


def resume(job: Job, now: float) -> Outcome:
    """``scontrol resume``: the suspension's length is added to what is not counted."""
    if job.suspended_at is None:
        raise IllegalTransition(f"job {job.job_id}: cannot resume in state {job.display_state}")
    return apply(job, Change(JobEvent.RESUME), now)


def finish(job: Job, exit_code: int, signal: int, now: float, *, reason: Reason | None = None) -> Outcome:
    """The batch script ended by itself (or was killed by a signal nobody asked for):
    COMPLETE or FAIL by its exit status, the reason Slurm gives unless ``reason``."""
    event = JobEvent.COMPLETE if exit_code == 0 and signal == 0 else JobEvent.FAIL
    return apply(job, Change(event, exit_code=exit_code, signal=signal, reason=reason), now)


def end(job: Job, event: JobEvent, now: float, *, completing: bool, reason: Reason | None = None) -> Outcome:
    """Decide a final state (cancel, timeout, node failure) before processes are gone.

    ``completing`` says whether processes may still be alive: the job keeps its
    resources until ``cleaned`` is called. ``reason``: other than the event's usual one.
    """
    if event in _WRITERS:  # a start, a requeue or a change within a state is no end
        raise IllegalTransition(f"job {job.job_id}: event '{event}' is not an end")
    return apply(job, Change(event, completing=completing, reason=reason), now)


def cleaned(job: Job, exit_code: int | None = None, signal: int | None = None) -> Outcome:
    """The agent confirmed that the job's processes are gone; resources are free."""
    return apply(job, Change(JobEvent.CLEANED, exit_code=exit_code, signal=signal), 0.0)


def requeue(
    job: Job, now: float, *, hold: str | None = None, outcome: str | None = None, reason: Reason | None = None
) -> Outcome:
    """Back to PENDING under the same ID, counting the restart (held when ``hold``)."""
    return apply(job, Change(JobEvent.REQUEUE, hold=hold, outcome=outcome, reason=reason), now)


def wait(job: Job, reason: Reason, now: float) -> Outcome:
    """Why a pending job waits."""
    return apply(job, Change(JobEvent.WAIT, reason=reason), now)


def plan(job: Job, start: float | None, nodes: Iterable[str], now: float) -> Outcome:
    """The scheduler's planned start and nodes for a pending job (``None``: no plan)."""
    if start is None:
        return apply(job, Change(JobEvent.UNPLAN), now)
    return apply(job, Change(JobEvent.PLAN, start=start, nodes=tuple(nodes)), now)


def hold_nodes(job: Job, nodes: Iterable[str], until: float, now: float, *, expedite: bool = False) -> Outcome:
    """Hold ``nodes`` for a pending job until ``until`` (nobody else starts on them)."""
    return apply(job, Change(JobEvent.HOLD_NODES, nodes=tuple(nodes), until=until, expedite=expedite), now)


def hold(job: Job, kind: str, now: float, *, reason: Reason | None = None) -> Outcome:
    """Hold a pending job (``kind``: "user" or "admin")."""
    return apply(job, Change(JobEvent.HOLD, hold=kind, reason=reason), now)


def release(job: Job, now: float) -> Outcome:
    return apply(job, Change(JobEvent.RELEASE), now)
