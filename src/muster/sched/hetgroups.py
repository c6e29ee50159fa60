"""Heterogeneous jobs in the pass: every component starts now, or none does.

A heterogeneous job's components (``Job.het_job_id``, see ``core.hetjob``) are pending
jobs of their own, each with its own request; the pass places them as one group when it
meets the first of them in its order:

* **start now** only if every component fits now beside everything promised before it:
  each is taken out of the profile in turn (a later component sees what the earlier ones
  took), and when one does not fit, what the earlier ones took is given back;
* **otherwise plan** (backfill) the whole group at one start time: the earliest time,
  among the times at which some component could start, at which every component fits
  together; all of them are reserved from it, so nothing placed after the group can delay
  any one component. With no such time in the window, no component gets a plan.

A component that may not be considered yet (held, a dependency, a begin time) keeps the
whole group waiting: the others wait with its reason. A component refused by every one
of its partitions refuses the group the same way.

Nothing here reads a clock or does I/O; like the rest of ``sched`` it only decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from muster.core.job import Job
from muster.core.states import Reason
from muster.sched.backfill import Backfill, _feasible, need_on, windows_allow
from muster.sched.decisions import Decisions, Plan, Start
from muster.sched.filters import Request
from muster.sched.profile import NodeProfile
from muster.sched.select import FitKey, fit_key, pick
from muster.sched.topology import Topology

__all__ = ["HetGroups", "Member", "place_group"]

# How many candidate start times a group's plan tries; each try is a few profile checks
# per component. Groups are rare and small; the bound keeps a pathological one cheap.
_MAX_TRIES = 256

Member = tuple[Job, list[tuple[Request, float]]]


class HetGroups:
    """The heterogeneous jobs among a pass's pending jobs, placed group by group."""

    __slots__ = ("members", "eligible", "done")

    def __init__(self, pending: Sequence[Job], eligible: Sequence[tuple[Job, tuple[str, ...]]]) -> None:
        self.members: dict[int, list[Job]] = {}
        for job in pending:
            if job.het_job_id is not None:
                self.members.setdefault(job.het_job_id, []).append(job)
        for group in self.members.values():
            group.sort(key=lambda j: j.het_job_offset or 0)
        # read only when the queue holds a het job: most passes pay one scan of the queue
        self.eligible = (
            {job.job_id: parts for job, parts in eligible if job.het_job_id is not None} if self.members else {}
        )
        self.done: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self.members)

    def first_visit(self, job: Job) -> list[tuple[Job, tuple[str, ...]]] | None:
        """The group's members with their partitions, the first time one of them comes up
        in the pass's order; None when its group was already placed this pass."""
        leader = job.het_job_id
        if leader is None or leader in self.done:
            return None
        self.done.add(leader)
        return [(m, self.eligible.get(m.job_id, ())) for m in self.members.get(leader, [job])]


class _Pass(Protocol):
    """What of the pass (``cycle._Pass``) a group's placement reads and updates."""

    d: Decisions
    engine: Backfill
    blocked: set[str]
    plans_left: int | None
    backfill: bool

    def _requests(self, job: Job, parts: tuple[str, ...]) -> list[tuple[Request, float]]: ...


def place_group(
    p: _Pass, hets: HetGroups, job: Job, holds: dict[int, tuple[Request, float, float, list[NodeProfile]]]
) -> None:
    """Place the heterogeneous job ``job`` belongs to, whole, the first time one of its
    members comes up in the pass's order (later members: nothing left to do)."""
    group = hets.first_visit(job)
    if group is None:
        return
    d = p.d
    for member, _ in group:  # conservative: what the group was promised is its own again
        held = holds.pop(member.job_id, None) if holds else None
        if held is not None:
            p.engine.release(*held)
    waiting = [m for m, parts in group if not parts]
    if waiting:  # a member may not be considered yet: the group waits with its reason
        reason = d.reasons.get(waiting[0].job_id, Reason.DEPENDENCY)
        wait_with(d, [m for m, parts in group if parts], reason)
        return
    members: list[Member] = []
    for member, parts in group:
        requests = p._requests(member, parts)  # refuses the member with its verdict
        if not requests:
            others = [m for m, _ in group if m is not member]
            wait_with(d, others, d.reasons[member.job_id], d.never.get(member.job_id))
            return
        members.append((member, requests))
    partitions = {req.partition for _, requests in members for req, _ in requests}
    behind = bool(partitions & p.blocked)
    d.stats.examined += len(members)
    if not behind or p.backfill:  # sched/builtin: strict order inside a partition
        starts = start_all(p.engine, members, p.blocked)
        if starts is not None:
            d.starts.extend(starts)
            d.stats.started += len(starts)
            d.stats.backfilled += sum(1 for s in starts if s.backfilled)
            return
    p.blocked |= partitions
    d.stats.blocked += len(members)
    wait_with(d, [m for m, _ in members], Reason.PRIORITY if behind else Reason.RESOURCES)
    if p.backfill and p.plans_left != 0:
        if p.plans_left is not None:
            p.plans_left -= 1
        found = plan_all(p.engine, members)
        if found is not None:
            for member, plan in found[1]:
                d.plans[member.job_id] = plan
            d.stats.planned += len(found[1])


