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
    """A pending job's planned start (``squeue --start``), from backfill's profile."""

    start_time: float
    nodes: list[str]


@dataclass(slots=True)
class PassStats:
    """Time spent in each numbered phase of one pass (seconds, measured by the caller's
    clock if it wants: the scheduler itself only counts)."""

    pending_seen: int = 0
    examined: int = 0
    started: int = 0
    backfilled: int = 0
    planned: int = 0


@dataclass(slots=True)
class Decisions:
    starts: list[Start] = field(default_factory=list)
    plans: dict[int, Plan] = field(default_factory=dict)
    reasons: dict[int, Reason] = field(default_factory=dict)
    priorities: dict[int, int] = field(default_factory=dict)
    stats: PassStats = field(default_factory=PassStats)
