"""Association and QOS limits on running jobs, with Slurm's pending reasons.

The scheduler knows nothing of associations, so the controller applies these limits around
each pass (see ``muster.ctld.accounting``): a pending job that would break a limit if it
started now is kept out of the pass and shows the limit's reason in squeue; starts the pass
decides are admitted one by one against the same counters, so that two jobs started in one
pass cannot break a limit together.

``Running`` counts what active jobs hold; ``check`` answers the first limit a job would
break, cheapest checks first (a time limit before counters, counters before TRES sums):

=================================  ===============================================
limit                              reason
=================================  ===============================================
QOS MaxWall / assoc MaxWall        QOSMaxWallDurationPerJobLimit / AssocMaxWallDurationPerJobLimit
QOS MaxJobsPerUser                 QOSMaxJobsPerUserLimit
assoc MaxJobs (per user assoc)     AssocMaxJobsLimit
QOS GrpJobs / assoc GrpJobs        QOSGrpJobsLimit / AssocGrpJobsLimit
QOS MaxTRESPerUser                 QOSMaxGRESPerUser, QOSMaxCpuPerUserLimit, ...
QOS GrpTRES / assoc GrpTRES        QOSGrpGRES, AssocGrpGRES, AssocGrpCpuLimit, ...
assoc GrpTRESMins                  AssocGrpGRESMinutes, AssocGrpCPUMinutesLimit, ...
=================================  ===============================================
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from muster.core.states import Reason
from muster.ctld.acct_objects import Assoc, Qos
from muster.ctld.assoc import AssocDB

_ASSOC_GRP = {
    "cpu": Reason.ASSOC_GRP_CPU,
    "mem": Reason.ASSOC_GRP_MEM,
    "node": Reason.ASSOC_GRP_NODE,
    "gres/gpu": Reason.ASSOC_GRP_GRES,
    "billing": Reason.ASSOC_GRP_BILLING,
}
_ASSOC_GRP_MIN = {
    "cpu": Reason.ASSOC_GRP_CPU_MIN,
    "mem": Reason.ASSOC_GRP_MEM_MIN,
    "node": Reason.ASSOC_GRP_NODE_MIN,
    "gres/gpu": Reason.ASSOC_GRP_GRES_MIN,
    "billing": Reason.ASSOC_GRP_BILLING_MIN,
}
_QOS_GRP = {
    "cpu": Reason.QOS_GRP_CPU,
    "mem": Reason.QOS_GRP_MEM,
    "node": Reason.QOS_GRP_NODE,
    "gres/gpu": Reason.QOS_GRP_GRES,
    "billing": Reason.QOS_GRP_BILLING,
}
_QOS_PER_USER = {
    "cpu": Reason.QOS_MAX_CPU_PER_USER,
    "mem": Reason.QOS_MAX_MEM_PER_USER,
    "node": Reason.QOS_MAX_NODE_PER_USER,
    "gres/gpu": Reason.QOS_MAX_GRES_PER_USER,
    "billing": Reason.QOS_MAX_BILLING_PER_USER,
}


@dataclass(slots=True)
class JobLoad:
    """What one job would add: its association path, QOS, user, TRES and time limit."""

    chain: list[Assoc]
    qos: Qos | None
    user: str
    tres: dict[str, int]
    time_limit: int | None


def _zero() -> dict[str, float]:
    return defaultdict(float)


@dataclass
class Running:
    """What active jobs hold, per association (subtree sums) and per QOS."""

    assoc_jobs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    assoc_tres: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(_zero))
    qos_jobs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    qos_tres: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(_zero))
    qos_user_jobs: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    qos_user_tres: dict[tuple[str, str], dict[str, float]] = field(default_factory=lambda: defaultdict(_zero))

    def add(self, load: JobLoad) -> None:
        for a in load.chain:
            self.assoc_jobs[a.key] += 1
            per = self.assoc_tres[a.key]
            for name, n in load.tres.items():
                per[name] += n
        if load.qos is not None:
            q = load.qos.name
            self.qos_jobs[q] += 1
            self.qos_user_jobs[(q, load.user)] += 1
            for name, n in load.tres.items():
                self.qos_tres[q][name] += n
                self.qos_user_tres[(q, load.user)][name] += n


def _inherited(chain: list[Assoc], name: str) -> int | None:
    """A per-user limit: the association's own, else the nearest account's above it."""
    for a in chain:
        value = getattr(a.limits, name)
        if value is not None:
            return value  # type: ignore[no-any-return]
    return None


def _over(held: dict[str, float], want: dict[str, int], limit: dict[str, int]) -> str | None:
    for name, cap in sorted(limit.items()):
        if cap >= 0 and held.get(name, 0) + want.get(name, 0) > cap:
            return name
    return None


def check(
    load: JobLoad,
    running: Running,
    db: AssocDB,
    used_seconds: dict[str, dict[str, float]] | None = None,
) -> Reason | None:
    """The first limit ``load`` would break by starting now, or None.

    ``used_seconds``: decayed TRES-seconds per association key, for GrpTRESMins."""
    q = load.qos
    user_assoc = load.chain[0] if load.chain else None
    # 1. time limits (no counting)
    if q is not None and q.max_wall is not None:
        if load.time_limit is None or load.time_limit > q.max_wall:
            return Reason.QOS_MAX_WALL
    if user_assoc is not None:
        wall = _inherited(load.chain, "max_wall")
        if wall is not None and (load.time_limit is None or load.time_limit > wall):
            return Reason.ASSOC_MAX_WALL
    # 2. job counts
    if q is not None and q.max_jobs_per_user is not None:
        if running.qos_user_jobs.get((q.name, load.user), 0) + 1 > q.max_jobs_per_user:
            return Reason.QOS_MAX_JOBS_PER_USER
    if user_assoc is not None:
        max_jobs = _inherited(load.chain, "max_jobs")
        if max_jobs is not None and running.assoc_jobs.get(user_assoc.key, 0) + 1 > max_jobs:
            return Reason.ASSOC_MAX_JOBS
    if q is not None and q.grp_jobs is not None and running.qos_jobs.get(q.name, 0) + 1 > q.grp_jobs:
        return Reason.QOS_GRP_JOBS
    for a in load.chain:
        if a.limits.grp_jobs is not None and running.assoc_jobs.get(a.key, 0) + 1 > a.limits.grp_jobs:
            return Reason.ASSOC_GRP_JOBS
    # 3. TRES sums
    if q is not None and q.max_tres_per_user:
        name = _over(running.qos_user_tres.get((q.name, load.user), {}), load.tres, q.max_tres_per_user)
        if name is not None:
            return _QOS_PER_USER.get(name, Reason.QOS_MAX_GRES_PER_USER)
    if q is not None and q.grp_tres:
        name = _over(running.qos_tres.get(q.name, {}), load.tres, q.grp_tres)
        if name is not None:
            return _QOS_GRP.get(name, Reason.QOS_GRP_GRES)
    for a in load.chain:
        if a.limits.grp_tres:
            name = _over(running.assoc_tres.get(a.key, {}), load.tres, a.limits.grp_tres)
            if name is not None:
                return _ASSOC_GRP.get(name, Reason.ASSOC_GRP_GRES)
    # 4. accumulated usage (TRES-minutes), with what this job may still use
    for a in load.chain:
        if a.limits.grp_tres_mins:
            used = (used_seconds or {}).get(a.key, {})
            for name, cap in sorted(a.limits.grp_tres_mins.items()):
                if cap < 0:
                    continue
                minutes = used.get(name, 0.0) / 60.0
                if load.time_limit is not None:
                    minutes += load.tres.get(name, 0) * load.time_limit / 60.0
                if minutes > cap or (load.time_limit is None and minutes >= cap):
                    return _ASSOC_GRP_MIN.get(name, Reason.ASSOC_GRP_GRES_MIN)
    return None
