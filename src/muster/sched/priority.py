"""Job priority: Slurm's multifactor formula, or FIFO (``priority/basic``).

Multifactor, as in Slurm, sums weighted factors that each lie in [0, 1]::

    priority = WeightAge       * age          (time eligible / PriorityMaxAge, capped at 1)
             + WeightFairShare * fair-share   (snapshot.fairshare: association, user, account)
             + WeightJobSize   * job size     (share of the cluster asked for; inverted
                                               with PriorityFavorSmall=YES)
             + WeightPartition * partition    (PriorityJobFactor / the largest one)
             + WeightQOS       * QOS          (QOS Priority / the largest one)
             - nice

truncated to an integer and kept at least 1, because 0 means "held" in Slurm. An admin's
``scontrol update job priority=N`` (``snapshot.priority_overrides``) replaces the formula,
and a held job has priority 0.

Job size is the largest of the job's shares of the cluster's nodes, CPUs and GPUs (Slurm
looks at nodes or CPUs; on a GPU cluster the GPU share is what matters most).

Jobs are examined in ``order_key`` order: partition PriorityTier first (higher first),
then priority (higher first), then submit time, then job id, so equal priorities resolve
the same way on every run. Priorities above 2**48 count as 2**48 for ordering.

``PriorityPolicy.factors`` is the formula, written once: the scheduler's priorities and
sprio's factors (``ctld.accounting``) both come from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice
from operator import gt
from typing import NamedTuple, Protocol

from muster.core.job import Job
from muster.sched.config import SchedConfig
from muster.sched.fairshare import fairshare_of

__all__ = [
    "BASIC_TOP",
    "Factors",
    "PriorityInputs",
    "PriorityMemo",
    "PriorityPolicy",
    "examination_order",
    "order_key",
]

# priority/basic counts down from here by job id, as Slurm counts down by submission.
BASIC_TOP = 0xFFFEFFFF


class _NodeSize(Protocol):
    @property
    def cpus(self) -> int: ...
    @property
    def gpus(self) -> int: ...


class _PartitionWeight(Protocol):
    @property
    def priority_tier(self) -> int: ...
    @property
    def priority_job_factor(self) -> int: ...


class PriorityInputs(Protocol):
    """What the formula reads of the cluster. A ``Snapshot`` is one (the scheduler's
    pass); sprio's view of the controller's memory (``ctld.accounting``) is another, so
    that both go through ``PriorityPolicy`` and cannot disagree."""

    @property
    def nodes(self) -> Sequence[_NodeSize]: ...
    @property
    def partitions(self) -> Mapping[str, _PartitionWeight]: ...
    @property
    def qos_priority(self) -> Mapping[str, int]: ...
    @property
    def fairshare(self) -> Mapping[str, float]: ...
    @property
    def fairshare_default(self) -> float: ...
    @property
    def priority_overrides(self) -> Mapping[int, int]: ...


class Factors(NamedTuple):
    """A job's multifactor priority, factor by factor (what ``sprio -n`` prints), each in
    [0, 1] before its weight, and ``total``: the formula's value (at least 1)."""

    age: float
    fairshare: float
    jobsize: float
    partition: float
    qos: float
    total: int


class PriorityMemo:
    """The terms of the multifactor formula that do not move with time, kept from one pass
    to the next by whoever runs the passes (the controller, the simulator): the fair-share
    factor per (user, account), the job-size factor per (nodes, CPUs per node, GPUs per
    node), so that a pass computes, per pending job, only its age and a sum.

    Keyed by value, so a job updated (``scontrol update`` of its account or node count)
    finds the terms of what it asks now. All of it is forgotten when what the terms are
    computed from changes (``PriorityPolicy.sync``): the fair-share table (usage updates),
    the cluster's totals (nodes, CPUs, GPUs), the config. The priorities are those of
    ``PriorityPolicy.priority``, to the bit: the same expressions, summed in the same
    order."""

    __slots__ = ("basis", "shares_table", "shares", "sizes")

    def __init__(self) -> None:
        self.basis: tuple[object, ...] | None = None
        self.shares_table: dict[str, float] = {}
        self.shares: dict[tuple[str, str | None], float] = {}
        self.sizes: dict[tuple[int, int, int], float] = {}


