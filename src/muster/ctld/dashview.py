"""What the dashboard shows, as JSON-able dicts built from the controller's memory.

The same sources as the commands: ``wire.job_wire`` (squeue, scontrol show job),
``steps.StepBook.listing`` (squeue -s), the accounting's ``shares`` (sshare) and the
store's event log (the job's timeline). ``PrivateData`` is applied by the routes before
anything reaches these builders, except on the node grid, which names the jobs on each GPU
only when the caller may see them (``visible``).

``Samples`` keeps a bounded ring of the cluster's utilisation and queue length, one sample
every ``SAMPLE_EVERY`` seconds (``SAMPLES_KEPT`` of them: a day), for the charts.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from typing import Any

from muster.core.job import Job
from muster.core.states import JobState, NodeState
from muster.ctld.nodes import NodeRuntime
from muster.ctld.wire import job_wire

SAMPLE_EVERY = 10.0
SAMPLES_KEPT = 8640
TIMELINE_KEPT = 200  # the last events of a job's timeline (progress reports left out)
QUEUE_SHOWN = 1000  # rows of the queue a poll sends (the first in ``queue_order``); the count is exact

# A job's row in the queue: what squeue's default columns and the detail link need.
QUEUE_FIELDS = (
    "job_id",
    "array_job_id",
    "array_task_id",
    "user",
    "account",
    "partition",
    "state",
    "reason",
    "priority",
    "submit_time",
    "start_time",
    "end_time",
    "planned_start",
    "time_limit",
    "run_time",
    "nodelist",
    "sched_nodelist",
    "num_nodes",
    "num_gpus",
    "restart_count",
    "completing",
)

_STATE_ORDER = {JobState.RUNNING: 0, JobState.PENDING: 1}


def display_id(job: Job) -> str:
    if job.array_job_id is not None and job.array_task_id is not None:
        return f"{job.array_job_id}_{job.array_task_id}"
    return str(job.job_id)


def counts(nodes: Iterable[NodeRuntime], jobs: Iterable[Job]) -> dict[str, int]:
    """The cluster's totals now: GPUs and CPUs (all, allocated, out of service), nodes by
    state, jobs running and pending."""
    out = dict.fromkeys(
        ("gpus", "gpus_alloc", "gpus_out", "cpus", "cpus_alloc", "nodes", "nodes_down", "nodes_drain"), 0
    )
    for n in nodes:
        out["nodes"] += 1
        out["gpus"] += n.gpus
        out["cpus"] += n.cpus
        out["gpus_alloc"] += len(n.gpu_ids_alloc)
        out["cpus_alloc"] += n.cpus_alloc
        down = n.base_state() in (NodeState.DOWN, NodeState.UNKNOWN)
        out["nodes_down"] += down
        out["nodes_drain"] += n.drain and not down
        if down or n.drain:
            out["gpus_out"] += n.gpus - len(n.gpu_ids_alloc)
    running = pending = 0
    for j in jobs:
        running += j.state is JobState.RUNNING
        pending += j.state is JobState.PENDING
    out["jobs_running"], out["jobs_pending"] = running, pending
    return out


class Samples:
    """A ring of ``counts`` over time: ``take`` appends one, ``since`` reads the newer ones."""

    def __init__(self, every: float = SAMPLE_EVERY, kept: int = SAMPLES_KEPT) -> None:
        self.every = every
        self.ring: deque[dict[str, Any]] = deque(maxlen=kept)

    @staticmethod
    def current(nodes: Iterable[NodeRuntime], jobs: Iterable[Job], now: float) -> dict[str, Any]:
        return {"t": round(now, 3), **counts(nodes, jobs)}

    def take(self, nodes: Iterable[NodeRuntime], jobs: Iterable[Job], now: float) -> None:
        self.ring.append(self.current(nodes, jobs, now))

    def since(self, t: float) -> list[dict[str, Any]]:
        if not self.ring or self.ring[-1]["t"] <= t:
            return []
        out = []
        for s in reversed(self.ring):  # the newest are at the end: stop at the first old one
            if s["t"] <= t:
                break
            out.append(s)
        out.reverse()
        return out


def _job_of(key: Any) -> int:
    """The job of a node's allocation, keyed (job id, attempt) (``ClusterState``)."""
    return int(key[0])