def wait_with(d: Decisions, group: Sequence[Job], reason: Reason, never: str | None = None) -> None:
    """Every member of the group waits with ``reason`` (and is refused for ever with it)."""
    for job in group:
        d.reasons[job.job_id] = reason
        if never is not None:
            d.never[job.job_id] = never


def start_all(engine: Backfill, members: Sequence[Member], blocked: set[str]) -> list[Start] | None:
    """Start every member now, or none: the starts, with the profile taken; None with the
    profile as it was."""
    taken: list[tuple[Request, float, list[NodeProfile], list[int]]] = []
    starts: list[Start] = []
    for job, requests in members:
        for req, duration in requests:
            nodes = engine.start_now(req, duration)
            if nodes is not None:
                alloc = engine.take_now(req, duration, nodes)
                taken.append((req, duration, nodes, [len(a.gpu_ids) for a in alloc]))
                starts.append(Start(job.job_id, req.partition, alloc, req.partition in blocked))
                break
        else:
            for (req, duration, nodes, _), start in zip(taken, starts, strict=True):
                _give_now(engine, req, duration, nodes, start)
            return None
    return starts


def _give_now(engine: Backfill, req: Request, duration: float, nodes: list[NodeProfile], start: Start) -> None:
    """Undo ``Backfill.take_now``: resources and GPU indices back to the nodes."""
    engine.release(req, duration, engine.now, nodes)
    for node, alloc in zip(nodes, start.alloc, strict=True):
        node.running -= 1
        node.gpu_ids = sorted(node.gpu_ids + alloc.gpu_ids)


def plan_all(engine: Backfill, members: Sequence[Member]) -> tuple[float, list[tuple[Job, Plan]]] | None:
    """One start time for every member (each in its first partition), reserved in the
    profile; None (profile unchanged) when there is none within the window."""
    chosen = [(job, requests[0][0], requests[0][1]) for job, requests in members]
    times: set[float] = set()
    for _, req, duration in chosen:
        for node in req.candidates:
            for a, _b in _feasible(node, req, duration, engine.now, engine.horizon):
                times.add(a)
    for at in sorted(times)[:_MAX_TRIES]:
        placed: list[tuple[Request, float, list[NodeProfile]]] = []
        for _, req, duration in chosen:
            nodes = _fit_at(req, duration, at, engine.topology)
            if nodes is None:
                break
            engine.take_plan(req, duration, at, nodes)
            placed.append((req, duration, nodes))
        if len(placed) == len(chosen):
            return at, [(job, Plan(at, [n.name for n in p[2]])) for (job, _, _), p in zip(chosen, placed, strict=True)]
        for req, duration, nodes in placed:
            engine.give_plan(req, duration, at, nodes)
    return None


def _fit_at(req: Request, duration: float, at: float, topology: Topology | None = None) -> list[NodeProfile] | None:
    """The nodes to plan ``req`` on from ``at`` for ``duration`` (by the topology when
    there is one, as starts are), or None."""
    end = at + duration
    fitting: list[tuple[FitKey, NodeProfile]] = []
    for node in req.candidates:
        if not node.available:
            continue
        c, m, g = need_on(req, node)
        if not node.fits(at, end, c, m, g) or not windows_allow(node, req, at, end):
            continue
        fitting.append((fit_key(node, node.free_at(at), (c, m, g)), node))
    if len(fitting) < req.nodes:
        return None
    if req.required and not req.required <= {n.name for _, n in fitting}:
        return None
    if topology is not None:
        return topology.pick(fitting, req.nodes, req.required, req.topo)
    return pick(fitting, req.nodes, req.required)
