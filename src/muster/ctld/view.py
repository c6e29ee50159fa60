"""Builds the scheduler's ``Snapshot`` from the controller's memory (never from the store).

Reading only: nothing here changes a job, a node or accounting (``ctld.loop`` does what a
pass changes, before and after the decision)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from muster.core.job import Job
from muster.core.states import JobState
from muster.ctld.nodes import NodeRuntime
from muster.ctld.preemption import lends_cpus
from muster.ctld.state import ClusterState
from muster.sched.snapshot import NodeView, QosPreempt, ReservationView, Snapshot, partition_views


def _configured(node: NodeRuntime) -> dict[str, Any]:
    """What a node is, as configured: the part of its view that nothing allocated changes."""
    return {
        "name": node.name,
        "index": node.index,
        "cpus": node.cpus,
        "mem": node.real_memory,
        "gpus": node.gpus,
        "gpu_type": node.gpu_type,
        "features": node.features,
        "weight": node.weight,
        "tmp_disk": node.tmp_disk,
    }


def node_views(nodes: Iterable[NodeRuntime], lent: Mapping[str, int] | None = None) -> list[NodeView]:
    """What each node has free; ``lent``: CPUs that suspended preemption victims lend
    there (``ctld.preemption.lends_cpus``), counted free."""
    out = []
    for node in nodes:
        used = node.gpu_ids_alloc
        out.append(
            NodeView(
                **_configured(node),
                available=node.available,
                free_cpus=node.cpus - node.cpus_alloc + (lent.get(node.name, 0) if lent else 0),
                free_mem=node.real_memory - node.mem_alloc,
                free_gpu_ids=[i for i in range(node.gpus) if i not in used],
                running_jobs=len(node.allocs),
            )
        )
    return out


def capacity_views(nodes: Iterable[NodeRuntime]) -> list[NodeView]:
    """The nodes as configured, with nothing allocated: what a submission is checked
    against (``sched.filters.check_submit`` reads names, capacities, GPU types,
    features and TmpDisk, never what is in use). Cheaper than ``node_views`` by what it
    leaves out, which a submission to a cluster of thousands of nodes would pay."""
    return [NodeView(**_configured(node)) for node in nodes]


class FinishedStates(Mapping[int, str]):
    """Job id -> terminal state, of the ended jobs in memory and of those purged from it
    (``ClusterState.finished``; one in memory wins), answered on demand: only dependencies
    ask, for a few ids, so a pass neither walks nor copies them. Iterating and ``len``
    walk memory (nothing in a pass does)."""

    __slots__ = ("jobs", "purged")

    def __init__(self, jobs: Mapping[int, Job], purged: Mapping[int, str]) -> None:
        self.jobs = jobs
        self.purged = purged

    def __getitem__(self, job_id: int) -> str:
        job = self.jobs.get(job_id)
        if job is not None and job.state.is_terminal:
            return str(job.state)
        return self.purged[job_id]

    def __iter__(self) -> Iterator[int]:
        ended = [job_id for job_id, job in self.jobs.items() if job.state.is_terminal]
        yield from ended
        seen = set(ended)
        yield from (job_id for job_id in self.purged if job_id not in seen)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def build_snapshot(ctl: ClusterState) -> Snapshot:
    pending = []
    running = []
    # A requeued job waits until its previous attempt's processes are gone (its agent
    # would refuse a second attempt while the first still runs there).
    cleaning = {job_id for node in ctl.nodes.values() for (job_id, _attempt) in node.allocs}
    kept: set[str] = set()  # nodes held for a job still cleaning up (expedited requeue)
    # Every job in memory is read once per pass (ended ones too, for MinJobAge): the states
    # are compared by identity and ``Job.is_active`` is written out, nothing more per job.
    pending_state, running_state = JobState.PENDING, JobState.RUNNING
    lent: dict[str, int] = {}  # CPUs of suspended preemption victims, free for others
    for job in ctl.jobs.values():
        state = job.state
        if state is pending_state:
            if job.job_id not in cleaning:
                pending.append(job)
            elif job.held_nodes:
                kept.update(job.held_nodes)
        elif state is running_state or job.completing:
            running.append(job)
            if job.suspended_at is not None and lends_cpus(job):
                for a in job.alloc:
                    lent[a.node] = lent.get(a.node, 0) + a.cpus
    finished = FinishedStates(ctl.jobs, ctl.finished)
    nodes = node_views(ctl.nodes.values(), lent)
    if kept:  # its hold starts once it is pending again; meanwhile nobody starts there
        for view in nodes:
            if view.name in kept:
                view.available = False
    snap = Snapshot(
        nodes=nodes,
        partitions=partition_views(ctl.config),
        pending=pending,
        running=running,
        finished=finished,
        reservations=reservation_views(ctl.reservations.values()),
        priority_overrides={j.job_id: j.admin_priority for j in pending if j.admin_priority is not None},
        arrays=ctl.arrays.tasks,
        topology=ctl.topology,
    )
    if ctl.accounting is not None:
        snap.qos_preempt = {
            q.name: QosPreempt(tuple(q.preempt), q.preempt_mode, q.grace_time, q.preempt_exempt_time)
            for q in ctl.accounting.db.qos.values()
            if q.preempt or q.preempt_mode or q.grace_time or q.preempt_exempt_time is not None
        }
    return snap


def reservation_views(reservations: Iterable[object]) -> list[ReservationView]:
    return [
        ReservationView(
            name=r.name,  # type: ignore[attr-defined]
            start=r.start,  # type: ignore[attr-defined]
            end=r.end,  # type: ignore[attr-defined]
            nodes=tuple(r.nodes),  # type: ignore[attr-defined]
            users=tuple(r.users),  # type: ignore[attr-defined]
            accounts=tuple(r.accounts),  # type: ignore[attr-defined]
            flags=tuple(r.flags),  # type: ignore[attr-defined]
        )
        for r in reservations
    ]
