"""One scheduling pass: ``schedule(snapshot, now, config) -> Decisions``.

The pass runs in numbered phases (README.md draws them); each is counted in
``PassStats`` and, when the caller injects a ``timer`` (any callable returning seconds,
e.g. the controller's monotonic clock), timed into ``PassStats.phase_seconds``. Nothing
here reads a clock, does I/O or depends on set or dict order: the same snapshot, time and
config always give the same decisions.

1. profile      build each node's availability profile from running jobs' expected ends,
                and the reservation windows on each node
2. eligibility  set aside held jobs, jobs before their begin time, jobs whose
                dependencies are not met and array tasks beyond their array's ``%N``
                throttle (JobArrayTaskLimit), with their reasons
3. priority     compute every pending job's priority and sort the eligible ones
4. placement    in priority order: start the job now if it fits without taking what an
                earlier job was promised; otherwise give it a planned start (a reservation
                in the profile), up to the backfill depth; sched/builtin instead stops a
                partition at its first blocked job. The first blocked job of a partition
                waits for Resources, those behind it for Priority. Conservative
                backfill places the jobs holding a plan from the previous pass first,
                by that plan's start, each plan held in the profile until its job's turn
                (README.md, "Promises"). The components of a heterogeneous job are
                placed together, all or none (``hetgroups``). Nodes held for a job (a
                preemptor waiting for its victims, an expedited requeue) are taken out
                of the profile until that job's turn, where it starts on them first.
4b. preemption  for the jobs still waiting that may preempt (PreemptType): the fewest,
                lowest-priority running jobs to evict so they can start, least work
                lost since a checkpoint first among equals (``preempt``); they start
                in a later pass, holding the nodes meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from muster.core.job import Job
from muster.core.states import Reason
from muster.sched.backfill import Backfill
from muster.sched.config import SchedConfig
from muster.sched.decisions import Decisions, Plan, Start
from muster.sched.dependencies import DependencyIndex, DepState, parse_dependency
from muster.sched.filters import NO_PARTITION, Feasibility, Request, Verdict, job_duration
from muster.sched.hetgroups import HetGroups, place_group
from muster.sched.memo import PassMemo
from muster.sched.preempt import Preempting, held_request, hold_active
from muster.sched.priority import PriorityPolicy, examination_order
from muster.sched.profile import INF, NodeProfile
from muster.sched.reservations import ReservationBook
from muster.sched.snapshot import Snapshot

__all__ = ["schedule"]

# Recurring reservations are expanded this far beyond the backfill window, so that a
# long job is kept off a node whose reservation comes back after the window.
_RESERVATION_LOOKAHEAD = 60 * 86400
_NO_PARTITION = Verdict(Reason.BAD_CONSTRAINTS, False, NO_PARTITION)
_PRIORITY = Reason.PRIORITY  # looked up once: most jobs of a long queue get it, every pass


def schedule(
    snapshot: Snapshot,
    now: float,
    config: SchedConfig,
    timer: Callable[[], float] | None = None,
    memo: PassMemo | None = None,
) -> Decisions:
    """Decide what starts now, what is planned when, and why the rest waits. ``memo``
    (kept by the caller from one pass to the next, ``sched.memo``) holds answers that only
    events change: the decisions are the same with or without it."""
    return _Pass(snapshot, now, config, timer, memo).run()


class _Pass:
    """The state of one pass; each phase method fills what the next one reads."""

    # set by phase 1
    pool: dict[str, NodeProfile]
    book: ReservationBook
    feas: Feasibility
    _default: tuple[str, ...]  # the default partition, if any
    _single: dict[str, tuple[str]]
    # set by phase 2
    parts: list[tuple[str, ...]]  # where each pending job may run, in snapshot order
    _deps: DependencyIndex | None
    _room: dict[int, int] | None  # throttled arrays: tasks that may still start
    # set by phase 4
    engine: Backfill
    blocked: set[str]
    singletons: set[tuple[str, str]]
    plans_left: int | None
    backfill: bool  # sched/backfill, else sched/builtin

    def __init__(
        self,
        snapshot: Snapshot,
        now: float,
        config: SchedConfig,
        timer: Callable[[], float] | None,
        memo: PassMemo | None = None,
    ) -> None:
        self.snap = snapshot
        self.memo = memo
        self.now = now
        self.config = config
        self.timer = timer
        self.d = Decisions()
        self._deps = None
        self._room = None
        self._blocked: dict[int, list[tuple[NodeProfile, int, int, int]]] = {}
        self._t = timer() if timer else 0.0

    def _phase(self, name: str) -> None:
        if self.timer is not None:
            t = self.timer()
            self.d.stats.phase_seconds[name] = t - self._t
            self._t = t

    def run(self) -> Decisions:
        self.d.stats.pending_seen = len(self.snap.pending)
        self._build_profile()
        self._phase("1.profile")
        eligible = self._eligibility()
        self._phase("2.eligibility")
        ordered = self._prioritise(eligible)
        self._phase("3.priority")
        self._place(ordered)
        self._phase("4.placement")
        if self.preempting.enabled:
            self._preempt(ordered)
            self._phase("4b.preemption")
        return self.d

    # -- 1. profile ---------------------------------------------------------------------
    def _build_profile(self) -> None:
        now, res = self.now, self.config.bf_resolution
        pool = {v.name: NodeProfile(v, now) for v in self.snap.nodes}
        releases: dict[str, list[tuple[float, int, int, int]]] = {}
        fences: list[tuple[Job, float]] = []  # --exclusive=topo jobs: their units stay idle
        topology = self.snap.topology
        for job in self.snap.running:
            # Job.expected_end, inline: every pass reads every running job.
            start, limit = job.start_time, job.time_limit
            end = None if start is None or limit is None else start + limit
            if end is None and job.start_time is not None:
                part = self.snap.partitions.get(job.partition)
                limit = job_duration(job, part) if part is not None else None
                end = None if limit is None else job.start_time + limit
            if job.preempt_deadline is not None and (end is None or job.preempt_deadline < end):
                end = job.preempt_deadline  # preempted: killed at the end of its grace time
            if end is not None:
                if end <= now:
                    end = now + res  # past its limit: expected to go at the next step
                elif res > 1:
                    end = -(-end // res) * res
            if topology is not None and job.spec.exclusive_topo:
                fences.append((job, INF if end is None else end))
            if end is None:
                continue  # no time limit: never gives its resources back in the plan
            for a in job.alloc:
                rel = releases.get(a.node)
                if rel is None:
                    rel = releases[a.node] = []
                rel.append((end, a.cpus, a.mem, len(a.gpu_ids)))
        for name, rel in releases.items():
            node = pool.get(name)
            if node is not None:
                node.add_releases(rel)
        for job, end in fences:
            assert topology is not None
            for name in topology.fence(job.nodes):
                if name in pool:
                    pool[name].fence(now, end)
        until = now + self.config.bf_window + _RESERVATION_LOOKAHEAD
        self.book = ReservationBook(self.snap.reservations, now, until)
        for name, slots in self.book.node_windows.items():
            node = pool.get(name)
            if node is not None:
                node.windows = slots
        self.pool = pool
        self._single = {}
        self._default = tuple(sorted(p.name for p in self.snap.partitions.values() if p.is_default)[:1])
        self.feas = Feasibility(
            self.snap.partitions, pool, self.book, now, self.snap.topology, self.config.max_switch_wait
        )
        self.preempting = Preempting(self.snap, pool, self.config, now)

    # -- 2. eligibility -------------------------------------------------------------------
    def _eligibility(self) -> list[tuple[Job, tuple[str, ...]]]:
        # One loop, each job read once: a pass runs this over the whole queue.
        d, now = self.d, self.now
        parts_of = self._partitions_of
        overrides = self.snap.priority_overrides
        self.parts = all_parts = []  # phase 3 reads them too
        out: list[tuple[Job, tuple[str, ...]]] = []
        if self.memo is not None:
            self.memo.deps.sync(self.snap.pending, self.snap.running)
        # Most jobs name no partition and share the one the controller resolved.
        last_name: str | None = None
        last: tuple[str, ...] = ()
        for job in self.snap.pending:
            spec = job.spec
            if spec.partitions:
                parts = parts_of(job)
            elif job.partition == last_name:
                parts = last
            else:
                parts = last = parts_of(job)
                last_name = job.partition
            all_parts.append(parts)
            if job.hold == "user" and not overrides:  # the common hold, without a call
                d.reasons[job.job_id] = Reason.HELD_USER  # (what _ineligible says of it)
                d.stats.ineligible += 1
                continue
            if (
                job.hold
                or spec.dependency
                or job.array_throttle
                or (spec.begin_time is not None and spec.begin_time > now)
                or (overrides and overrides.get(job.job_id) == 0)
            ):
                reason = self._ineligible(job)
                if reason is not Reason.NONE:
                    d.reasons[job.job_id] = reason
                    d.stats.ineligible += 1
                    continue
            out.append((job, parts))
        return out

    def _ineligible(self, job: Job) -> Reason:
        """Why the job may not be considered yet, or ``Reason.NONE``."""
        now = self.now
        reason = Reason.NONE
        if job.hold == "admin" or self.snap.priority_overrides.get(job.job_id) == 0:
            reason = Reason.HELD_ADMIN
        elif job.hold:  # the controller sets it from --hold; release clears it
            reason = Reason.HELD_USER
        elif job.spec.begin_time is not None and job.spec.begin_time > now:
            reason = Reason.BEGIN_TIME
        elif job.spec.dependency:
            state = self.memo.deps.get(job) if self.memo is not None else None
            if state is None:
                if self._deps is None:  # indexed once per pass, and only when a job needs it
                    snap = self.snap
                    self._deps = DependencyIndex(snap.pending, snap.running, snap.finished, snap.arrays)
                state = self._deps.state(job, now)
                if self.memo is not None:
                    self.memo.deps.put(job, state, self.snap.arrays)
            if state is DepState.WAIT:
                reason = Reason.DEPENDENCY
            elif state is DepState.NEVER:
                reason = Reason.DEPENDENCY_NEVER
                self.d.never[job.job_id] = "Dependency can never be satisfied"
        if reason is Reason.NONE and job.array_throttle and job.array_job_id is not None:
            if self._room is None:
                self._room = self._array_room()
            left = self._room.get(job.array_job_id, job.array_throttle)
            if left <= 0:
                reason = Reason.JOB_ARRAY_TASK_LIMIT
            else:
                self._room[job.array_job_id] = left - 1
        return reason

    def _array_room(self) -> dict[int, int]:
        """For each throttled array with active tasks: how many more may start. Candidates
        count against it too, so one pass never starts more than the throttle allows."""
        room: dict[int, int] = {}
        for job in self.snap.running:
            if job.array_throttle and job.array_job_id is not None:
                key = job.array_job_id
                room[key] = room.get(key, job.array_throttle) - 1
        return room

    def _partitions_of(self, job: Job) -> tuple[str, ...]:
        """Where the job may run: the partitions it named (``-p a,b``, in its order),
        else the one the controller resolved, else the default partition."""
        names = job.spec.partitions
        if len(names) > 1:
            return tuple(names)
        name = names[0] if names else job.partition
        if not name:
            return self._default
        one = self._single.get(name)  # shared: no new tuple per job
        if one is None:
            one = self._single[name] = (name,)
        return one

    # -- 3. priority ----------------------------------------------------------------------
    def _prioritise(self, eligible: list[tuple[Job, tuple[str, ...]]]) -> list[tuple[Job, tuple[str, ...]]]:
        policy = PriorityPolicy(self.snap, self.now, self.config)
        pending = self.snap.pending
        values = policy.priorities(pending, self.parts, self.memo.priority if self.memo is not None else None)
        prio = self.d.priorities
        prio.update(zip([job.job_id for job in pending], values, strict=True))
        if len(eligible) == len(pending):  # none set aside: the same jobs in the same order
            jobs, parts = pending, self.parts
        else:
            jobs = [job for job, _ in eligible]
            parts = [where for _, where in eligible]
            values = [prio[job.job_id] for job in jobs]
        if parts and parts.count(parts[0]) == len(parts):  # usually one tuple for all
            tiers = [policy.tier(parts[0])] * len(parts)
        else:
            tier_of = {where: policy.tier(where) for where in set(parts)}  # a few distinct
            tiers = list(map(tier_of.__getitem__, parts))
        order = examination_order(tiers, values, jobs)
        if self.config.conservative and self.config.backfill:
            order = _replacement_order(order, jobs)
        if any(job.expedited for job in jobs):  # --requeue=expedite: first in the queue
            order = [i for i in order if jobs[i].expedited] + [i for i in order if not jobs[i].expedited]
        return list(map(eligible.__getitem__, order))

    # -- 4. placement ---------------------------------------------------------------------
    def _place(self, ordered: list[tuple[Job, tuple[str, ...]]]) -> None:
        config = self.config
        self.engine = Backfill(
            list(self.pool.values()), self.now, self.now + config.bf_window, self.book.maint, self.snap.topology
        )
        self.blocked = set()  # partitions with a blocked job
        self.singletons = set()  # (user, name) of singleton jobs started this pass
        self.plans_left = None if config.conservative else config.bf_max_job_test
        self.backfill = backfill = config.backfill
        blocked, reasons = self.blocked, self.d.reasons
        request, start_now = self.feas.request, self.engine.start_now
        examined = waiting = 0
        holds = self._hold_plans(ordered) if config.conservative and self.backfill else {}
        blocks = self._hold_nodes(ordered)
        hets = HetGroups(self.snap.pending, ordered)  # heterogeneous jobs: all or none
        for job, parts in ordered:
            if hets and job.het_job_id is not None:
                place_group(self, hets, job, holds)
                continue
            if holds:
                held = holds.pop(job.job_id, None)
                if held is not None:
                    self.engine.release(*held)
            if blocks and job.job_id in blocks:
                self._holder_turn(job, parts, blocks.pop(job.job_id))
                continue
            # Behind a blocked job of its only partition, with no plan left to give (EASY
            # past its first blocked job; sched/builtin always), a job can only start now
            # beside everything promised, or wait for Priority. Most of a long queue ends
            # here; the path is short, and decides exactly as _consider does.
            if (
                len(parts) == 1
                and parts[0] in blocked
                and (self.plans_left == 0 or not backfill)
                and not job.spec.dependency
            ):
                r = request(job, parts[0])
                if isinstance(r, Verdict):
                    self._refuse(job, [r])
                elif not backfill:
                    reasons[job.job_id] = _PRIORITY
                else:
                    examined += 1
                    nodes = start_now(*r)
                    if nodes is None:
                        waiting += 1
                        reasons[job.job_id] = _PRIORITY
                    else:
                        self._take(job, r[0], r[1], nodes)
                continue
            self._consider(job, parts)
        self.d.stats.examined += examined
        self.d.stats.blocked += waiting

    def _hold_nodes(self, ordered: list[tuple[Job, tuple[str, ...]]]) -> dict[int, list[NodeProfile]]:
        """Take what is free on each node held for a job (``preempt.hold_active``) out of
        the profile until that job's turn, for good: nobody placed before it may use it,
        not even in a plan after the hold's end (that would keep the holder off)."""
        blocks: dict[int, list[NodeProfile]] = {}
        waiting = self.preempting.waiting
        for job, _ in ordered:
            if job.held_nodes and hold_active(job, self.now, waiting):
                nodes = [self.pool[n] for n in job.held_nodes if n in self.pool]
                blocks[job.job_id] = nodes
                self._blocked[job.job_id] = self.engine.block(nodes, INF)
        return blocks

    def _holder_turn(self, job: Job, parts: tuple[str, ...], nodes: list[NodeProfile]) -> None:
        """A job holding nodes gets them back and starts on them first, then anywhere; if
        it still cannot start, it holds them again for the rest of the pass."""
        self.engine.unblock(self._blocked.pop(job.job_id), INF)
        before = len(self.d.starts)
        held = [n.name for n in nodes]
        for pname in parts:
            r = self.feas.request(job, pname)
            if isinstance(r, Verdict):
                continue
            req = held_request(r[0], held)
            found = self.engine.start_now(req, r[1]) if req is not None else None
            if req is not None and found is not None:
                self.d.stats.examined += 1
                self._take(job, req, r[1], found)
                return
        self._consider(job, parts)
        if len(self.d.starts) == before:  # held again, up to its planned start if it got one
            plan = self.d.plans.get(job.job_id)
            self.engine.block(nodes, plan.start_time if plan is not None else INF)

    def _hold_plans(
        self, ordered: list[tuple[Job, tuple[str, ...]]]
    ) -> dict[int, tuple[Request, float, float, list[NodeProfile]]]:
        """Conservative backfill: take each plan of the previous pass (``planned_start``
        and ``planned_nodes``, not yet overdue) out of the profile, in examination
        order, i.e. by planned start (``_replacement_order``). Each is given back just
        before its job is placed again: a job placed before it may move earlier but can
        take nothing of what it was promised, whichever nodes it picks."""
        holds: dict[int, tuple[Request, float, float, list[NodeProfile]]] = {}
        pool, engine, now = self.pool, self.engine, self.now
        for job, parts in ordered:
            at = job.planned_start
            if at is None:
                break  # planned jobs come first
            if at < now or not job.planned_nodes:
                continue  # overdue: a running job outlived its limit; nothing to keep
            nodes = [pool[name] for name in job.planned_nodes if name in pool]
            if len(nodes) != len(job.planned_nodes):
                continue  # a node left the cluster
            for pname in parts:
                r = self.feas.request(job, pname)
                if isinstance(r, Verdict):
                    continue
                if engine.hold(r[0], r[1], at, nodes):
                    holds[job.job_id] = (r[0], r[1], at, nodes)
                break
        return holds

    def _consider(self, job: Job, parts: tuple[str, ...]) -> None:
        # Runs for every eligible job of every pass, most of them deep in a queue that
        # cannot start: the path to "not now" is kept short.
        if len(parts) == 1:  # the common case, without the lists
            r = self.feas.request(job, parts[0])
            if isinstance(r, Verdict):
                self._refuse(job, [r])
                return
            requests: Sequence[tuple[Request, float]] = (r,)
        else:
            requests = self._requests(job, parts)
            if not requests:
                return
        d = self.d
        spec = job.spec
        singleton = False
        if spec.dependency:
            singleton = parse_dependency(spec.dependency).singleton
            if singleton and (job.user, spec.name) in self.singletons:
                d.reasons[job.job_id] = Reason.DEPENDENCY
                return
        blocked = self.blocked
        behind = False  # a higher-priority job of one of its partitions waits
        if blocked:
            for req, _ in requests:
                if req.partition in blocked:
                    behind = True
                    break
            if behind and not self.backfill:
                # sched/builtin: strict order inside a partition
                requests = [rd for rd in requests if rd[0].partition not in blocked]
                if not requests:
                    d.reasons[job.job_id] = _PRIORITY
                    return
        d.stats.examined += 1
        engine = self.engine
        for req, duration in requests:  # start now in the first partition where it fits
            nodes = engine.start_now(req, duration)
            if nodes is not None:
                self._take(job, req, duration, nodes)
                if singleton:
                    self.singletons.add((job.user, spec.name))
                return
        for req, _ in requests:
            blocked.add(req.partition)
        d.stats.blocked += 1
        if behind:
            d.reasons[job.job_id] = _PRIORITY
        elif engine.maint and any(engine.held_by_maintenance(r, dur) for r, dur in requests):
            d.reasons[job.job_id] = Reason.REQ_NODE_NOT_AVAIL
        else:
            d.reasons[job.job_id] = Reason.RESOURCES
        if self.backfill and self.plans_left != 0:
            if self.plans_left is not None:
                self.plans_left -= 1
            self._plan(job, requests)

    def _requests(self, job: Job, parts: tuple[str, ...]) -> list[tuple[Request, float]]:
        """The job's request in each partition where it may run, each with the job's time
        limit there; when there is none, the first partition's verdict becomes the job's
        reason."""
        answers = [self.feas.request(job, pname) for pname in parts]
        requests = [r for r in answers if not isinstance(r, Verdict)]
        if not requests:
            self._refuse(job, [r for r in answers if isinstance(r, Verdict)])
        return requests

    def _refuse(self, job: Job, verdicts: list[Verdict]) -> None:
        """The job may run in none of its partitions: the first verdict is its reason."""
        v = verdicts[0] if verdicts else _NO_PARTITION
        self.d.reasons[job.job_id] = v.reason
        if not any(x.later for x in verdicts):
            self.d.never[job.job_id] = v.message or str(v.reason)

    def _take(self, job: Job, req: Request, duration: float, nodes: list[NodeProfile]) -> None:
        """Start the job now on ``nodes``; it is backfilled when a higher-priority job of
        the partition waits."""
        alloc = self.engine.take_now(req, duration, nodes)
        behind = req.partition in self.blocked
        self.d.starts.append(Start(job.job_id, req.partition, alloc, behind))
        self.d.stats.started += 1
        self.d.stats.backfilled += behind

    def _plan(self, job: Job, requests: Sequence[tuple[Request, float]]) -> None:
        """Give the job its earliest start (over its partitions) and reserve it."""
        best: tuple[float, Request, float, list[NodeProfile]] | None = None
        for req, duration in requests:
            found = self.engine.earliest_start(req, duration)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], req, duration, found[1])
        if best is None:
            if all(r.reservation is not None for r, _ in requests):
                self.d.reasons[job.job_id] = Reason.RESERVATION  # does not fit its window
            return
        at, req, duration, nodes = best
        self.engine.take_plan(req, duration, at, nodes)
        self.d.plans[job.job_id] = Plan(at, [n.name for n in nodes])
        self.d.stats.planned += 1
        if req.reservation is not None and req.allowed and at >= req.allowed[0][0] > self.now:
            self.d.reasons[job.job_id] = Reason.RESERVATION  # waits for its window to open

    # -- 4b. preemption --------------------------------------------------------------------
    def _preempt(self, ordered: list[tuple[Job, tuple[str, ...]]]) -> None:
        """Jobs still waiting for Resources or Priority, in priority order, evict the
        running jobs they may preempt when that lets them start (``preempt``)."""
        p, d = self.preempting, self.d
        started = {s.job_id for s in d.starts}
        waiting = (Reason.RESOURCES, _PRIORITY)
        for job, parts in ordered:
            if job.job_id in started or d.reasons.get(job.job_id) not in waiting or job.het_job_id is not None:
                continue  # (a heterogeneous job's components start together: they preempt nobody)
            if hold_active(job, self.now, p.waiting) or not p.may_preempt_anyone(job):
                continue
            for pname in parts:
                r = self.feas.request(job, pname)
                if isinstance(r, Verdict):
                    continue
                found = p.plan(job, r[0], r[1])
                if found is not None:
                    nodes, victims = found
                    d.preemptions += p.commit(job, nodes, victims)
                    d.holds[job.job_id] = nodes
                    d.plans.pop(job.job_id, None)
                    break


def _replacement_order(order: list[int], jobs: Sequence[Job]) -> list[int]:
    """Conservative backfill's order: the jobs that hold a planned start from an earlier
    pass first, by that start (ties in priority order), then the others in priority order.

    Re-placed this way a job finds, at the latest, the start it was promised: the jobs
    placed before it were promised starts no later than its own and can only have moved
    earlier, so on a processor pool they hold no more of what it needs from its promised
    start on than they did. On nodes they might move onto its nodes: the holds
    (``_hold_plans``) keep them off. Only a running job that outlives its time limit can
    take it. In priority order, a job that arrived later but was planned into an earlier
    hole would be pushed back by an older job re-planned first."""
    planned = [i for i in order if jobs[i].planned_start is not None]
    if not planned:
        return order
    starts = {i: jobs[i].planned_start or 0.0 for i in planned}
    planned.sort(key=starts.__getitem__)
    return planned + [i for i in order if jobs[i].planned_start is None]
