"""Backfill over the availability profile: can a request start now, and if not, when?

Both questions are asked of the same ``NodeProfile``s, which already carry every start
and every planned start (reservation in the plan) of the jobs examined before, in
priority order. So a job that ``start_now`` accepts fits beside all of them for its whole
time limit: it delays none of the higher-priority jobs that hold a plan. That is the
whole of EASY/conservative backfill here; how many jobs get a plan is the pass's policy
(``cycle``), not this module's.

Reservation windows (``reservations``) are rules on start times, applied per node:

* a window of another reservation forbids starts in the open interval
  (window start - duration, window end): the job would overlap it;
* a job in a reservation may start only in [window start, window end - duration] of one
  of its reservation's windows.

Every question takes a ``Request`` (shared by the jobs of one shape) and the asking
job's duration beside it.

Everything here relies on one fact: within a pass, resources are only ever taken, never
given back. Hence the memos (a request that did not fit now will not fit a longer or
equal duration later in the pass; one with no start in the window never gets one) and
the incremental planner (only nodes changed since the last question are recomputed).
The memos are keyed by the ``Request`` object itself: the pass makes one per key.

The one exception is conservative backfill's *holds* (``hold``/``release``): a pass first
takes every plan of the previous pass out of the profile, at its old start on its old
nodes, and gives each back just before its job is placed again, so that no job placed
before it can take what it was promised. A release forgets the memos that a give-back
can make wrong.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from heapq import heapify, heappop, heappush

from muster.core.job import NodeAlloc
from muster.sched.filters import Request
from muster.sched.profile import EPS, INF, NodeProfile
from muster.sched.select import FitKey, fit_key, pick
from muster.sched.topology import Topology

__all__ = ["Backfill", "need_on", "windows_allow"]

Key = tuple[object, ...]


def need_on(req: Request, node: NodeProfile) -> tuple[int, int, int]:
    """What the request takes from ``node``: the whole node when exclusive."""
    return node.cap if req.exclusive else req.need


def windows_allow(node: NodeProfile, req: Request, start: float, end: float) -> bool:
    """Whether running on ``node`` during [start, end) respects reservation windows."""
    for ws, we, name in node.windows:
        if name != req.reservation and start < we - EPS and end > ws + EPS:
            return False
    if req.reservation is not None:
        return any(ws <= start + EPS and end <= we + EPS for ws, we in req.allowed)
    return True


class _GpuIndex:
    """Available nodes grouped by (weight, free GPUs now), each group a list of node
    positions in index order. Lets a GPU request visit nodes best fit first and stop
    as soon as a whole group of equally good nodes has been seen.

    Each group is also kept sorted by what a one-node request's best fit compares
    next, (free CPUs, free memory, position): the best node for one share is then
    found by a bisection into the first group that has one, not by keying every node
    of the group (``Backfill._best_one``). ``moved`` keeps both current; it must be
    called whenever what is free now on a node changes."""

    __slots__ = ("nodes", "pos", "groups", "order", "by_fit", "seen")

    def __init__(self, nodes: list[NodeProfile]) -> None:
        self.nodes = sorted((n for n in nodes if n.available), key=lambda n: n.index)
        self.pos = {n.name: i for i, n in enumerate(self.nodes)}
        self.groups: dict[tuple[int, int], list[int]] = {}
        self.by_fit: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        # per position: (free GPUs, free CPUs, free memory) now, as indexed
        self.seen: list[tuple[int, int, int]] = []
        for i, n in enumerate(self.nodes):
            key = (n.weight, n.gpus[0])
            self.groups.setdefault(key, []).append(i)
            self.by_fit.setdefault(key, []).append((n.cpus[0], n.mem[0], i))
            self.seen.append((n.gpus[0], n.cpus[0], n.mem[0]))
        for entries in self.by_fit.values():
            entries.sort()
        self.order = sorted(self.groups)

    def members(self, nodes: list[NodeProfile]) -> bytearray | None:
        """A flag per position for ``nodes``; None when they are all the nodes."""
        if nodes == self.nodes:  # compared by identity, in C: the usual whole partition
            return None
        flags = bytearray(len(self.nodes))
        for n in nodes:
            i = self.pos.get(n.name)
            if i is not None:
                flags[i] = 1
        return None if all(flags) else flags

    def moved(self, node: NodeProfile) -> None:
        """What is free now on ``node`` may have changed: re-file it."""
        i = self.pos.get(node.name)
        if i is None:
            return
        g, c, m = node.gpus[0], node.cpus[0], node.mem[0]
        old_g, old_c, old_m = self.seen[i]
        if g == old_g and c == old_c and m == old_m:
            return
        self.seen[i] = (g, c, m)
        w = node.weight
        fits = self.by_fit[(w, old_g)]
        del fits[bisect_left(fits, (old_c, old_m, i))]
        new = (w, g)
        if g != old_g:
            old = self.groups[(w, old_g)]
            del old[bisect_left(old, i)]
            if new not in self.groups:
                self.groups[new] = []
                self.by_fit[new] = []
                self.order = sorted(self.groups)
            insort(self.groups[new], i)
        insort(self.by_fit[new], (c, m, i))


class Backfill:
    """The pass's placement engine over the profile: ``start_now``, ``earliest_start``,
    and ``take_now``/``take_plan`` to commit a decision to the profile."""

    __slots__ = (
        "now",
        "horizon",
        "log",
        "_plans",
        "_no_plan",
        "_no_fit",
        "_live",
        "_masks",
        "_dead",
        "_index",
        "maint",
        "topology",
    )

    def __init__(
        self,
        nodes: list[NodeProfile],
        now: float,
        horizon: float,
        maint: frozenset[str] = frozenset(),
        topology: Topology | None = None,
    ) -> None:
        self.now = now
        self.topology = topology  # None: select.pick alone, as without topology.conf
        self.maint = maint  # names of MAINT reservations
        self.horizon = horizon
        self.log: list[NodeProfile] = []  # nodes whose profile changed, in order
        self._plans: dict[Key, _KeyPlan] = {}  # (plan key, duration) -> planning state
        self._no_plan: set[tuple[Request, float]] = set()  # (request, duration) without a start
        self._no_fit: dict[Request, float] = {}  # request -> shortest duration that failed
        self._live: dict[Request, list[NodeProfile]] = {}
        self._masks: dict[Request, bytearray | None] = {}
        # request -> {node position: shortest duration that failed the whole-time check}
        self._dead: dict[Request, dict[int, float]] = {}
        self._index = _GpuIndex(nodes)

    # -- now --------------------------------------------------------------------------
    def start_now(self, req: Request, duration: float) -> list[NodeProfile] | None:
        """The nodes to start ``req`` on now for ``duration``, or None when it cannot start
        now without taking what is promised to a planned job or a reservation."""
        floor = self._no_fit.get(req)
        if floor is not None and duration >= floor:
            return None
        if req.need[2] > 0 and not req.exclusive and not req.required:
            if req.nodes == 1 and self.topology is None:
                best = self._best_one(req, duration)
                if best is not None:
                    return [best]
                self._no_fit[req] = duration if floor is None else min(floor, duration)
                return None
            fitting = self._fitting_by_gpus(req, duration)
        else:
            fitting = self._fitting_scan(req, duration)
        if len(fitting) >= req.nodes and (
            not req.required or sum(1 for _, n in fitting if n.name in req.required) == len(req.required)
        ):
            if self.topology is None:
                return pick(fitting, req.nodes, req.required)
            chosen = self.topology.pick(fitting, req.nodes, req.required, req.topo)
            if chosen is not None:
                return chosen
        self._no_fit[req] = duration if floor is None else min(floor, duration)
        return None

    def _fits_whole_time(self, node: NodeProfile, req: Request, duration: float, c: int, m: int, g: int) -> bool:
        end = self.now + duration
        # The profile never falls below "now" unless something was taken from a later
        # time (``dips``); only then is the whole interval checked.
        if node.dips and not node.fits(self.now, end, c, m, g):
            return False
        if node.windows or req.reservation is not None:
            return windows_allow(node, req, self.now, end)
        return True

    def _best_one(self, req: Request, duration: float) -> NodeProfile | None:
        """``pick``'s choice for one share of a GPU request (no ``-w``, no topology),
        without keying every node of the best group: the first group (by weight, then
        fewest free GPUs) that has a fitting node, and in it the fitting node with the
        fewest free CPUs, then memory, then the lowest index, which is the first one in
        the group's (CPUs, memory, position) order from the need on. The same node as
        ``pick(_fitting_by_gpus(...), 1, ...)``.

        A node that failed the whole-time check (a plan or a reservation window in the
        way) for this request fails it for any longer duration until something is
        given back: it is remembered, so the jobs of one shape do not test it again."""
        index = self._index
        members = self._members(req)
        c, m, g = req.need
        nodes = index.nodes
        simple = req.reservation is None
        dead = self._dead.get(req)
        by_fit = index.by_fit
        for group in index.order:
            if group[1] < g:
                continue
            entries = by_fit[group]
            for k in range(bisect_left(entries, (c,)), len(entries)):
                _c, mem, i = entries[k]
                if mem < m or (members is not None and not members[i]):
                    continue
                node = nodes[i]
                if simple and not node.dips and not node.windows:
                    return node
                if dead is not None:
                    failed = dead.get(i)
                    if failed is not None and duration >= failed:
                        continue
                if self._fits_whole_time(node, req, duration, c, m, g):
                    return node
                if dead is None:
                    dead = self._dead[req] = {}
                failed = dead.get(i)
                dead[i] = duration if failed is None else min(failed, duration)
        return None

    def _members(self, req: Request) -> bytearray | None:
        """The index positions of ``req``'s candidate nodes (None: every node), kept per request."""
        if req in self._masks:
            return self._masks[req]
        members = self._masks[req] = self._index.members(req.candidates)
        return members

    def _fitting_by_gpus(self, req: Request, duration: float) -> list[tuple[FitKey, NodeProfile]]:
        """Best-fit groups first; stop after the group that completes the count, since
        every later group fits worse (same result as scanning every candidate)."""
        index = self._index
        members = self._members(req)
        c, m, g = req.need
        nodes = index.nodes
        simple = req.reservation is None
        fitting: list[tuple[FitKey, NodeProfile]] = []
        for group in index.order:
            if group[1] < g:
                continue
            for i in index.groups[group]:
                if members is not None and not members[i]:
                    continue
                node = nodes[i]
                if node.cpus[0] < c or node.mem[0] < m:
                    continue
                if (simple and not node.dips and not node.windows) or self._fits_whole_time(
                    node, req, duration, c, m, g
                ):
                    free = (node.cpus[0], node.mem[0], node.gpus[0])
                    fitting.append((fit_key(node, free, (c, m, g)), node))
            if len(fitting) >= req.nodes and self.topology is None:
                break  # with a topology, every fitting node: which switch is best depends on all
        return fitting

    def _fitting_scan(self, req: Request, duration: float) -> list[tuple[FitKey, NodeProfile]]:
        """Every candidate whose free resources cover one share; the list of those kept
        for the next request with the same key only shrinks."""
        fitting: list[tuple[FitKey, NodeProfile]] = []
        still: list[NodeProfile] = []
        exclusive = req.exclusive
        c, m, g = req.need
        for node in self._live.get(req, req.candidates):
            if exclusive:
                c, m, g = node.cap
                if node.running:
                    continue
            if node.cpus[0] < c or node.mem[0] < m or node.gpus[0] < g:
                continue
            still.append(node)
            if self._fits_whole_time(node, req, duration, c, m, g):
                free = (node.cpus[0], node.mem[0], node.gpus[0])
                fitting.append((fit_key(node, free, (c, m, g)), node))
        self._live[req] = still
        return fitting

    def held_by_maintenance(self, req: Request, duration: float) -> bool:
        """Whether a MAINT reservation is what keeps ``req`` from starting now: it would
        fit if those windows were ignored (squeue: "ReqNodeNotAvail, Reserved for
        maintenance"). Only asked about the first blocked job of a partition."""
        if not self.maint:
            return False
        end = self.now + duration
        usable = 0
        held = False
        for node in req.candidates:
            c, m, g = need_on(req, node)
            if req.exclusive and node.running:
                continue
            if not node.fits_now(c, m, g) or (node.dips and not node.fits(self.now, end, c, m, g)):
                continue
            overlapping = [
                name
                for ws, we, name in node.windows
                if name != req.reservation and self.now < we - EPS and end > ws + EPS
            ]
            if any(name not in self.maint for name in overlapping):
                continue
            held = held or bool(overlapping)
            usable += 1
        return held and usable >= req.nodes

    def take_now(self, req: Request, duration: float, nodes: list[NodeProfile]) -> list[NodeAlloc]:
        """Start ``req`` on ``nodes`` now for ``duration``: take from the profile, hand out
        GPU indices."""
        end = self.now + duration
        allocs = []
        for node in nodes:
            c, m, g = need_on(req, node)
            node.take(self.now, end, c, m, g)
            node.running += 1
            self.log.append(node)
            self._index.moved(node)
            allocs.append(NodeAlloc(node.name, c, m, node.take_gpu_ids(g)))
        if req.topo is not None and req.topo.whole_units:
            self.fence(nodes, self.now, end)
        return allocs

    # -- later ------------------------------------------------------------------------
    def earliest_start(self, req: Request, duration: float) -> tuple[float, list[NodeProfile]] | None:
        """The earliest time in [now, horizon] at which ``req`` fits for ``duration``,
        with the nodes to plan it on; None when it does not fit within the horizon.

        For each distinct request (key and duration) the engine keeps every candidate
        node's feasible start intervals and their sorted open/close events; later
        questions recompute only the nodes changed since, and the sweep stops at the
        first time enough nodes are feasible at once."""
        if (req, duration) in self._no_plan:
            return None
        plan_key = (req.plan_key, duration)
        kp = self._plans.get(plan_key)
        if kp is None:
            kp = self._plans[plan_key] = _KeyPlan(req, duration, self.now, self.horizon)
        else:
            kp.refresh(req, duration, self.log, self.now, self.horizon)
        kp.pos = len(self.log)
        found = kp.sweep(req, self.topology)
        if found is None:  # a pass only takes: no start in the window now, none later
            self._no_plan.add((req, duration))
        return found

    def hold(self, req: Request, duration: float, at: float, nodes: list[NodeProfile]) -> bool:
        """Take a plan of an earlier pass (``at`` now or later) out of the profile, if it
        still fits there (a running job past its expected end may be in the way). A hold
        from now lowers what is free now but hands out no GPU index: ``gpu_ids`` keeps
        the held ones until the release."""
        if at < self.now:
            return False
        end = at + duration
        for node in nodes:
            c, m, g = need_on(req, node)
            if not node.fits(at, end, c, m, g):
                return False
        for node in nodes:
            c, m, g = need_on(req, node)
            node.take(at, end, c, m, g)
            self.log.append(node)
            self._index.moved(node)
        return True

    def release(self, req: Request, duration: float, at: float, nodes: list[NodeProfile]) -> None:
        """Give back what ``hold`` took; the memos of failed questions no longer hold."""
        end = at + duration
        for node in nodes:
            c, m, g = need_on(req, node)
            node.give(at, end, c, m, g)
            self.log.append(node)
            self._index.moved(node)
        self._no_fit.clear()
        self._no_plan.clear()
        self._live.clear()
        self._dead.clear()

    def block(self, nodes: list[NodeProfile], until: float) -> list[tuple[NodeProfile, int, int, int]]:
        """Hold what is free now on ``nodes`` until ``until`` for one job (``sched.preempt``):
        nobody else can take it. Like ``hold``, it hands out no GPU index."""
        taken = []
        for node in nodes:
            # the least free over the hold: later steps may already be promised to a plan
            steps = [i for i, t in enumerate(node.times) if t < until] or [0]
            c = min(node.cpus[i] for i in steps)
            m = min(node.mem[i] for i in steps)
            g = min(node.gpus[i] for i in steps)
            node.take(self.now, until, c, m, g)
            self.log.append(node)
            self._index.moved(node)
            taken.append((node, c, m, g))
        return taken

    def unblock(self, taken: list[tuple[NodeProfile, int, int, int]], until: float) -> None:
        """Give back what ``block`` took, for the holder's turn."""
        for node, c, m, g in taken:
            node.give(self.now, until, c, m, g)
            self.log.append(node)
            self._index.moved(node)
        self._no_fit.clear()
        self._no_plan.clear()
        self._live.clear()
        self._dead.clear()

    def take_plan(self, req: Request, duration: float, at: float, nodes: list[NodeProfile]) -> None:
        """Reserve ``nodes`` for ``req`` from ``at`` to ``at + duration`` in the profile."""
        end = at + duration
        for node in nodes:
            c, m, g = need_on(req, node)
            node.take(at, end, c, m, g)
            self.log.append(node)
            self._index.moved(node)  # (a plan from now takes from what is free now)
        if req.topo is not None and req.topo.whole_units:
            self.fence(nodes, at, end)

    def fence(self, nodes: list[NodeProfile], start: float, end: float) -> None:
        """--exclusive=topo: keep the other nodes of the units ``nodes`` use idle."""
        if self.topology is None:
            return
        pool = {n.name: n for n in self._index.nodes}
        for name in self.topology.fence([n.name for n in nodes]):
            node = pool.get(name)
            if node is None:
                continue
            node.fence(start, end)
            self.log.append(node)
            self._index.moved(node)

    def give_plan(self, req: Request, duration: float, at: float, nodes: list[NodeProfile]) -> None:
        """Undo ``take_plan`` (a heterogeneous job's trial that did not fit whole); like
        ``release``, it forgets the memos a give-back can make wrong."""
        end = at + duration
        for node in nodes:
            c, m, g = need_on(req, node)
            node.give(at, end, c, m, g)
            self.log.append(node)
            self._index.moved(node)
        self._no_fit.clear()
        self._no_plan.clear()
        self._live.clear()
        self._dead.clear()