class PriorityPolicy:
    """The per-pass constants of the formula, computed once from the snapshot."""

    __slots__ = (
        "config",
        "now",
        "total_nodes",
        "total_cpus",
        "total_gpus",
        "part_factor",
        "part_tier",
        "max_part_factor",
        "qos_priority",
        "max_qos",
        "fairshare",
        "fairshare_default",
        "overrides",
        "_by_parts",
    )

    def __init__(self, snapshot: PriorityInputs, now: float, config: SchedConfig) -> None:
        self.config = config
        self.now = now
        self.total_nodes = max(1, len(snapshot.nodes))
        self.total_cpus = max(1, sum(n.cpus for n in snapshot.nodes))
        self.total_gpus = sum(n.gpus for n in snapshot.nodes)
        parts = snapshot.partitions
        self.part_factor = {name: p.priority_job_factor for name, p in parts.items()}
        self.part_tier = {name: p.priority_tier for name, p in parts.items()}
        self.max_part_factor = max(self.part_factor.values(), default=1) or 1
        self.qos_priority = snapshot.qos_priority
        self.max_qos = max(snapshot.qos_priority.values(), default=0)
        self.fairshare = snapshot.fairshare
        self.fairshare_default = snapshot.fairshare_default
        self.overrides = snapshot.priority_overrides
        # partitions -> (partition term of the formula, tier, factor): few distinct lists
        self._by_parts: dict[tuple[str, ...], tuple[float, int, float]] = {}

    def priority(self, job: Job, partitions: tuple[str, ...]) -> int:
        """The job's priority now; ``partitions`` are the ones it may run in."""
        if self.overrides:
            override = self.overrides.get(job.job_id)
            if override is not None:
                return max(0, override)
        if job.hold:
            return 0
        if not self.config.multifactor:
            return max(1, BASIC_TOP - job.job_id - job.spec.nice)
        return self.factors(job, partitions).total

    def priorities(
        self, jobs: Sequence[Job], partitions: Sequence[tuple[str, ...]], memo: PriorityMemo | None = None
    ) -> list[int]:
        """``priority`` of each job, ``partitions[i]`` being where ``jobs[i]`` may run.

        A pass asks this for every pending job, so FIFO without admin overrides (every
        simulator preset) is computed in one comprehension without ``max``; a value below
        1 (a held job's 0 included) sends the whole list the careful way. Multifactor
        without overrides reads the terms that do not move with time from ``memo`` (one
        for this call when none is given): per job, only the age is computed."""
        if self.overrides:
            return [self.priority(j, p) for j, p in zip(jobs, partitions, strict=True)]
        if self.config.multifactor:
            return self._multifactor(jobs, partitions, memo or PriorityMemo())
        values = [0 if j.hold else BASIC_TOP - j.job_id - j.spec.nice for j in jobs]
        if values and min(values) < 1:
            return [0 if j.hold else max(1, BASIC_TOP - j.job_id - j.spec.nice) for j in jobs]
        return values

    def sync(self, memo: PriorityMemo) -> None:
        """Forget what ``memo`` holds when what its terms are computed from has changed."""
        basis = (
            self.config,
            self.total_nodes,
            self.total_cpus,
            self.total_gpus,
            self.fairshare_default,
        )
        if memo.basis != basis or memo.shares_table != self.fairshare:
            memo.basis = basis
            memo.shares_table = dict(self.fairshare)
            memo.shares.clear()
            memo.sizes.clear()

    def _multifactor(self, jobs: Sequence[Job], partitions: Sequence[tuple[str, ...]], memo: PriorityMemo) -> list[int]:
        """``factors(job, parts).total`` (0 for a held job) for each job: the expressions of
        ``factors``, summed in its order, with the fair-share and job-size terms from
        ``memo``. Every pass runs this over the whole queue."""
        self.sync(memo)
        c = self.config
        w_age, w_fs, w_js, w_qos = c.weight_age, c.weight_fairshare, c.weight_job_size, c.weight_qos
        max_age, now = c.max_age, self.now
        max_qos, qos_priority = self.max_qos, self.qos_priority
        table, default = self.fairshare, self.fairshare_default
        shares, sizes, parts_of = memo.shares, memo.sizes, self._parts
        out: list[int] = []
        append = out.append
        for job, parts in zip(jobs, partitions, strict=True):
            if job.hold:
                append(0)
                continue
            spec = job.spec
            total = parts_of(parts)[0]
            since = job.eligible_time if job.eligible_time is not None else job.submit_time
            waited = now - since
            if max_age <= 0:
                age = 1.0
            elif waited > 0:
                age = 1.0 if waited >= max_age else waited / max_age
            else:
                age = 0.0
            if w_age:
                total += w_age * age
            if w_fs:
                who = (job.user, spec.account)
                fs = shares.get(who)
                if fs is None:
                    fs = shares[who] = fairshare_of(table, job.user, spec.account, default)
                total += w_fs * fs
            if w_js:
                shape = job.shape
                size = (shape.nodes, shape.cpus_per_node, shape.gpus_per_node)
                js = sizes.get(size)
                if js is None:
                    js = sizes[size] = self._size_factor(job)
                total += w_js * js
            if w_qos and max_qos > 0 and spec.qos:
                total += w_qos * qos_priority.get(spec.qos, 0) / max_qos
            append(max(1, int(total) - spec.nice))
        return out

    def factors(self, job: Job, partitions: tuple[str, ...]) -> Factors:
        """The formula, term by term, for a job that may run in ``partitions`` (neither an
        admin's override nor a hold: ``priority`` applies those). The one place the
        multifactor formula is written: the scheduler's priorities and sprio's rows are
        both this."""
        spec = job.spec
        c = self.config
        # Each weighted term is computed as weight * value / largest (not weight * factor),
        # so the total stays what it has always been to the last bit before truncation.
        total, _tier, partition = self._parts(partitions)
        since = job.eligible_time if job.eligible_time is not None else job.submit_time
        waited = self.now - since
        if c.max_age <= 0:
            age = 1.0
        elif waited > 0:
            age = 1.0 if waited >= c.max_age else waited / c.max_age
        else:
            age = 0.0
        if c.weight_age:
            total += c.weight_age * age
        fairshare = fairshare_of(self.fairshare, job.user, spec.account, self.fairshare_default)
        if c.weight_fairshare:
            total += c.weight_fairshare * fairshare
        jobsize = self._size_factor(job)
        if c.weight_job_size:
            total += c.weight_job_size * jobsize
        qos_raw = self.qos_priority.get(spec.qos, 0) if spec.qos else 0
        qos = qos_raw / self.max_qos if self.max_qos > 0 else 0.0
        if c.weight_qos and self.max_qos > 0 and spec.qos:
            total += c.weight_qos * qos_raw / self.max_qos
        return Factors(age, fairshare, jobsize, partition, qos, max(1, int(total) - spec.nice))

    def tier(self, partitions: tuple[str, ...]) -> int:
        return self._parts(partitions)[1]

    def _parts(self, partitions: tuple[str, ...]) -> tuple[float, int, float]:
        """(the partition term of the formula, the tier, the partition factor)."""
        found = self._by_parts.get(partitions)
        if found is None:
            factor = max((self.part_factor.get(p, 0) for p in partitions), default=0)
            term = self.config.weight_partition * factor / self.max_part_factor
            tier = max((self.part_tier.get(p, 0) for p in partitions), default=0)
            found = self._by_parts[partitions] = (term, tier, factor / self.max_part_factor)
        return found

    def _size_factor(self, job: Job) -> float:
        shape = job.shape
        share = max(
            shape.nodes / self.total_nodes,
            shape.total_cpus / self.total_cpus,
            shape.total_gpus / self.total_gpus if self.total_gpus else 0.0,
        )
        share = min(1.0, share)
        return 1.0 - share if self.config.favor_small else share


