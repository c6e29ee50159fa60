"""A harness and fluent builders for testing the scheduler (and anything that calls it).

Like Nomad's ``scheduler/testing.go`` this lives next to the code it exercises, so the
controller's and the simulator's tests can reuse it. It is pure: building a cluster,
running a pass at a given time and checking invariants on the result::

    h = SchedHarness().gpu_nodes(4, gpus=8)
    a = h.run_job(job().nodes(2).gpus(8).time("10:00"), at=0)
    b = h.submit(job().nodes(4).gpus(8).time("1:00:00"), at=1)
    d = h.schedule(at=2)
    assert d.reasons[b] is Reason.RESOURCES

Every ``schedule`` call checks the invariants that must hold for any decision (see
``check_invariants``) and raises ``AssertionError`` naming the broken one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from muster.core import lifecycle
from muster.core.job import Job, JobSpec, NodeAlloc, Shape
from muster.core.states import JobState
from muster.core.timefmt import parse_time_limit
from muster.core.topoconf import parse_topology
from muster.sched.config import SchedConfig
from muster.sched.cycle import schedule
from muster.sched.decisions import Decisions
from muster.sched.snapshot import NodeView, PartitionView, QosPreempt, ReservationView, Snapshot
from muster.sched.topology import Topology

__all__ = ["JobBuilder", "NodeBuilder", "SchedHarness", "check_invariants", "job", "node"]


# The event that ends a running job in each final state ``SchedHarness.finish`` is given.
_END_EVENTS = {
    JobState.COMPLETED: lifecycle.JobEvent.COMPLETE,
    JobState.FAILED: lifecycle.JobEvent.FAIL,
    JobState.CANCELLED: lifecycle.JobEvent.CANCEL,
    JobState.TIMEOUT: lifecycle.JobEvent.TIMEOUT,
    JobState.NODE_FAIL: lifecycle.JobEvent.NODE_FAIL,
    JobState.OUT_OF_MEMORY: lifecycle.JobEvent.OUT_OF_MEMORY,
    JobState.PREEMPTED: lifecycle.JobEvent.PREEMPT,
}


def _duration(text: str | int | None) -> int | None:
    """``"10:00"`` -> 600, ``"1:00:00"`` -> 3600, ``"2-0"`` -> 172800, int seconds as is."""
    if text is None or isinstance(text, int):
        return text
    return parse_time_limit(text)


class JobBuilder:
    """``job().nodes(2).gpus(8).time("10:00").partition("gpu")``: a pending job."""

    def __init__(self) -> None:
        self._spec = JobSpec()
        self._shape = Shape()
        self._user = "alice"
        self._submit: float | None = None
        self._priority: int | None = None
        self._hold: str | None = None
        self._id: int | None = None

    def switches(self, count: int, wait: int | None = None) -> JobBuilder:
        """``--switches=count[@wait]`` (wait in seconds)."""
        self._spec.switches, self._spec.switch_wait = count, wait
        return self

    def exclusive_topo(self) -> JobBuilder:
        """``--exclusive=topo``."""
        self._spec.exclusive = self._shape.exclusive = self._spec.exclusive_topo = True
        return self

    def segment(self, size: int) -> JobBuilder:
        self._spec.segment = size
        return self

    def id(self, job_id: int) -> JobBuilder:
        self._id = job_id
        return self

    def nodes(self, n: int) -> JobBuilder:
        self._shape.nodes = n
        self._spec.min_nodes = n
        return self

    def cpus(self, per_node: int) -> JobBuilder:
        self._shape.cpus_per_node = per_node
        return self

    def mem(self, per_node_mb: int) -> JobBuilder:
        self._shape.mem_per_node = per_node_mb
        self._spec.mem_per_node = per_node_mb
        return self

    def gpus(self, a: int | str, b: int | None = None) -> JobBuilder:
        """``gpus(8)`` or ``gpus("a100", 8)``: GPUs per node."""
        if isinstance(a, str):
            self._shape.gpu_type = self._spec.gpu_type = a
            count = b if b is not None else 1
        else:
            count = a
        self._shape.gpus_per_node = self._spec.gpus_per_node = count
        return self

    def time(self, limit: str | int | None) -> JobBuilder:
        self._spec.time_limit = _duration(limit)
        return self

    def partition(self, *names: str) -> JobBuilder:
        self._spec.partitions = list(names)
        return self

    def exclusive(self) -> JobBuilder:
        self._shape.exclusive = self._spec.exclusive = True
        return self

    def nodelist(self, *names: str) -> JobBuilder:
        self._spec.nodelist = list(names)
        return self

    def exclude(self, *names: str) -> JobBuilder:
        self._spec.exclude = list(names)
        return self

    def constraint(self, expr: str) -> JobBuilder:
        self._spec.constraint = expr
        return self

    def reservation(self, name: str) -> JobBuilder:
        self._spec.reservation = name
        return self

    def begin(self, at: float) -> JobBuilder:
        self._spec.begin_time = at
        return self

    def held(self, by: str = "user") -> JobBuilder:
        self._hold = by
        return self

    def depends(self, expr: str) -> JobBuilder:
        self._spec.dependency = expr
        return self

    def user(self, name: str, account: str | None = None) -> JobBuilder:
        self._user = name
        self._spec.account = account
        return self

    def account(self, name: str) -> JobBuilder:
        self._spec.account = name
        return self

    def qos(self, name: str) -> JobBuilder:
        self._spec.qos = name
        return self

    def nice(self, value: int) -> JobBuilder:
        self._spec.nice = value
        return self

    def named(self, name: str) -> JobBuilder:
        self._spec.name = name
        return self

    def priority(self, value: int) -> JobBuilder:
        """A priority already on the job record (the scheduler recomputes multifactor)."""
        self._priority = value
        return self

    def submitted(self, at: float) -> JobBuilder:
        self._submit = at
        return self

    def build(self, job_id: int, submit_time: float, default_partition: str) -> Job:
        spec = dataclasses.replace(self._spec, partitions=list(self._spec.partitions))
        shape = dataclasses.replace(self._shape)
        j = Job(
            job_id=self._id if self._id is not None else job_id,
            spec=spec,
            shape=shape,
            user=self._user,
            uid=1000,
            group=self._user,
            gid=1000,
            submit_time=self._submit if self._submit is not None else submit_time,
            partition=(spec.partitions[0] if spec.partitions else default_partition),
            time_limit=spec.time_limit,
            hold=self._hold,
        )
        if self._priority is not None:
            j.priority = self._priority
        return j


def job() -> JobBuilder:
    return JobBuilder()


class NodeBuilder:
    """``node("gpu1").cpus(64).mem(512000).gpus("a100", 8).features("ib")``."""

    def __init__(self, name: str) -> None:
        self._view = NodeView(name=name, index=0, cpus=64, mem=512_000, gpus=0)

    def cpus(self, n: int) -> NodeBuilder:
        self._view.cpus = n
        return self

    def mem(self, mb: int) -> NodeBuilder:
        self._view.mem = mb
        return self

    def gpus(self, a: int | str, b: int | None = None) -> NodeBuilder:
        if isinstance(a, str):
            self._view.gpu_type = a
            self._view.gpus = b if b is not None else 1
        else:
            self._view.gpus = a
        return self

    def features(self, *names: str) -> NodeBuilder:
        self._view.features = tuple(names)
        return self

    def weight(self, w: int) -> NodeBuilder:
        self._view.weight = w
        return self

    def switch(self, name: str) -> NodeBuilder:
        self._view.switch = name
        return self

    def down(self) -> NodeBuilder:
        self._view.available = False
        return self

    def build(self, index: int) -> NodeView:
        v = dataclasses.replace(self._view, index=index, features=tuple(self._view.features))
        v.free_cpus, v.free_mem = v.cpus, v.mem
        v.free_gpu_ids = list(range(v.gpus))
        v.running_jobs = 0
        return v


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


class SchedHarness:
    """A small in-memory cluster that applies the scheduler's starts, so tests read as a
    story: add nodes, submit jobs, run passes at given times, finish jobs."""

    def __init__(self, config: SchedConfig | None = None) -> None:
        self.config = config or SchedConfig()
        self.nodes: list[NodeView] = []
        self.partitions: dict[str, PartitionView] = {}
        self.reservations: list[ReservationView] = []
        self.pending: dict[int, Job] = {}
        self.running: dict[int, Job] = {}
        self.finished: dict[int, str] = {}
        self.fairshare: dict[str, float] = {}
        self.qos_priority: dict[str, int] = {}
        self.priority_overrides: dict[int, int] = {}
        self.arrays: dict[int, dict[int, int]] = {}
        self.topology: Topology | None = None
        self.qos_preempt: dict[str, QosPreempt] = {}
        self.next_id = 1
        self.last: Decisions | None = None
        self.history: list[Decisions] = []

    # -- cluster --------------------------------------------------------------------
    def add_node(self, builder: NodeBuilder, partitions: Iterable[str] = ("main",)) -> NodeView:
        v = builder.build(len(self.nodes))
        self.nodes.append(v)
        for p in partitions:
            part = self.partitions.get(p)
            if part is None:
                part = self.partitions[p] = PartitionView(name=p, nodes=(), is_default=not self.partitions)
            part.nodes = part.nodes + (v.name,)
        return v

    def gpu_nodes(
        self,
        count: int,
        gpus: int = 8,
        gpu_type: str | None = None,
        cpus: int = 64,
        mem: int = 512_000,
        prefix: str = "gpu",
        partitions: Iterable[str] = ("main",),
        features: tuple[str, ...] = (),
    ) -> SchedHarness:
        start = len(self.nodes)
        for i in range(count):
            b = node(f"{prefix}{start + i + 1}").cpus(cpus).mem(mem).features(*features)
            b = b.gpus(gpu_type, gpus) if gpu_type else b.gpus(gpus)
            self.add_node(b, partitions)
        return self

    def topology_conf(self, text: str) -> SchedHarness:
        """The network topology, as topology.conf text, over the nodes added so far."""
        names = [v.name for v in self.nodes]
        self.topology = Topology(parse_topology(text, "topology.conf", names), names)
        return self

    def partition(self, name: str, **changes: object) -> PartitionView:
        part = self.partitions[name]
        for k, v in changes.items():
            setattr(part, k, v)
        return part

    def reserve(self, res: ReservationView) -> SchedHarness:
        self.reservations.append(res)
        return self

    def node_named(self, name: str) -> NodeView:
        for v in self.nodes:
            if v.name == name:
                return v
        raise KeyError(name)

    # -- jobs -----------------------------------------------------------------------
    def submit(self, builder: JobBuilder, at: float = 0.0) -> int:
        default = next((p.name for p in self.partitions.values() if p.is_default), "main")
        j = builder.build(self.next_id, at, default)
        self.next_id = max(self.next_id, j.job_id) + 1
        self.pending[j.job_id] = j
        return j.job_id

    def submit_array(
        self, builder: JobBuilder, indices: Iterable[int], throttle: int = 0, at: float = 0.0
    ) -> list[int]:
        """Submit a job array: one job per task, consecutive ids from the array job id
        (the first task's), as the controller does."""
        ids: list[int] = []
        tasks = sorted(indices)
        for index in tasks:
            job_id = self.submit(builder, at)
            j = self.pending[job_id]
            j.array_job_id = ids[0] if ids else job_id
            j.array_task_id = index
            j.array_throttle = throttle
            ids.append(job_id)
        self.arrays[ids[0]] = dict(zip(tasks, ids, strict=True))
        return ids

    def submit_het(self, *builders: JobBuilder, at: float = 0.0) -> list[int]:
        """Submit a heterogeneous job: one job per component, consecutive ids from the
        leader's (the first component's), as the controller does."""
        ids: list[int] = []
        for k, builder in enumerate(builders):
            job_id = self.submit(builder, at)
            j = self.pending[job_id]
            j.het_job_id = ids[0] if ids else job_id
            j.het_job_offset = k
            ids.append(job_id)
        return ids

    def run_job(self, builder: JobBuilder, at: float = 0.0) -> int:
        """Submit a job and start it at ``at`` through a scheduling pass; fails if it
        does not start."""
        job_id = self.submit(builder, at)
        d = self.schedule(at)
        assert any(s.job_id == job_id for s in d.starts), f"job {job_id} did not start"
        return job_id

    def finish(self, job_id: int, state: str = "COMPLETED") -> None:
        """A running job ends in ``state`` (asked of ``core.lifecycle``, as the controller
        asks it) and leaves its nodes."""
        j = self.running.pop(job_id)
        for a in j.alloc:
            v = self.node_named(a.node)
            v.free_cpus += a.cpus
            v.free_mem += a.mem
            v.free_gpu_ids = sorted(v.free_gpu_ids + a.gpu_ids)
            v.running_jobs -= 1
        now = j.start_time or 0.0  # the harness keeps no clock between passes
        lifecycle.apply(j, lifecycle.Change(_END_EVENTS[JobState(state)], exit_code=0, signal=0), now)
        self.finished[job_id] = state

    def requeue(self, job_id: int) -> None:
        """A running job leaves its nodes and waits again (a preempted or failed run)."""
        j = self.running[job_id]
        self.finish(job_id, "PREEMPTED")
        self.finished.pop(job_id)
        lifecycle.requeue(j, j.start_time or 0.0)
        self.pending[job_id] = j

    def snapshot(self) -> Snapshot:
        return Snapshot(
            nodes=[dataclasses.replace(v, free_gpu_ids=list(v.free_gpu_ids)) for v in self.nodes],
            partitions={k: dataclasses.replace(p) for k, p in self.partitions.items()},
            pending=sorted(self.pending.values(), key=lambda j: j.job_id),
            running=sorted(self.running.values(), key=lambda j: j.job_id),
            finished=dict(self.finished),
            reservations=list(self.reservations),
            fairshare=dict(self.fairshare),
            qos_priority=dict(self.qos_priority),
            priority_overrides=dict(self.priority_overrides),
            arrays={k: dict(v) for k, v in self.arrays.items()},
            topology=self.topology,
            qos_preempt=dict(self.qos_preempt),
        )

    def schedule(self, at: float) -> Decisions:
        """Run one pass at time ``at``, check invariants, apply its starts."""
        snap = self.snapshot()
        d = schedule(snap, at, self.config)
        check_invariants(snap, d, at)
        for s in d.starts:
            j = self.pending.pop(s.job_id)
            lifecycle.start(j, [NodeAlloc(a.node, a.cpus, a.mem, list(a.gpu_ids)) for a in s.alloc], at)
            j.partition = s.partition
            if j.time_limit is None:
                part = self.partitions.get(s.partition)
                if part is not None:
                    j.time_limit = part.default_time or part.max_time
            self.running[j.job_id] = j
            for a in s.alloc:
                v = self.node_named(a.node)
                v.free_cpus -= a.cpus
                v.free_mem -= a.mem
                v.free_gpu_ids = [g for g in v.free_gpu_ids if g not in a.gpu_ids]
                v.running_jobs += 1
        for p in d.preemptions:  # as the controller does: the victims get their grace time
            victim = self.running[p.job_id]
            victim.preempted_by, victim.preempt_deadline = p.preemptor, at + p.grace_time
        for job_id, names in d.holds.items():
            grace = max((p.grace_time for p in d.preemptions if p.preemptor == job_id), default=0)
            lifecycle.hold_nodes(self.pending[job_id], names, at + grace + 60, at)
        for j in self.pending.values():  # as the controller does: the pass's plans or none
            plan = d.plans.get(j.job_id)
            lifecycle.plan(j, plan.start_time if plan else None, plan.nodes if plan else (), at)
        self.last = d
        self.history.append(d)
        return d

    def started(self, d: Decisions | None = None) -> list[int]:
        d = d or self.last
        assert d is not None
        return [s.job_id for s in d.starts]

    def start_of(self, job_id: int) -> float | None:
        d = self.last
        assert d is not None
        plan = d.plans.get(job_id)
        return plan.start_time if plan else None


def check_invariants(snap: Snapshot, d: Decisions, now: float) -> None:
    """What must hold for any pass: every start names a pending job once, on available
    nodes of its partition, with resources that were free and given to nobody else."""
    pending = {j.job_id: j for j in snap.pending}
    nodes = {v.name: v for v in snap.nodes}
    free_cpus = {v.name: v.free_cpus for v in snap.nodes}
    free_mem = {v.name: v.free_mem for v in snap.nodes}
    free_gpus = {v.name: set(v.free_gpu_ids) for v in snap.nodes}
    seen: set[int] = set()
    for s in d.starts:
        assert s.job_id in pending, f"start of job {s.job_id}, which is not pending"
        assert s.job_id not in seen, f"job {s.job_id} started twice"
        seen.add(s.job_id)
        j = pending[s.job_id]
        assert s.partition in snap.partitions, f"job {s.job_id}: unknown partition"
        part = snap.partitions[s.partition]
        assert len(s.alloc) == max(j.shape.nodes, len(j.spec.nodelist)), f"job {s.job_id}: wrong node count"
        assert len({a.node for a in s.alloc}) == len(s.alloc), f"job {s.job_id}: node twice"
        for a in s.alloc:
            v = nodes[a.node]
            assert v.available, f"job {s.job_id} placed on unavailable {a.node}"
            assert a.node in part.nodes, f"job {s.job_id}: {a.node} not in {part.name}"
            assert a.cpus >= j.shape.cpus_per_node, f"job {s.job_id}: too few CPUs"
            assert a.mem >= j.shape.mem_per_node, f"job {s.job_id}: too little memory"
            assert len(a.gpu_ids) >= j.shape.gpus_per_node, f"job {s.job_id}: too few GPUs"
            free_cpus[a.node] -= a.cpus
            free_mem[a.node] -= a.mem
            assert free_cpus[a.node] >= 0, f"{a.node}: CPUs given twice"
            assert free_mem[a.node] >= 0, f"{a.node}: memory given twice"
            for g in a.gpu_ids:
                assert g in free_gpus[a.node], f"{a.node}: GPU {g} given twice or not free"
                free_gpus[a.node].discard(g)
    for job_id in d.plans:
        assert job_id in pending, f"plan for job {job_id}, which is not pending"
        assert job_id not in seen, f"job {job_id} both started and planned"
    running = {j.job_id for j in snap.running}
    victims = [p.job_id for p in d.preemptions]
    assert len(set(victims)) == len(victims), "a job preempted twice"
    for p in d.preemptions:
        assert p.job_id in running, f"preemption of job {p.job_id}, which is not running"
        assert p.preemptor in pending and p.preemptor not in seen, f"job {p.preemptor} preempts but is not waiting"
        assert p.preemptor in d.holds, f"job {p.preemptor} preempts but holds no node"
    for job_id, held in d.holds.items():
        assert held and all(n in nodes for n in held), f"job {job_id} holds unknown nodes"
    for job_id in seen:
        assert job_id not in d.reasons or d.reasons[job_id].value == "None", (
            f"started job {job_id} has a pending reason"
        )
