"""The discrete-event engine: a trace replayed through the production scheduler.

Time is virtual. A heap holds events keyed ``(time, seq)`` (``seq`` grows with every push,
so equal times pop in the order they were pushed and nothing depends on set or dict order);
a ``ManualClock`` follows the heap. There are two kinds of event: a job arrives (its trace
submit time) and a running job ends (its start plus its actual run time, or its time limit
when it would run longer and overrun is not allowed: then it ends TIMEOUT, as a real
cluster kills it).

All events of one timestamp are applied first; then, once per timestamp, the engine does
what the controller's scheduling pass does (``ctld.app.CtldApp.run_pass``): build a
``Snapshot``, call ``sched.schedule(snapshot, now, config)``, copy priorities, reasons and
planned starts onto the pending jobs, and start each decided job through
``core.lifecycle.start``. Ends go through ``lifecycle.finish`` (or ``lifecycle.end`` with
TIMEOUT), as ``Controller.job_done`` does. Nothing here reads the wall clock.

Three things make this fast without changing a decision:

* the snapshot is kept, not rebuilt: the ``NodeView`` objects live for the whole run and
  their free resources are updated as jobs start and end; pending and running jobs are
  kept in insertion-ordered dicts;
* a pass is skipped when no pending job could start even ignoring every reservation and
  plan: a job needs ``nodes`` nodes of its partition, each with its per-node CPUs, memory
  and GPUs free now, and the scheduler starts only jobs that fit now, so such a pass could
  not start anything. Its other outputs (priorities, reasons, plans) are for display and
  are refreshed by the next pass that runs. Not under conservative backfill, whose next
  pass examines jobs in the order of the plans this one would have made;
* under FCFS a pass is given only the head of the queue that decides it (``_decide``).

What backfill believes a job will run (``Job.time_limit``) is chosen by ``Estimate``:
the user's request from the trace, the actual run time (an oracle), or K times it.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice

from muster.core import lifecycle
from muster.core.clock import ManualClock
from muster.core.job import Job, JobSpec, NodeAlloc
from muster.core.lifecycle import JobEvent
from muster.core.states import JobState
from muster.sched import Decisions, SchedConfig, Snapshot, Start, check_submit, schedule
from muster.sched.apply import apply_decisions
from muster.sched.decisions import Preemption
from muster.sched.memo import PassMemo
from muster.sim.cluster import Cluster, shape_for, spec_for
from muster.sim.failures import FailureModel, JobWork, NodeFailures
from muster.sim.policies import sjf_priority
from muster.sim.preemption import SimPreemptions
from muster.sim.traces import TraceJob

__all__ = ["Estimate", "JobOutcome", "SimResult", "Simulation", "replayable"]

_ARRIVE, _END, _FAIL, _REPAIR, _PREEMPT = 0, 1, 2, 3, 4
_EXPEDITE_HOLD = 300.0  # s an expedited job's surviving nodes wait for it (ExpediteHoldTime)
# How many jobs of the queue's head a strict-order pass looks at first (see ``_decide``).
_HEAD = 16


class Estimate:
    """What backfill believes a job will run: ``requested``, ``actual`` or ``KxActual``.

    ``requested`` falls back to the actual run time for a job whose trace gives no request
    (SWF ``-1``, or any GPU CSV), the usual practice in the literature.
    """

    _FACTOR_RE = re.compile(r"^(\d+(?:\.\d+)?)x(?:actual)?$", re.IGNORECASE)

    def __init__(self, kind: str, factor: float = 1.0) -> None:
        self.kind = kind
        self.factor = factor

    @classmethod
    def parse(cls, text: str) -> Estimate:
        t = text.strip().lower()
        if t in ("requested", "actual"):
            return cls(t)
        m = cls._FACTOR_RE.match(t)
        if m and float(m.group(1)) > 0:
            return cls("factor", float(m.group(1)))
        raise ValueError(f"invalid estimate {text!r}: use requested, actual or KxActual (e.g. 2xActual)")

    def limit(self, job: TraceJob) -> int:
        """The job's time limit in whole seconds (at least 1)."""
        if self.kind == "requested" and job.estimate is not None:
            seconds = job.estimate
        elif self.kind == "factor":
            seconds = self.factor * job.run
        else:
            seconds = job.run
        return max(1, math.ceil(seconds))

    def __str__(self) -> str:
        return f"{self.factor:g}xActual" if self.kind == "factor" else self.kind