_TIER_MAX = (1 << 16) - 1
_PRIO_MAX = (1 << 48) - 1
_TIME_MAX = (1 << 64) - 1
_ID_MAX = (1 << 48) - 1


def order_key(tier: int, priority: int, job: Job) -> int:
    """Sort key, smaller first: higher tier, higher priority, earlier submission (to the
    microsecond), lower job id.

    One integer rather than a tuple: a pass sorts every pending job, and integers are not
    tracked by the garbage collector, whose full collections over a large queue cost more
    than the sort itself."""
    t = _TIER_MAX - min(max(tier, 0), _TIER_MAX)
    p = _PRIO_MAX - min(max(priority, 0), _PRIO_MAX)
    s = min(max(int(job.submit_time * 1_000_000), 0), _TIME_MAX)
    i = min(max(job.job_id, 0), _ID_MAX)
    return (((t << 48 | p) << 64 | s) << 48) | i


def examination_order(tiers: Sequence[int], priorities: Sequence[int], jobs: Sequence[Job]) -> list[int]:
    """The positions of ``jobs`` sorted by ``order_key`` (ties keep their positions),
    without building the keys: a pass orders every eligible job, and four-field integers
    cost more to build than to sort.

    Stable sorts from the last field to the first give the same order; the submission
    and job id sorts are left out when no two priorities are equal (they could break no
    tie), the tier sort when all tiers are equal. Values are clamped to their fields as
    ``order_key`` clamps them. A FIFO queue listed in submission order usually has
    strictly falling priorities: it is in order already."""
    n = len(jobs)
    order = list(range(n))
    prios = _clamped(priorities, _PRIO_MAX)
    uniform = not n or min(tiers) == max(tiers)
    if uniform and all(map(gt, prios, islice(prios, 1, None))):
        return order
    if len(set(prios)) < n:
        ids = _clamped([job.job_id for job in jobs], _ID_MAX)
        order.sort(key=ids.__getitem__)
        micros = _clamped([int(job.submit_time * 1_000_000) for job in jobs], _TIME_MAX)
        order.sort(key=micros.__getitem__)
    order.sort(key=prios.__getitem__, reverse=True)  # reverse=True keeps ties in order
    if not uniform:
        order.sort(key=_clamped(tiers, _TIER_MAX).__getitem__, reverse=True)
    return order


def _clamped(values: Sequence[int], top: int) -> Sequence[int]:
    if not values or (min(values) >= 0 and max(values) <= top):
        return values
    return [min(max(v, 0), top) for v in values]
