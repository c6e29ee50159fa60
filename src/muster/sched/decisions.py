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