@dataclass(slots=True)
class JobOutcome:
    """What happened to one replayed job (times in trace seconds, from the trace's zero)."""

    job_id: int
    trace_id: str
    size: int
    submit: float
    start: float
    end: float
    time_limit: int
    killed: bool = False
    backfilled: bool = False
    nodes: tuple[str, ...] = ()
    first_plan: float | None = None  # the first planned start a pass gave it, if any
    earliest_plan: float | None = None  # the earliest planned start any pass gave it
    restarts: int = 0  # attempts ended by a node failure (``failures``)

    @property
    def wait(self) -> float:
        return self.start - self.submit

    @property
    def run(self) -> float:
        return self.end - self.start


@dataclass(slots=True)
class SimResult:
    label: str
    unit: str
    capacity: int
    outcomes: list[JobOutcome]
    passes: int = 0
    skipped_passes: int = 0
    never_started: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    # Preemption (when configured): runs preempted, and work lost in unit-hours (sim.preemption)
    preemptions: int = 0
    preempted_lost_hours: float = 0.0


ProgressFn = Callable[[int, int, float], None]


def replayable(
    jobs: list[TraceJob],
    unit: str,
    cluster: Cluster,
    estimate: Estimate,
    enforce_part_limits: str = "NO",
) -> tuple[list[TraceJob], Counter[str]]:
    """The jobs the controller would accept and that could run on this machine, and why
    the others are left out (message -> count).

    Each job goes through ``sched.check_submit``, the check ``Controller.submit`` makes;
    then through ``Cluster.fits``, which also leaves out nodes configured DOWN or DRAIN
    (a replay never brings them back)."""
    kept: list[TraceJob] = []
    refused: Counter[str] = Counter()
    access = any(
        p.allow_accounts is not None or p.deny_accounts is not None or p.allow_groups is not None
        for p in cluster.partitions.values()
    )
    memo: dict[tuple[object, ...], str | None] = {}
    for tj in jobs:
        spec = spec_for(tj.size, unit, cluster)
        spec.time_limit = estimate.limit(tj)
        shape = shape_for(spec, cluster)
        group = "group" if tj.group is None else f"g{tj.group}"
        key = (
            shape.nodes,
            shape.cpus_per_node,
            shape.mem_per_node,
            shape.gpus_per_node,
            spec.time_limit if enforce_part_limits != "NO" else None,
            group if access else None,
        )
        if key not in memo:
            rejection = check_submit(
                spec, shape, cluster.partitions, cluster.nodes, group=group, enforce_part_limits=enforce_part_limits
            )
            if rejection is not None:
                memo[key] = rejection.message
            elif not cluster.fits(shape):
                memo[key] = "more nodes than the cluster has up (it would pend for ever)"
            else:
                memo[key] = None
        why = memo[key]
        if why is None:
            kept.append(tj)
        else:
            refused[why] += 1
    return kept, refused


