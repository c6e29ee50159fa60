"""Scheduling policies as the controller takes them: slurm.conf settings.

The simulator never configures the scheduler behind the controller's back: a policy is a
set of slurm.conf keys, turned into a ``SchedConfig`` by the same
``SchedConfig.from_settings`` the controller calls. Presets:

* ``fcfs``: ``SchedulerType=sched/builtin`` and ``PriorityType=priority/basic``: strict
  submission order, nothing overtakes the first job that does not fit.
* ``easy``: ``sched/backfill`` with ``bf_max_job_test=1``: only the first waiting job gets a
  planned start (a reservation); any other job starts at once if it fits and delays that
  one by nothing. This is EASY backfilling (Lifka 1995; Mu'alem and Feitelson 2001). In
  muster's scheduler ``bf_max_job_test`` bounds how many blocked jobs receive a planned
  start, while every eligible job is still tried for an immediate start, so a depth of 1 is
  EASY exactly. (Slurm spells "reserve for the first N" ``bf_job_part_count_reserve``.)
* ``backfill``: ``sched/backfill`` as muster's controller runs it by default, planned starts
  for the first ``bf_max_job_test`` (500) blocked jobs: between EASY and conservative.
* ``conservative``: ``sched/backfill`` with ``conservative``: every blocked job gets a
  planned start, so a backfilled job delays no one (within ``bf_window``), and each pass
  re-places the planned jobs in the order of their previous planned starts, each held
  until its turn, so a planned start never moves later (``sched/README.md``, "Promises").

* ``sjf``: shortest job first with EASY backfilling: ``easy``'s settings, and every job's
  priority set at submission from its time limit (shorter first), the way an administrator
  would with ``scontrol update job priority=`` (``Snapshot.priority_overrides``). The
  shortest waiting job holds the reservation. (This is SJF-EASY; EASY-SJBF, which keeps the
  reservation for the oldest job and only backfills shortest first, cannot be expressed
  with the scheduler's knobs.)

All presets use FIFO priority (``priority/basic``) so that they are the policies the
literature means; priority weights given on the command line switch to
``priority/multifactor``. Without a ``--conf``, ``bf_window`` is widened to cover the longest
time limit in the trace (Slurm's advice: a job planned beyond the window gets no
reservation); a configuration file's own window is kept as written.

Settings are layered: the preset (or a ``--conf`` file's keys), then the policy's scheduler
keys, then command-line knobs. ``SchedulerParameters`` is merged item by item.
"""

from __future__ import annotations

import math

from muster.sched import SchedConfig

__all__ = [
    "POLICIES",
    "SJF_TOP",
    "build_settings",
    "job_order",
    "merge_parameters",
    "sched_config",
    "sjf_priority",
]

# Admin priorities for ``sjf`` count down from here by time limit (seconds).
SJF_TOP = 1_000_000_000

POLICIES = ("fcfs", "easy", "backfill", "conservative", "sjf")

_PRESETS: dict[str, dict[str, str]] = {
    "fcfs": {"SchedulerType": "sched/builtin", "PriorityType": "priority/basic"},
    "easy": {
        "SchedulerType": "sched/backfill",
        "PriorityType": "priority/basic",
        "SchedulerParameters": "bf_max_job_test=1",
    },
    "backfill": {"SchedulerType": "sched/backfill", "PriorityType": "priority/basic"},
    "sjf": {
        "SchedulerType": "sched/backfill",
        "PriorityType": "priority/basic",
        "SchedulerParameters": "bf_max_job_test=1",
    },
    "conservative": {
        "SchedulerType": "sched/backfill",
        "PriorityType": "priority/basic",
        "SchedulerParameters": "conservative",
    },
}

# SchedulerParameters items that make one preset differ from another: a policy given on the
# command line removes the others' before adding its own.
_POLICY_ITEMS = ("conservative", "bf_conservative", "bf_max_job_test")


def _items(text: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for part in text.split(","):
        part = part.strip()
        if not part or part == "(null)":
            continue
        name, eq, value = part.partition("=")
        out[name.strip().lower()] = value.strip() if eq else None
    return out


def merge_parameters(base: str, extra: dict[str, str | None], drop: tuple[str, ...] = ()) -> str:
    """``SchedulerParameters`` with ``extra`` items set (None: a bare flag) and ``drop`` removed."""
    items = {k: v for k, v in _items(base).items() if k not in drop}
    items.update(extra)
    return ",".join(k if v is None else f"{k}={v}" for k, v in items.items())


def build_settings(
    policy: str | None,
    conf_settings: dict[str, str] | None = None,
    *,
    max_time_limit: int | None = None,
    knobs: dict[str, str] | None = None,
    bf_max_job_test: int | None = None,
) -> dict[str, str]:
    """The slurm.conf settings of one run (see the module docstring for the layering)."""
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (choose from {', '.join(POLICIES)})")
    if conf_settings is not None:
        settings = dict(conf_settings)
    else:
        settings = {}
        policy = policy or "easy"
    params = settings.get("SchedulerParameters", "")
    if policy is not None:
        preset = _PRESETS[policy]
        settings["SchedulerType"] = preset["SchedulerType"]
        settings["PriorityType"] = preset["PriorityType"]
        params = merge_parameters(params, _items(preset.get("SchedulerParameters", "")), _POLICY_ITEMS)
    extra: dict[str, str | None] = {}
    if max_time_limit and conf_settings is None and "bf_window" not in _items(params):
        extra["bf_window"] = str(max(1440, math.ceil(max_time_limit / 60)))
    if bf_max_job_test is not None:
        extra["bf_max_job_test"] = str(bf_max_job_test)
    params = merge_parameters(params, extra)
    if params:
        settings["SchedulerParameters"] = params
    if knobs:
        settings.update(knobs)
        if any(k.startswith("PriorityWeight") for k in knobs):
            settings["PriorityType"] = "priority/multifactor"
    return settings


def sched_config(settings: dict[str, str]) -> SchedConfig:
    return SchedConfig.from_settings(settings)


def job_order(policy: str | None) -> str:
    """``sjf`` for the policy that sets priorities by time limit, else ``fifo``."""
    return "sjf" if policy == "sjf" else "fifo"


def sjf_priority(time_limit: int | None) -> int:
    """The admin priority ``sjf`` gives a job: higher for a shorter limit, never 0 (held)."""
    return max(1, SJF_TOP - (time_limit or 0))