def _feasible(node: NodeProfile, req: Request, dur: float, lo: float, hi: float) -> list[list[float]]:
    """Closed intervals of start times in [lo, hi] at which ``req`` fits on ``node`` for
    ``dur``."""
    c, m, g = node.cap if req.exclusive else req.need
    ivs = node.starts(c, m, g, dur)
    if not node.windows and req.reservation is None:
        return [iv for iv in ivs if iv[0] <= hi]
    for ws, we, name in node.windows:
        if name != req.reservation:
            ivs = _remove_open(ivs, ws - dur, we)
    if req.reservation is not None:
        ivs = _intersect(ivs, [[ws, we - dur] for ws, we in req.allowed if we - dur >= ws])
    return [[max(a, lo), b] for a, b in ivs if b >= lo and a <= hi]


def _remove_open(ivs: list[list[float]], lo: float, hi: float) -> list[list[float]]:
    out: list[list[float]] = []
    for a, b in ivs:
        if b <= lo or a >= hi:
            out.append([a, b])
            continue
        if a <= lo:
            out.append([a, lo])
        if b >= hi:
            out.append([hi, b])
    return out


def _intersect(ivs: list[list[float]], allowed: list[list[float]]) -> list[list[float]]:
    out: list[list[float]] = []
    for a, b in ivs:
        for x, y in allowed:
            lo, hi = max(a, x), min(b, y)
            if lo <= hi:
                out.append([lo, hi])
    out.sort()
    return out