class Simulation:
    """One replay of ``jobs`` on ``cluster`` under ``config``. Call ``run`` once.

    The cluster's ``NodeView`` objects are updated in place during the replay (and are idle
    again at its end); give each ``Simulation`` its own cluster."""

    def __init__(
        self,
        jobs: list[TraceJob],
        unit: str,
        cluster: Cluster,
        config: SchedConfig,
        *,
        estimate: Estimate | None = None,
        allow_overrun: bool = False,
        epoch: float = 0.0,
        label: str = "",
        skip_idle_passes: bool = True,
        order: str = "fifo",
        progress: ProgressFn | None = None,
        failures: FailureModel | None = None,
    ) -> None:
        self.unit = unit
        self.cluster = cluster
        self.config = config
        self.sched_memo = PassMemo()  # kept between passes, as the controller keeps its own
        self.estimate = estimate or Estimate("requested")
        self.allow_overrun = allow_overrun
        self.epoch = epoch
        self.label = label
        # Under conservative backfill a pass re-places every plan, and the next pass
        # examines jobs in the order of those plans: a pass that starts nothing still
        # counts, so none is skipped. Nor under preemption, which starts jobs idle resources could not hold.
        self.skip_idle_passes = skip_idle_passes and not config.conservative and config.preempt_type == "preempt/none"
        self.progress = progress
        # Job ids follow submission order, as the controller numbers them (stable for ties).
        self.trace_jobs = jobs = sorted(jobs, key=lambda j: j.submit)
        self.jobs: list[Job] = [self._make_job(i, tj) for i, tj in enumerate(jobs)]
        self._nodes = {v.name: v for v in cluster.nodes}
        self._pending: dict[int, Job] = {}
        self._running: dict[int, Job] = {}
        self._finished: dict[int, str] = {}
        # Per-node need (CPUs, memory, GPUs) and node count of pending jobs -> how many
        # jobs: the skip test looks at these few distinct shapes, not at every job.
        self._pending_shapes: Counter[tuple[int, int, int, int]] = Counter()
        self._part_nodes = cluster.partition_nodes()
        self.planned: set[int] = set()  # jobs carrying a planned start (``sched.apply``)
        self._first_plan: dict[int, float] = {}  # job id -> the first planned start it got
        self._earliest_plan: dict[int, float] = {}  # job id -> the earliest one
        # order="sjf": admin priorities (``scontrol update job priority=``) by time limit,
        # set at submission; the snapshot carries those of pending jobs, as ctld.view does.
        if order not in ("fifo", "sjf"):
            raise ValueError(f"unknown job order {order!r}")
        self.order = order
        self._overrides: dict[int, int] = {}
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self.clock = ManualClock(epoch + (jobs[0].submit if jobs else 0.0))
        self.outcomes: list[JobOutcome | None] = [None] * len(jobs)
        self._backfilled: set[int] = set()
        self._killed: set[int] = set()
        self.passes = 0
        self.skipped_passes = 0
        self._preemption = SimPreemptions()
        self.head_retries = 0
        # fcfs: examined in the order of ``_pending`` and nothing passes a blocked job of
        # the partition, which is every job's (``_make_job``: the default partition).
        self._strict_order = not config.backfill and not config.multifactor and order == "fifo"
        # Failures (``sim.failures``): nodes fail and come back; interrupted jobs requeue,
        # which puts older jobs behind newer ones in ``_pending``: no head-only passes.
        self.failures = failures
        self.work = [JobWork(tj.run, tj.size) for tj in jobs] if failures else []
        self.node_failures = NodeFailures(failures) if failures else None
        self._ends: dict[int, float] = {}  # job index -> when its running attempt ends
        self._began: dict[int, float] = {}  # job index -> when its running attempt began
        self._arrivals_left = len(jobs)
        if failures:
            self._strict_order = False
        # Spares (``FailureModel.spares``): the last nodes of the machine are held out of
        # scheduling; a failed node under a running job is swapped for one of them in place.
        self._pool: list[int] = []
        self.replacements = 0
        self.recoveries: list[float] = []  # per interruption: failure -> running again, restart overhead aside
        if failures and failures.spares:
            if failures.spares >= len(cluster.nodes):
                raise ValueError(f"{failures.spares} spares leave no node of the {len(cluster.nodes)} to schedule on")
            self._pool = list(range(len(cluster.nodes) - failures.spares, len(cluster.nodes)))
            for i in self._pool:
                cluster.nodes[i].available = False

    # -- building jobs ------------------------------------------------------------------

    def _make_job(self, index: int, tj: TraceJob) -> Job:
        limit = self.estimate.limit(tj)
        spec: JobSpec = spec_for(tj.size, self.unit, self.cluster)
        spec.name = f"trace{tj.trace_id}"
        spec.time_limit = limit
        user = "user" if tj.user is None else f"u{tj.user}"
        group = "group" if tj.group is None else f"g{tj.group}"
        submit = self.epoch + tj.submit
        return Job(
            job_id=index + 1,  # in submission order, as the controller numbers them
            spec=spec,
            shape=shape_for(spec, self.cluster),
            user=user,
            uid=1000 + (tj.user or 0),
            group=group,
            gid=1000 + (tj.group or 0),
            submit_time=submit,
            partition=self.cluster.default_partition,
            time_limit=limit,
            eligible_time=submit,
        )

    # -- the event loop -------------------------------------------------------------------

    def _push(self, when: float, kind: int, index: int) -> None:
        heapq.heappush(self._heap, (when, self._seq, kind, index))
        self._seq += 1

    def run(self) -> SimResult:
        for i, job in enumerate(self.jobs):
            self._push(job.submit_time, _ARRIVE, i)
        if self.node_failures is not None:
            for i in range(len(self.cluster.nodes)):
                self._push(self.clock.now() + self.node_failures.next_gap(), _FAIL, i)
        total = len(self.jobs)
        done = 0
        step = max(1, total // 200)
        heap = self._heap
        while heap and self._open():
            now = heap[0][0]
            self.clock.set(now)
            while heap and heap[0][0] == now:
                _, _, kind, index = heapq.heappop(heap)
                if kind == _ARRIVE:
                    self._arrivals_left -= 1
                    self._arrive(self.jobs[index])
                elif kind == _END:
                    if not self._end(index, now):
                        continue  # the end of an attempt a node failure or a preemption cut short
                    done += 1
                    if self.progress is not None and done % step == 0:
                        self.progress(done, total, now - self.epoch)
                elif kind == _FAIL:
                    self._fail(index, now)
                elif kind == _PREEMPT:
                    done += self._preempted(index, now)
                else:
                    self._repaired(index)
                    assert self.node_failures is not None
                    self._push(now + self.node_failures.next_gap(), _FAIL, index)
            if self._pending:
                if not self.skip_idle_passes or self._something_fits():
                    self._pass(now)
                else:
                    self.skipped_passes += 1
        if self.progress is not None:
            self.progress(done, total, self.clock.now() - self.epoch)
        never = [self.trace_jobs[j.job_id - 1].trace_id for j in self._pending.values()]
        return SimResult(
            label=self.label,
            unit=self.unit,
            capacity=self.cluster.capacity(self.unit),
            outcomes=[o for o in self.outcomes if o is not None],
            passes=self.passes,
            skipped_passes=self.skipped_passes,
            never_started=never,
            preemptions=self._preemption.count,
            preempted_lost_hours=self._preemption.lost_hours,
        )

    def _open(self) -> bool:
        """Whether the replay goes on. Without failures: while events are left. With them
        (whose stream never ends): while jobs are to arrive or run, or wait for a node that
        is down."""
        if self.node_failures is None:
            return True
        if self._arrivals_left or self._running:
            return True
        pool = self._pool  # spares standing by are unavailable by design, not down
        return bool(self._pending) and not all(v.available for k, v in enumerate(self.cluster.nodes) if k not in pool)

    def _fail(self, index: int, now: float) -> None:
        """Node ``index`` fails: out of service for the repair time; the attempts of the
        jobs on it end NODE_FAIL and requeue, keeping what their checkpoints saved."""
        view = self.cluster.nodes[index]
        model, stream = self.failures, self.node_failures
        assert model is not None and stream is not None
        stream.cause()
        view.available = False
        if index in self._pool:  # an idle spare failed: out of the pool until repaired
            self._pool.remove(index)
        for job in [j for j in self._running.values() if view.name in j.nodes]:
            i = job.job_id - 1
            assert job.start_time is not None
            self.work[i].interrupt(now - self._began.get(i, job.start_time))
            if self._replace(job, view.name, now):
                self.recoveries.append(0.0)
                continue
            self.work[i].failed_at = now
            self._ends.pop(i, None)
            self._killed.discard(job.job_id)
            lifecycle.end(job, JobEvent.NODE_FAIL, now, completing=False)
            del self._running[job.job_id]
            self._release(job.alloc)
            held = [a.node for a in job.alloc if a.node != view.name]
            lifecycle.requeue(job, now, outcome="NODE_FAIL")
            if model.expedite:  # first in the queue, its surviving nodes held (sched.preempt), as ctld does
                lifecycle.hold_nodes(job, held, now + _EXPEDITE_HOLD, now, expedite=True)
            self._arrive(job)
        self._push(now + model.repair, _REPAIR, index)

    def _replace(self, job: Job, failed: str, now: float) -> bool:
        """Swap the failed node of a running job for a spare of the pool, if one can hold
        its share; the job restarts there from its checkpoint, without a requeue."""
        k = next(k for k, a in enumerate(job.alloc) if a.node == failed)
        a = job.alloc[k]
        for spare in self._pool:
            view = self.cluster.nodes[spare]
            if view.free_cpus >= a.cpus and view.free_mem >= a.mem and set(a.gpu_ids) <= set(view.free_gpu_ids):
                break
        else:
            return False
        self._pool.remove(spare)
        view.available = True  # in service from now on; the failed node refills the pool once repaired
        self._release([a])
        job.alloc[k] = NodeAlloc(view.name, a.cpus, a.mem, list(a.gpu_ids))
        taken = set(a.gpu_ids)
        view.free_cpus -= a.cpus
        view.free_mem -= a.mem
        view.free_gpu_ids = [g for g in view.free_gpu_ids if g not in taken]
        view.running_jobs += 1
        self.replacements += 1
        i = job.job_id - 1
        assert self.failures is not None
        run = self.work[i].begin(self.failures)
        if job.job_id in self._killed and job.time_limit is not None:
            run = min(run, job.time_limit)
        self._began[i] = now
        self._ends[i] = now + run
        self._push(now + run, _END, i)
        return True

    def _repaired(self, index: int) -> None:
        """A node is back from repair: it refills the pool of spares, or returns to service."""
        model = self.failures
        if model is not None and len(self._pool) < model.spares:
            self._pool.append(index)
            return
        self.cluster.nodes[index].available = True

    @staticmethod
    def _shape_key(job: Job) -> tuple[int, int, int, int]:
        s = job.shape
        return (s.cpus_per_node, s.mem_per_node, s.gpus_per_node, s.nodes)

    def _arrive(self, job: Job) -> None:
        if self.order == "sjf" and job.job_id not in self._overrides:
            job.admin_priority = job.priority = sjf_priority(job.time_limit)
            self._overrides[job.job_id] = job.admin_priority
        self._pending[job.job_id] = job
        self._pending_shapes[self._shape_key(job)] += 1

    def _something_fits(self) -> bool:
        """Whether some pending job has enough nodes with its per-node need free now."""
        fewest: dict[tuple[int, int, int], int] = {}
        for c, m, g, n in self._pending_shapes:
            per_node = (c, m, g)
            if n < fewest.get(per_node, n + 1):
                fewest[per_node] = n
        nodes = self._part_nodes
        for (c, m, g), n in fewest.items():
            able = 0
            for v in nodes:
                if v.available and v.free_cpus >= c and v.free_mem >= m and len(v.free_gpu_ids) >= g:
                    able += 1
                    if able >= n:
                        return True
        return False

    # -- one pass, applied as the controller applies it ------------------------------------

    def _decide(self, now: float) -> Decisions:
        """One ``sched.schedule`` call over the queue, or over the head of it that decides.

        Under ``sched/builtin`` with FIFO priorities (``fcfs``) the queue is examined in
        submission order, which is the order of ``_pending``, and every job of the one
        partition waits behind the first blocked one; a job's decision depends only on the
        jobs before it. So a pass over the first K jobs that blocks one of them
        (``stats.blocked``) starts exactly what a pass over the whole queue starts; when
        none of the K blocks, the pass is run again over twice as many. A pass then costs
        what it starts, not the length of the queue. The jobs beyond the head keep the
        priority and reason of the last pass that saw them (both are for display)."""
        running = list(self._running.values())
        pending = self._pending
        head = _HEAD if self._strict_order else len(pending)
        while True:
            if head >= len(pending):
                jobs = list(pending.values())
            else:
                jobs = list(islice(pending.values(), head))
            snapshot = Snapshot(
                nodes=self.cluster.nodes,
                partitions=self.cluster.partitions,
                pending=jobs,
                running=running,
                finished=self._finished,
                priority_overrides=self._overrides,
                topology=self.cluster.topology,
            )
            decisions = schedule(snapshot, now, self.config, memo=self.sched_memo)
            if len(jobs) == len(pending) or decisions.stats.blocked:
                return decisions
            self.head_retries += 1
            head *= 2

    def _pass(self, now: float) -> None:
        decisions = self._decide(now)
        self.passes += 1
        # The engine is its own ``Book``: the same function applies the controller's passes.
        apply_decisions(decisions, self, now)
        self._note_plans(decisions)

    @property
    def waiting(self) -> dict[int, Job]:
        """The pending jobs, by id (``sched.apply.Book``)."""
        return self._pending

    def start(self, starts: list[Start], now: float) -> None:
        """Start each job still pending and book its end on the virtual clock."""
        for start in starts:
            job = self._pending.get(start.job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            lifecycle.start(job, start.alloc, now, scheduler="Backfill" if start.backfilled else "Main")
            job.partition = start.partition
            self._hold(job)
            if start.backfilled:
                self._backfilled.add(job.job_id)
            index = job.job_id - 1
            run = self.trace_jobs[index].run
            limit = job.time_limit
            killed = not self.allow_overrun and limit is not None and run > limit
            if self.failures is not None:
                # The attempt's wall time: the work left and the overheads of checkpoints and
                # restarts, which the model does not count against the time limit.
                work = self.work[index]
                run = work.begin(self.failures)
                self._began[index] = now
                if work.failed_at is not None:  # started again after a failure's requeue
                    work.waited += now - work.failed_at
                    self.recoveries.append(now - work.failed_at)
                    work.failed_at = None
            if killed:
                assert limit is not None
                self._killed.add(job.job_id)
                run = min(run, limit)
            self._ends[index] = now + run
            self._push(now + run, _END, index)

    def preempt(self, preemptions: list[Preemption], holds: dict[int, list[str]], now: float) -> None:
        at = self._push  # victims end when their grace time is over (``_preempted``, ``sim.preemption``)
        self._preemption.book(preemptions, holds, self._running, self._pending, now, lambda t, i: at(t, _PREEMPT, i))

    def _preempted(self, index: int, now: float) -> int:
        """A victim's grace time is over: requeued or cancelled; 1 when the job is done."""
        job = self.jobs[index]
        work = self.work[index] if self.failures is not None else None
        mode = self._preemption.end(job, now, self.trace_jobs[index].size, work)
        if mode is None:
            return 0
        self._ends.pop(index, None)
        self._killed.discard(job.job_id)
        del self._running[job.job_id]
        self._release(job.alloc)
        if mode == "REQUEUE":
            lifecycle.requeue(job, now, outcome="PREEMPTED")
            self._arrive(job)
            return 0
        lifecycle.end(job, JobEvent.PREEMPT, now, completing=False)
        self._finished[job.job_id] = str(job.state)
        self._record(index, job, now, killed=True)
        return 1

    def _note_plans(self, decisions: Decisions) -> None:
        """Each job's first and earliest planned start, for the promise metrics."""
        first, earliest = self._first_plan, self._earliest_plan
        for job_id, plan in decisions.plans.items():
            at = plan.start_time
            if job_id not in first:
                first[job_id] = earliest[job_id] = at
            elif at < earliest[job_id]:
                earliest[job_id] = at

    # -- resources ---------------------------------------------------------------------------

    def _hold(self, job: Job) -> None:
        del self._pending[job.job_id]
        self._overrides.pop(job.job_id, None)
        key = self._shape_key(job)
        self._pending_shapes[key] -= 1
        if not self._pending_shapes[key]:
            del self._pending_shapes[key]
        self._running[job.job_id] = job
        for a in job.alloc:
            view = self._nodes[a.node]
            view.free_cpus -= a.cpus
            view.free_mem -= a.mem
            if a.gpu_ids:
                taken = set(a.gpu_ids)
                view.free_gpu_ids = [g for g in view.free_gpu_ids if g not in taken]
            view.running_jobs += 1

    def _release(self, alloc: list[NodeAlloc]) -> None:
        for a in alloc:
            view = self._nodes[a.node]
            view.free_cpus += a.cpus
            view.free_mem += a.mem
            if a.gpu_ids:
                view.free_gpu_ids = sorted(view.free_gpu_ids + list(a.gpu_ids))
            view.running_jobs -= 1

    def _end(self, index: int, now: float) -> bool:
        """The job's attempt ends as booked; False for an end event of an attempt that a
        node failure cut short (nothing happens)."""
        if self._ends.get(index) != now:
            return False
        del self._ends[index]
        job = self.jobs[index]
        tj = self.trace_jobs[index]
        if self.failures is not None:
            assert job.start_time is not None
            self.work[index].finish(now - self._began.pop(index, job.start_time))
        killed = job.job_id in self._killed
        if killed:
            lifecycle.end(job, JobEvent.TIMEOUT, now, completing=False)
            lifecycle.cleaned(job, 0, 9)
        else:
            failed = tj.status is not None and tj.status not in (1, -1)
            lifecycle.finish(job, 1 if failed else 0, 0, now)
        del self._running[job.job_id]
        self._release(job.alloc)
        self._finished[job.job_id] = str(job.state)
        self._record(index, job, now, killed=killed)
        return True

    def _record(self, index: int, job: Job, now: float, killed: bool) -> None:
        tj = self.trace_jobs[index]
        assert job.start_time is not None
        first = self._first_plan.pop(job.job_id, None)
        best = self._earliest_plan.pop(job.job_id, None)
        self.outcomes[index] = JobOutcome(
            job_id=job.job_id,
            trace_id=tj.trace_id,
            size=tj.size,
            submit=job.submit_time - self.epoch,
            start=job.start_time - self.epoch,
            end=now - self.epoch,
            time_limit=job.time_limit or 0,
            killed=killed,
            backfilled=job.job_id in self._backfilled,
            nodes=tuple(job.nodes),
            first_plan=None if first is None else first - self.epoch,
            earliest_plan=None if best is None else best - self.epoch,
            restarts=job.restart_count,
        )