def gpu_cells(node: NodeRuntime, visible: set[int] | None) -> list[dict[str, Any]]:
    """Each GPU of a node: ``alloc`` (with its job, when the caller may see it), ``idle``,
    ``down`` or ``drain``; a draining node's allocated GPUs stay ``alloc`` until freed."""
    owner: dict[int, int] = {}
    for key, (_cpus, _mem, gpu_ids) in node.allocs.items():
        for g in gpu_ids:
            owner[g] = _job_of(key)
    down = node.base_state() in (NodeState.DOWN, NodeState.UNKNOWN)
    cells = []
    for i in range(node.gpus):
        job_id = owner.get(i)
        if job_id is not None:
            cell: dict[str, Any] = {"index": i, "state": "alloc"}
            if visible is None or job_id in visible:
                cell["job_id"] = job_id
        elif down:
            cell = {"index": i, "state": "down"}
        elif node.drain:
            cell = {"index": i, "state": "drain"}
        else:
            cell = {"index": i, "state": "idle"}
        cells.append(cell)
    return cells


def node_view(node: NodeRuntime, visible: set[int] | None) -> dict[str, Any]:
    state = node.base_state()
    shown = str(state)
    if node.drain:
        shown = "DRAINING" if node.allocs else "DRAINED"
    jobs = sorted({j for j in map(_job_of, node.allocs) if visible is None or j in visible})
    return {
        "name": node.name,
        "state": shown,
        "reason": node.reason,
        "reason_user": node.reason_user,
        "reason_time": node.reason_time,
        "responding": node.responding or not node.registered,
        "partitions": node.partitions,
        "gpu_type": node.gpu_type,
        "cpus": node.cpus,
        "cpus_alloc": node.cpus_alloc,
        "real_memory": node.real_memory,
        "mem_alloc": node.mem_alloc,
        "gpus": gpu_cells(node, visible),
        "jobs": jobs,
        "features": list(node.features),
    }


def queue_row(job: Job, now: float) -> dict[str, Any]:
    d = job_wire(job, now, brief=True)  # squeue's view: none of the allocation's details
    row = {k: d.get(k) for k in QUEUE_FIELDS}
    row["id"] = display_id(job)
    row["name"] = job.spec.name or ""
    return row


def queue(jobs: list[Job], now: float, shown: int = QUEUE_SHOWN) -> list[dict[str, Any]]:
    """The first ``shown`` jobs in ``queue_order`` as rows: a poll of a queue of a hundred
    thousand jobs stays a few milliseconds of the controller's loop, not a second."""
    first = heapq.nsmallest(shown, jobs, key=queue_order) if len(jobs) > shown else sorted(jobs, key=queue_order)
    return [queue_row(j, now) for j in first]


def queue_order(job: Job) -> tuple[Any, ...]:
    """Running first, then pending by priority (as the scheduler takes them), then ended
    jobs, the latest first."""
    rank = _STATE_ORDER.get(job.state, 2)
    if rank == 1:
        return (rank, -job.priority, job.submit_time, job.job_id)
    if rank == 0:
        return (rank, job.start_time or 0.0, job.job_id)
    return (rank, -(job.end_time or 0.0), -job.job_id)


def timeline(events: list[tuple[float, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """A job's events as the page lists them: time, what happened, and its scalar details
    (who did it, which nodes, which attempt, the exit code...)."""
    out = []
    for t, kind, data in events:
        if kind == "progress":
            continue
        details = {}
        for k, v in data.items():
            if isinstance(v, str | int | float | bool) or v is None:
                details[k] = v
            elif isinstance(v, list) and all(isinstance(x, str | int) for x in v):
                details[k] = ",".join(str(x) for x in v)
        out.append({"time": t, "event": kind, "details": details})
    return out[-TIMELINE_KEPT:]


def job_detail(
    job: Job, now: float, steps: list[dict[str, Any]], events: list[tuple[float, str, dict[str, Any]]]
) -> dict[str, Any]:
    d = job_wire(job, now)
    spec = d.pop("spec")
    d["id"] = display_id(job)
    d["name"] = spec.get("name") or ""
    d["workdir"] = spec.get("workdir")
    d["gpus_per_node"] = spec.get("gpus_per_node")
    d["gpu_type"] = spec.get("gpu_type")
    d["requeue"] = spec.get("requeue")
    d["gpus_by_node"] = [{"node": a.node, "gpu_ids": list(a.gpu_ids), "cpus": a.cpus} for a in job.alloc]
    d["steps"] = steps
    d["timeline"] = timeline(events)
    return d
