"""Preemption, planned inside the pass: which running jobs to evict so that a waiting job
can start, and the node holds that keep what they free for it.

Slurm's two ways of saying who may preempt whom:

* ``preempt/qos``: a job may preempt running jobs whose QOS is in its QOS's ``Preempt``
  list (``sacctmgr modify qos high set Preempt=scavenger``);
* ``preempt/partition_prio``: a job may preempt running jobs of partitions with a lower
  ``PriorityTier`` than the one it asks.

A victim is preemptable when its mode (its QOS's ``PreemptMode`` under preempt/qos, else
its partition's, else the cluster's) is REQUEUE, CANCEL or SUSPEND, and it has run at least
``PreemptExemptTime`` (its QOS's, else the cluster's). A victim already in its grace time
is not chosen again.

``Preempting.plan`` answers for one waiting job, after the pass placed everything it could:
the fewest victims that lose the least work, whose resources, with what is free now, let
the job start on enough of its candidate nodes (its constraints, ``-w``/``-x``, GPU type and
reservation windows already decided the candidates, ``filters``). Among the jobs the policy
allows, victims are ordered by ``victim_key``: **the least work lost** (``victim_cost``:
GPU-seconds since their last reported checkpoint, ``Job.progress["ckpt_time"]``, or since
their start when they reported none), then the smallest (fewest GPUs), then the lowest
priority, then the most recently started. ``PreemptParameters=victim_order=priority``
orders them as Slurm does instead: the lowest priority first, then the most recently
started. Nodes are chosen greedily: at each step the node that needs the fewest more
victims, then whose victims lose the least work (``lost_work`` order) or have the lowest
priority (``priority`` order). Victims that turn out not to be needed are dropped again. A
job that would not fit even with every preemptable job gone preempts nobody.

A SUSPEND victim (``PreemptMode=SUSPEND,GANG``, partition PriorityTier only) is frozen,
not stopped: it keeps its memory and GPUs, as in Slurm, and lends only its CPUs to its
preemptor (``_add`` counts its CPUs alone; the controller's view counts the CPUs of a
suspended victim as free, ``ctld.preemption.lends_cpus``). So it is chosen only where CPUs
are what the preemptor lacks; a preemptor that needs its GPUs or memory cannot use it. An
``--exclusive`` preemptor cannot use one either (the node stays shared).

The preemptor does not start in this pass: its victims get their grace time first. It
*holds* the chosen nodes (``Decisions.holds``): later passes take what is free on them
out of the profile for everyone else (``hold_nodes``) and give it back only at the
holder's turn, where it starts preferably on them (``held_request``). A preemptor whose
victims still run preempts nobody else. The same holds serve ``--requeue=expedite``:
a job requeued after a node failure holds its surviving nodes.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from muster.core.job import Job
from muster.sched.backfill import windows_allow
from muster.sched.config import SchedConfig
from muster.sched.decisions import Preemption
from muster.sched.filters import Request
from muster.sched.profile import NodeProfile
from muster.sched.snapshot import QosPreempt, Snapshot

__all__ = ["Preempting", "hold_active", "held_request", "lost_work", "victim_cost", "victim_key"]

_NO_QOS = QosPreempt()
_DEFAULT_QOS = "normal"


def hold_active(job: Job, now: float, waiting: set[int]) -> bool:
    """Whether a pending job's node hold still counts: before ``hold_until``, or while
    victims it preempted are still running."""
    if not job.held_nodes:
        return False
    return job.hold_until is None or job.hold_until > now or job.job_id in waiting


def lost_work(job: Job, now: float) -> tuple[float, float | None]:
    """(seconds of work lost if ``job`` stopped now, seconds since its last checkpoint or
    None): work since its last checkpoint of this attempt, else since its start."""
    start = job.start_time if job.start_time is not None else now
    ckpt = (job.progress or {}).get("ckpt_time")
    if isinstance(ckpt, int | float) and not isinstance(ckpt, bool) and ckpt >= start:
        age = max(0.0, now - float(ckpt))
        return age, age
    return max(0.0, now - start), None


def victim_cost(job: Job, now: float) -> tuple[float, int]:
    """(GPU-seconds of work ``job`` loses if stopped now, its GPUs): ``lost_work`` times its
    GPUs (a job without GPUs weighs as one, i.e. wall time)."""
    gpus = sum(len(a.gpu_ids) for a in job.alloc)
    return lost_work(job, now)[0] * max(1, gpus), gpus


def victim_key(job: Job, cost: tuple[float, int], order: str = "lost_work") -> tuple[float, ...]:
    """How victims are ordered, the first one taken first (``cost``: its ``victim_cost``).
    ``lost_work``: the least work lost, then the smallest, then the lowest priority, then
    the most recently started; ``priority`` (Slurm's): the lowest priority, then the most
    recently started. The job id breaks the last tie."""
    latest = -(job.start_time or 0.0)
    if order == "priority":
        return (float(job.priority), latest, float(job.job_id))
    return (cost[0], float(cost[1]), float(job.priority), latest, float(job.job_id))


def held_request(req: Request, held: Iterable[str]) -> Request | None:
    """``req`` with the held nodes among its candidates required (as many as it needs), so
    the holder starts on them and only fills up with others; None when none is usable."""
    names = {n.name for n in req.candidates}
    mine = [name for name in held if name in names and name not in req.required]
    room = req.nodes - len(req.required)
    if not mine or room <= 0:
        return None
    required = req.required | frozenset(mine[:room])
    return Request(
        req.partition,
        req.nodes,
        req.need,
        req.exclusive,
        req.candidates,
        required,
        req.reservation,
        req.allowed,
        req.key + (("held",) + tuple(sorted(required)),),
    )


class Preempting:
    """The pass's preemption state: who runs where, who is already a victim, which nodes
    are held."""

    def __init__(self, snap: Snapshot, pool: dict[str, NodeProfile], config: SchedConfig, now: float) -> None:
        self.snap = snap
        self.pool = pool
        self.config = config
        self.now = now
        self.enabled = config.preempt_type != "preempt/none"
        # preemptors whose victims still run: they hold their nodes and preempt no more
        self.waiting = {j.preempted_by for j in snap.running if j.preempted_by is not None}
        if self.enabled and config.preempt_mode == "OFF" and not _any_mode(snap):
            self.enabled = False
        self.held: set[str] = set()  # nodes held by some pending job (this pass included)
        self.claimed: set[int] = set()  # victims chosen in this pass
        self.on_node: dict[str, list[Job]] = {}
        self._lost: dict[int, tuple[float, float | None]] = {}
        self._keys: dict[int, tuple[float, ...]] = {}  # victim_key of each running job
        self._by_priority = config.preempt_victim_order == "priority"
        self._lowest_tier: int | None = None
        self._suspend: set[int] = set()  # running jobs whose PreemptMode is SUSPEND
        # (request key, preemptor's QOS or partition[, duration]) that found no victims: a
        # later job asking the same finds none either (a pass only claims more)
        self._failed: set[tuple[object, ...]] = set()
        if not self.enabled:  # every pass builds one: nothing more to index
            return
        for job in snap.pending:
            if hold_active(job, now, self.waiting):
                self.held.update(job.held_nodes)
        tiers = []
        for job in snap.running:
            self._lost[job.job_id] = lost_work(job, now)
            self._keys[job.job_id] = victim_key(job, victim_cost(job, now), config.preempt_victim_order)
            if self.mode_of(job)[0] == "SUSPEND":
                self._suspend.add(job.job_id)
            for a in job.alloc:
                self.on_node.setdefault(a.node, []).append(job)
            part = snap.partitions.get(job.partition)
            if part is not None:
                tiers.append(part.priority_tier)
        self._lowest_tier = min(tiers, default=None)  # partition_prio: no lower tier, no victim

    # -- who may preempt whom ---------------------------------------------------------
    def _qos(self, job: Job) -> QosPreempt:
        return self.snap.qos_preempt.get(job.spec.qos or _DEFAULT_QOS, _NO_QOS)

    def may_preempt_anyone(self, job: Job) -> bool:
        """A cheap first test, so that a long queue costs nothing."""
        if not self.enabled or job.job_id in self.waiting or not self.snap.running:
            return False
        if self.config.preempt_type == "preempt/qos":
            return bool(self._qos(job).preempt)
        low = self._lowest_tier
        parts = self.snap.partitions
        names = job.spec.partitions or [job.partition]
        return low is not None and any((p := parts.get(n)) is not None and p.priority_tier > low for n in names)

    def mode_of(self, victim: Job) -> tuple[str, int]:
        """(PreemptMode, GraceTime) that apply to ``victim``."""
        part = self.snap.partitions.get(victim.partition)
        qos = self._qos(victim) if self.config.preempt_type == "preempt/qos" else _NO_QOS
        mode = qos.mode or (part.preempt_mode if part is not None else None) or self.config.preempt_mode
        grace = qos.grace_time or (part.grace_time if part is not None else 0)
        return mode, grace

    def preemptable(self, preemptor: Job, partition: str, victim: Job) -> bool:
        if victim.preempted_by is not None or victim.completing or victim.job_id in self.claimed:
            return False
        if victim.start_time is None:
            return False
        qos = self._qos(victim)
        exempt = qos.exempt_time if qos.exempt_time is not None else self.config.preempt_exempt_time
        if self.now - victim.start_time < exempt:
            return False
        mode = self.mode_of(victim)[0]
        if mode == "OFF" or (mode == "SUSPEND" and self.config.preempt_type != "preempt/partition_prio"):
            return False
        if self.config.preempt_type == "preempt/qos":
            return (victim.spec.qos or _DEFAULT_QOS) in self._qos(preemptor).preempt
        mine = self.snap.partitions.get(partition)
        theirs = self.snap.partitions.get(victim.partition)
        return mine is not None and theirs is not None and theirs.priority_tier < mine.priority_tier

    def _victim_key(self, job: Job) -> tuple[float, ...]:
        return self._keys[job.job_id]

    # -- planning -----------------------------------------------------------------------
    def plan(self, job: Job, req: Request, duration: float) -> tuple[list[str], list[Job]] | None:
        """The nodes the job would start on and the victims to evict, or None."""
        memo: tuple[object, ...] = (
            req.key,
            job.spec.qos if self.config.preempt_type == "preempt/qos" else req.partition,
        )
        if self.snap.reservations:  # windows depend on the job's duration
            memo += (duration,)
        if memo in self._failed:
            return None
        found = self._plan(job, req, duration)
        if found is None:
            self._failed.add(memo)
        return found

    def _plan(self, job: Job, req: Request, duration: float) -> tuple[list[str], list[Job]] | None:
        allowed = {
            v.job_id: v
            for node in req.candidates
            for v in self.on_node.get(node.name, ())
            if self.preemptable(job, req.partition, v)
        }
        if not allowed:
            return None
        cands = [n for n in req.candidates if n.available and n.name not in self.held]
        if req.reservation is not None or any(n.windows for n in cands):
            cands = [n for n in cands if windows_allow(n, req, self.now, self.now + duration)]
        chosen: list[NodeProfile] = []
        victims: dict[int, Job] = {}
        while len(chosen) < req.nodes:
            missing = [n for n in cands if n.name in req.required and n not in chosen]
            pool = missing or [n for n in cands if n not in chosen]
            best: tuple[tuple[float, ...], NodeProfile, list[Job]] | None = None
            for node in pool:
                extra = self._extra(node, req, victims, allowed)
                if extra is None:
                    continue
                if self._by_priority:  # Slurm's: the lowest-priority victims
                    cost: tuple[float, ...] = (max((v.priority for v in extra), default=-1),)
                else:  # the least GPU-time lost, then the fewest GPUs taken
                    cost = (sum(self._keys[v.job_id][0] for v in extra), sum(self._keys[v.job_id][1] for v in extra))
                key = (len(extra), *cost, node.index)
                if best is None or key < best[0]:
                    best = (key, node, extra)
            if best is None:
                return None  # could not run even with every preemptable job gone
            chosen.append(best[1])
            victims.update((v.job_id, v) for v in best[2])
        if not victims:
            return None  # it fits without anyone leaving: nothing to preempt for
        order = sorted(victims.values(), key=self._victim_key, reverse=True)
        for v in order:  # drop victims the others made unnecessary, highest priority first
            rest = {k: x for k, x in victims.items() if k != v.job_id}
            if all(self._extra(n, req, rest, {}) == [] for n in chosen):
                victims = rest
        return [n.name for n in chosen], sorted(victims.values(), key=self._victim_key)

    def _extra(
        self, node: NodeProfile, req: Request, victims: dict[int, Job], allowed: dict[int, Job]
    ) -> list[Job] | None:
        """The victims to add on ``node`` (beyond ``victims``) for one share of ``req`` to
        fit there now; None when even all of ``allowed`` there are not enough."""
        here = self.on_node.get(node.name, ())
        c, m, g = node.cpus[0], node.mem[0], node.gpus[0]
        frozen = self._suspend
        for v in here:
            if v.job_id in victims:
                c, m, g = _add(c, m, g, v, node.name, v.job_id in frozen)
        if req.exclusive:
            others = [v for v in here if v.job_id not in victims]
            if node.running != len(here) or any(v.job_id not in allowed or v.job_id in frozen for v in others):
                return None  # a job started this pass, one that may not be preempted, or one suspended
            return sorted(others, key=self._victim_key)
        nc, nm, ng = req.need
        extra: list[Job] = []
        if c >= nc and m >= nm and g >= ng:
            return extra
        for v in sorted((v for v in here if v.job_id in allowed and v.job_id not in victims), key=self._victim_key):
            c, m, g = _add(c, m, g, v, node.name, v.job_id in frozen)
            extra.append(v)
            if c >= nc and m >= nm and g >= ng:
                # a lower-priority victim taken first may have become unnecessary
                for w in list(extra[:-1])[::-1]:
                    rc, rm, rg = _sub(c, m, g, w, node.name, w.job_id in frozen)
                    if rc >= nc and rm >= nm and rg >= ng:
                        extra.remove(w)
                        c, m, g = rc, rm, rg
                return extra
        return None

    def commit(self, job: Job, nodes: Sequence[str], victims: list[Job]) -> list[Preemption]:
        """Record the choice: the victims are claimed and the nodes held in this pass."""
        self.held.update(nodes)
        out = []
        for v in victims:
            self.claimed.add(v.job_id)
            mode, grace = self.mode_of(v)
            lost, age = self._lost[v.job_id]
            why = f"Preempted by job {job.job_id}"
            if mode == "SUSPEND":  # frozen at once: it loses nothing and has no grace time
                grace, lost, age = 0, 0.0, None
                why += " (suspended until it ends)"
            else:
                why += f" (last checkpoint {age:.0f} s ago)" if age is not None else " (no checkpoint reported)"
            out.append(Preemption(v.job_id, job.job_id, mode, grace, lost, age, why))
        return out


def _any_mode(snap: Snapshot) -> bool:
    """Whether a partition or QOS sets a PreemptMode other than OFF (the cluster's is)."""
    return any(p.preempt_mode not in (None, "OFF") for p in snap.partitions.values()) or any(
        q.mode not in (None, "OFF") for q in snap.qos_preempt.values()
    )


def _add(c: int, m: int, g: int, job: Job, node: str, cpus_only: bool = False) -> tuple[int, int, int]:
    """What is free on ``node`` once ``job`` leaves it; a suspended job (``cpus_only``)
    gives back its CPUs alone, keeping its memory and GPUs."""
    for a in job.alloc:
        if a.node == node:
            if cpus_only:
                return c + a.cpus, m, g
            return c + a.cpus, m + a.mem, g + len(a.gpu_ids)
    return c, m, g


def _sub(c: int, m: int, g: int, job: Job, node: str, cpus_only: bool = False) -> tuple[int, int, int]:
    for a in job.alloc:
        if a.node == node:
            if cpus_only:
                return c - a.cpus, m, g
            return c - a.cpus, m - a.mem, g - len(a.gpu_ids)
    return c, m, g
