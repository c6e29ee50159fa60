"""The scheduler's knobs, read from slurm.conf keys.

``SchedConfig`` is a frozen value: the controller builds one when the configuration is
(re)loaded and passes it to every pass. ``from_settings`` takes a dict of canonical
slurm.conf key -> raw value and never raises: a value it cannot read keeps the default,
as an unknown key does (the controller's config module reports bad syntax; the scheduler
must keep scheduling).

Defaults follow Slurm 22.05 where Slurm has one: an absent ``PriorityType`` is
``priority/basic`` (FIFO by submission), as in 22.05; the configs muster writes itself
(``muster up``, the demo, deploy/) state ``priority/multifactor``, whose weights default
to age, fair-share and partition. One documented exception suits a GPU cluster better
and an admin can set it back:

* ``bf_resolution`` defaults to 1 s (Slurm: 60 s), so a planned start equals the end of the
  job it waits for, to the second. Our profile is exact and cheap at that resolution.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from muster.core import confkeys
from muster.core.timefmt import parse_time_limit

__all__ = ["SchedConfig", "preempt_mode"]

_DAY = 86400


@dataclass(frozen=True, slots=True)
class SchedConfig:
    """What one scheduling pass needs to know about the site's policy."""

    # SchedulerType: "sched/backfill" (plan and backfill) or "sched/builtin" (strict order).
    scheduler_type: str = "sched/backfill"
    # SchedulerParameters
    bf_continue: bool = False  # accepted for compatibility: a muster pass is never interrupted
    bf_window: int = _DAY  # seconds (slurm.conf gives minutes): how far ahead plans reach
    bf_resolution: int = 1  # seconds: planned times are rounded up to this grid
    bf_max_job_test: int = 500  # how many pending jobs a pass examines (queue depth)
    conservative: bool = False  # reserve every pending job, not only the first bf_max_job_test
    max_switch_wait: int = 300  # seconds a --switches job waits for its switch count by default
    # PriorityType and the multifactor weights
    priority_type: str = "priority/basic"
    weight_age: int = 1000
    weight_fairshare: int = 10000
    weight_job_size: int = 0
    weight_partition: int = 1000
    weight_qos: int = 0
    max_age: int = 7 * _DAY  # PriorityMaxAge, seconds
    favor_small: bool = False  # PriorityFavorSmall
    enforce_part_limits: str = "NO"  # EnforcePartLimits: NO, ANY, ALL (YES means ALL)
    # Preemption (sched.preempt, docs/preemption.md): PreemptType preempt/none, preempt/qos
    # or preempt/partition_prio; the cluster's PreemptMode (OFF, REQUEUE, CANCEL, SUSPEND); and
    # PreemptExemptTime, seconds a job runs before it may be preempted.
    preempt_type: str = "preempt/none"
    preempt_mode: str = "OFF"
    preempt_exempt_time: int = 0
    # How victims are ordered among those the policy allows (``sched.preempt``):
    # "lost_work" (default: the least GPU-time lost since a checkpoint, then the smallest)
    # or "priority" (Slurm's: the lowest priority first); PreemptParameters=victim_order=...
    preempt_victim_order: str = "lost_work"

    @property
    def backfill(self) -> bool:
        return self.scheduler_type != "sched/builtin"

    @property
    def multifactor(self) -> bool:
        return self.priority_type == "priority/multifactor"

    @classmethod
    def from_settings(cls, settings: dict[str, str]) -> SchedConfig:
        """Read the scheduling keys of slurm.conf; anything unknown or unreadable keeps its
        default. Keys are matched without regard to case, as slurm.conf does."""
        lower = {k.lower(): str(v).strip() for k, v in settings.items()}
        default = cls()
        changes: dict[str, object] = {}

        stype = lower.get("schedulertype", "").lower()
        if stype in ("sched/backfill", "sched/builtin"):
            changes["scheduler_type"] = stype
        ptype = lower.get("prioritytype", "").lower()
        if ptype in ("priority/multifactor", "priority/basic"):
            changes["priority_type"] = ptype

        for key, name in (
            ("priorityweightage", "weight_age"),
            ("priorityweightfairshare", "weight_fairshare"),
            ("priorityweightjobsize", "weight_job_size"),
            ("priorityweightpartition", "weight_partition"),
            ("priorityweightqos", "weight_qos"),
        ):
            value = _int(lower.get(key))
            if value is not None and value >= 0:
                changes[name] = value
        max_age = _duration(lower.get("prioritymaxage"))
        if max_age is not None:
            changes["max_age"] = max_age
        favor = lower.get("priorityfavorsmall")
        if favor is not None and favor.upper() in ("YES", "NO"):
            changes["favor_small"] = favor.upper() == "YES"
        changes["enforce_part_limits"] = part_limits_mode(lower.get("enforcepartlimits"))

        pretype = lower.get("preempttype", "").lower()
        if pretype in ("preempt/none", "preempt/qos", "preempt/partition_prio"):
            changes["preempt_type"] = pretype
        mode = preempt_mode(lower.get("preemptmode"))
        if mode is not None:
            changes["preempt_mode"] = mode
        exempt = _duration(lower.get("preemptexempttime"))
        if exempt is not None:
            changes["preempt_exempt_time"] = exempt
        for item in _split_params(lower.get("preemptparameters", "")):
            name, _, raw = item.partition("=")
            if name.strip() == "victim_order" and raw.strip().lower() in ("lost_work", "priority"):
                changes["preempt_victim_order"] = raw.strip().lower()

        for item in _split_params(lower.get("schedulerparameters", "")):
            name, _, raw = item.partition("=")
            name = name.strip().lower()
            if name == "bf_continue":
                changes["bf_continue"] = True
            elif name in ("conservative", "bf_conservative"):
                changes["conservative"] = True
            elif name == "bf_window":
                minutes = _int(raw)
                if minutes is not None and minutes > 0:
                    changes["bf_window"] = minutes * 60
            elif name == "bf_resolution":
                seconds = _int(raw)
                if seconds is not None and seconds > 0:
                    changes["bf_resolution"] = seconds
            elif name == "max_switch_wait":
                seconds = _int(raw)
                if seconds is not None and seconds >= 0:
                    changes["max_switch_wait"] = seconds
            elif name == "bf_max_job_test":
                depth = _int(raw)
                if depth is not None and depth > 0:
                    changes["bf_max_job_test"] = depth
        return dataclasses.replace(default, **changes)  # type: ignore[arg-type]


def part_limits_mode(text: str | None) -> str:
    """slurm.conf's ``EnforcePartLimits`` as ``NO``, ``ANY`` or ``ALL``: its only reader.

    ``YES`` means ``ALL`` (Slurm's older spelling); absent or unreadable text means ``NO``,
    Slurm's default. Case does not matter.
    """
    value = (text or "").strip().upper()
    if value == "YES":
        return "ALL"
    return value if value in ("ANY", "ALL") else "NO"


def preempt_mode(text: str | None) -> str | None:
    """A PreemptMode value as muster applies it (``OFF``, ``CANCEL``, ``REQUEUE``, ``SUSPEND``); None when
    absent or refused (the configuration's reader refuses such values with a message)."""
    if not text:
        return None
    try:
        return confkeys.preempt_mode(text)
    except ValueError:
        return None


def _split_params(text: str) -> list[str]:
    return [p for p in (s.strip() for s in text.split(",")) if p and p != "(null)"]


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _duration(text: str | None) -> int | None:
    """Slurm's time format (``7-0``, ``1:00:00``, ``90`` minutes) in seconds; None when
    absent, unlimited or unreadable."""
    if text is None:
        return None
    try:
        return parse_time_limit(text)
    except ValueError:
        return None
