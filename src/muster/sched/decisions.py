"""The scheduler's output. The controller persists these, then acts on them."""

from __future__ import annotations

from dataclasses import dataclass, field

from muster.core.job import NodeAlloc
from muster.core.states import Reason


@dataclass(slots=True)
class Start:
    job_id: int
    partition: str
    alloc: list[NodeAlloc]
    backfilled: bool = False


@dataclass(slots=True)
class Plan:
    """A pending job's planned start (``squeue --start``, StartTime), from backfill's
    profile: the job holds these nodes from ``start_time`` in the plan, so no lower
    priority job may delay it."""

    start_time: float
    nodes: list[str]


@dataclass(slots=True)
class Preemption:
    """A running job to preempt so that ``preemptor`` can start (``sched.preempt``).

    ``mode`` is REQUEUE or CANCEL; ``grace_time``: seconds between the signal and the
    kill. ``lost``: seconds of work the victim loses (since its last reported checkpoint,
    else since it started); ``checkpoint_age``: seconds since that checkpoint, None when
    it reported none. ``reason`` is what the log and sacct say."""

    job_id: int
    preemptor: int
    mode: str
    grace_time: int
    lost: float
    checkpoint_age: float | None
    reason: str


@dataclass(slots=True)
class PassStats:
    """What one pass did, and the time spent in each numbered phase (seconds, measured by
    the caller's clock if it passes a ``timer``: the scheduler itself only counts).

    ``pending_seen``: pending jobs in the snapshot; ``ineligible``: set aside before
    placement (held, begin time, dependency); ``examined``: jobs tried for placement;
    ``started`` (of which ``backfilled``: started while a higher-priority job of the same
    partition waits); ``blocked``: examined but not started; ``planned``: given a planned
    start in the profile.
    """

    pending_seen: int = 0
    examined: int = 0
    started: int = 0
    backfilled: int = 0
    planned: int = 0
    ineligible: int = 0
    blocked: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class Decisions:
    starts: list[Start] = field(default_factory=list)
    plans: dict[int, Plan] = field(default_factory=dict)
    reasons: dict[int, Reason] = field(default_factory=dict)
    priorities: dict[int, int] = field(default_factory=dict)
    stats: PassStats = field(default_factory=PassStats)
    # Jobs that can never run as the cluster is configured (a subset of ``reasons``), with
    # Slurm's message: the controller may cancel them (e.g. --kill-on-invalid-dep).
    never: dict[int, str] = field(default_factory=dict)
    # Running jobs to preempt, and for each preemptor the nodes it holds from now on (no
    # other job starts there until it does); it starts in a later pass, once they are free.
    preemptions: list[Preemption] = field(default_factory=list)
    holds: dict[int, list[str]] = field(default_factory=dict)
