"""One scheduling pass (first cut: priority order, start what fits now)."""

from __future__ import annotations

from muster.core.job import Job, NodeAlloc
from muster.core.states import Reason
from muster.sched.config import SchedConfig
from muster.sched.decisions import Decisions, Start
from muster.sched.snapshot import NodeView, Snapshot

__all__ = ["schedule"]


class _Free:
    __slots__ = ("view", "cpus", "mem", "gpu_ids", "running")

    def __init__(self, view: NodeView) -> None:
        self.view = view
        self.cpus = view.free_cpus
        self.mem = view.free_mem
        self.gpu_ids = sorted(view.free_gpu_ids)
        self.running = view.running_jobs


def _candidates(job: Job, snapshot: Snapshot) -> list[str]:
    return list(job.spec.partitions) or [job.partition]


def schedule(snapshot: Snapshot, now: float, config: SchedConfig) -> Decisions:
    d = Decisions()
    d.stats.pending_seen = len(snapshot.pending)
    free = {n.name: _Free(n) for n in snapshot.nodes}
    order = sorted(snapshot.pending, key=lambda j: (-j.priority, j.submit_time, j.job_id))
    blocked = False
    for job in order:
        d.priorities[job.job_id] = job.priority
        if job.hold:
            d.reasons[job.job_id] = Reason.HELD_ADMIN if job.hold == "admin" else Reason.HELD_USER
            continue
        if job.spec.begin_time is not None and job.spec.begin_time > now:
            d.reasons[job.job_id] = Reason.BEGIN_TIME
            continue
        d.stats.examined += 1
        start = None
        for pname in _candidates(job, snapshot):
            part = snapshot.partitions.get(pname)
            if part is None:
                continue
            alloc = _place(job, [free[n] for n in part.nodes if n in free], part.exclusive)
            if alloc is not None:
                start = Start(job.job_id, pname, alloc)
                break
        if start is None:
            d.reasons[job.job_id] = Reason.PRIORITY if blocked else Reason.RESOURCES
            blocked = True
            continue
        d.starts.append(start)
        d.stats.started += 1
        for a in start.alloc:
            f = free[a.node]
            f.cpus -= a.cpus
            f.mem -= a.mem
            f.gpu_ids = [g for g in f.gpu_ids if g not in a.gpu_ids]
            f.running += 1
    return d


def _place(job: Job, nodes: list[_Free], part_exclusive: bool) -> list[NodeAlloc] | None:
    shape = job.shape
    exclusive = shape.exclusive or part_exclusive
    want = set(job.spec.nodelist)
    avoid = set(job.spec.exclude)
    fit: list[_Free] = []
    for f in sorted(nodes, key=lambda f: f.view.index):
        v = f.view
        if not v.available or v.name in avoid:
            continue
        if shape.gpu_type and shape.gpus_per_node and v.gpu_type != shape.gpu_type:
            continue
        if exclusive:
            if f.running or f.cpus < v.cpus or len(f.gpu_ids) < v.gpus:
                continue
        if f.cpus < shape.cpus_per_node or f.mem < shape.mem_per_node:
            continue
        if len(f.gpu_ids) < shape.gpus_per_node:
            continue
        fit.append(f)
    chosen = [f for f in fit if f.view.name in want]
    if len(chosen) < len(want):
        return None
    chosen += [f for f in fit if f.view.name not in want][: shape.nodes - len(chosen)]
    if len(chosen) < shape.nodes:
        return None
    out = []
    for f in chosen:
        if exclusive:
            out.append(NodeAlloc(f.view.name, f.cpus, f.mem, list(f.gpu_ids)))
        else:
            out.append(
                NodeAlloc(
                    f.view.name,
                    shape.cpus_per_node,
                    shape.mem_per_node,
                    f.gpu_ids[: shape.gpus_per_node],
                )
            )
    return out
