"""Builds the scheduler's ``Snapshot`` from the controller's memory (never from the store)."""

from __future__ import annotations

from muster.core.states import JobState
from muster.ctld.controller import Controller
from muster.sched.snapshot import NodeView, PartitionView, Snapshot


def build_snapshot(ctl: Controller) -> Snapshot:
    nodes = []
    for node in ctl.nodes.values():
        used = node.gpu_ids_alloc
        nodes.append(
            NodeView(
                name=node.name,
                index=node.index,
                cpus=node.cpus,
                mem=node.real_memory,
                gpus=node.gpus,
                gpu_type=node.gpu_type,
                features=node.features,
                weight=node.weight,
                available=node.available,
                free_cpus=node.cpus - node.cpus_alloc,
                free_mem=node.real_memory - node.mem_alloc,
                free_gpu_ids=[i for i in range(node.gpus) if i not in used],
                running_jobs=len(node.allocs),
            )
        )
    partitions = {
        p.name: PartitionView(
            name=p.name,
            nodes=tuple(p.nodes),
            state=p.state.upper(),
            max_time=p.max_time,
            default_time=p.default_time,
            max_nodes=p.max_nodes,
            min_nodes=p.min_nodes,
            priority_tier=p.priority_tier,
            priority_job_factor=p.priority_job_factor,
            exclusive=p.exclusive,
            allow_accounts=tuple(p.allow_accounts) if p.allow_accounts is not None else None,
            deny_accounts=tuple(p.deny_accounts) if p.deny_accounts is not None else None,
            allow_groups=tuple(p.allow_groups) if p.allow_groups is not None else None,
        )
        for p in ctl.config.partitions
    }
    pending = []
    running = []
    for job in ctl.jobs.values():
        if job.state is JobState.PENDING:
            pending.append(job)
        elif job.is_active:
            running.append(job)
    finished = dict(ctl.finished)
    for job in ctl.jobs.values():
        if job.state.is_terminal:
            finished[job.job_id] = str(job.state)
    snap = Snapshot(nodes=nodes, partitions=partitions, pending=pending, running=running, finished=finished)
    overrides = {j.job_id: j.admin_priority for j in pending if j.admin_priority is not None}
    if overrides and hasattr(snap, "priority_overrides"):
        snap.priority_overrides = overrides  # type: ignore[attr-defined]
    return snap