class _KeyPlan:
    """One request key's planning state within a pass: every candidate node's feasible
    start intervals and their sorted open/close events. For a one-node request without
    ``-w`` or topology it also keeps, per start time asked about, a heap of the nodes
    that open then by fit: a queue of same-shape jobs all planned at one time (many
    nodes whose running jobs share a time limit free together) then costs a heap pop per
    job, not a fit key of every node that opens then."""

    __slots__ = ("nodes", "where", "ivs", "events", "pos", "best", "stamp")

    def __init__(self, req: Request, duration: float, now: float, horizon: float) -> None:
        # start time -> heap of (fit key, node index, candidate, stamp when pushed)
        self.best: dict[float, list[tuple[FitKey, int, int, int]]] = {}
        self.stamp: list[int] = [0] * len(req.candidates)  # bumped when a node changes
        self.nodes = list(req.candidates)
        self.where = {n.name: i for i, n in enumerate(self.nodes)}
        self.ivs: list[list[list[float]]] = []
        events: list[tuple[float, int, int]] = []
        for i, node in enumerate(self.nodes):
            ivs = _feasible(node, req, duration, now, horizon)
            self.ivs.append(ivs)
            for a, b in ivs:
                events.append((a, 0, i))  # opens sort before closes at the same time
                if b != INF:
                    events.append((b, 1, i))
        events.sort()
        self.events = events
        self.pos = 0

    def refresh(self, req: Request, duration: float, log: list[NodeProfile], now: float, horizon: float) -> None:
        if self.pos == len(log):
            return
        where = self.where
        changed = sorted({where[n.name] for n in log[self.pos :] if n.name in where})
        events = self.events
        best, stamp = self.best, self.stamp
        for i in changed:
            for a, b in self.ivs[i]:
                del events[bisect_left(events, (a, 0, i))]
                if b != INF:
                    del events[bisect_left(events, (b, 1, i))]
            ivs = _feasible(self.nodes[i], req, duration, now, horizon)
            self.ivs[i] = ivs
            stamp[i] += 1  # its entries in the heaps are stale: pushed again where it opens
            for a, b in ivs:
                insort(events, (a, 0, i))
                if b != INF:
                    insort(events, (b, 1, i))
                heap = best.get(a)
                if heap is not None:
                    heappush(heap, self._entry(req, a, i))

    def _entry(self, req: Request, at: float, i: int) -> tuple[FitKey, int, int, int]:
        node = self.nodes[i]
        need = node.cap if req.exclusive else req.need
        return (fit_key(node, node.free_at(at), need), node.index, i, self.stamp[i])

    def _first_one(self, req: Request) -> tuple[float, list[NodeProfile]] | None:
        """``sweep`` for one node, no ``-w``, no topology: the first time any node opens,
        and the best fit of the nodes that open then (``pick``'s order: fit key, then
        node index), from that time's heap."""
        events = self.events
        if not events:
            return None
        at = events[0][0]  # an open: a node's close follows its open
        heap = self.best.get(at)
        if heap is None:
            end = bisect_left(events, (at, 1, -1))  # the opens at ``at``
            heap = [self._entry(req, at, i) for _t, _k, i in events[:end]]
            heapify(heap)
            self.best[at] = heap
        stamp = self.stamp
        while heap[0][3] != stamp[heap[0][2]]:  # a node changed since: its fresh entry is in
            heappop(heap)
        return at, [self.nodes[heap[0][2]]]

    def sweep(self, req: Request, topology: Topology | None = None) -> tuple[float, list[NodeProfile]] | None:
        need = req.nodes
        required = req.required
        if need == 1 and not required and topology is None:
            return self._first_one(req)
        return self._sweep_all(req, topology)

    def _sweep_all(self, req: Request, topology: Topology | None) -> tuple[float, list[NodeProfile]] | None:
        """The events in time order until enough nodes are open at once (and, with -w or a
        topology, the right ones)."""
        need = req.nodes
        required = req.required
        events = self.events
        open_: set[int] = set()
        at: float | None = None
        chosen: list[NodeProfile] | None = None
        k, n = 0, len(events)
        while k < n:
            t, kind, i = events[k]
            k += 1
            if kind == 1:
                open_.discard(i)
                continue
            open_.add(i)
            if len(open_) < need:
                continue
            # take every node that opens at the same time, for a better choice
            while k < n and events[k][0] == t and events[k][1] == 0:
                open_.add(events[k][2])
                k += 1
            if required and not required <= {self.nodes[j].name for j in open_}:
                continue
            if topology is not None:
                # the topology may refuse these nodes (--switches, --segment): later ones
                chosen = topology.pick(self._fitting(req, open_, t), need, required, req.topo)
                if chosen is None:
                    continue
            at = t
            break
        if at is None:
            return None
        if chosen is not None:
            return at, chosen
        return at, pick(self._fitting(req, open_, at), need, required)

    def _fitting(self, req: Request, open_: set[int], at: float) -> list[tuple[FitKey, NodeProfile]]:
        fitting: list[tuple[FitKey, NodeProfile]] = []
        for j in sorted(open_):
            node = self.nodes[j]
            c, m, g = node.cap if req.exclusive else req.need
            fitting.append((fit_key(node, node.free_at(at), (c, m, g)), node))
        return fitting
