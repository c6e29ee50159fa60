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

``earliest_start`` sweeps over each candidate node's intervals of feasible start times:
the first time at which enough nodes are feasible at once is the planned start. It costs
O(steps of the candidates' profiles) per request, with no per-time-slot node scans.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from muster.sched.filters import Request
from muster.sched.profile import INF, NodeProfile
from muster.sched.select import FitKey, fit_key, pick

__all__ = ["Planner", "need_on", "start_now", "windows_allow"]


def need_on(req: Request, node: NodeProfile) -> tuple[int, int, int]:
    """What the request takes from ``node``: the whole node when exclusive."""
    return node.cap if req.exclusive else req.need


def windows_allow(node: NodeProfile, req: Request, start: float, end: float) -> bool:
    """Whether running on ``node`` during [start, end) respects reservation windows."""
    for ws, we, name in node.windows:
        if name != req.reservation and start < we and end > ws:
            return False
    if req.reservation is not None:
        return any(ws <= start and end <= we for ws, we in req.allowed)
    return True


def start_now(
    req: Request, now: float, candidates: list[NodeProfile]
) -> tuple[list[NodeProfile] | None, list[NodeProfile]]:
    """The nodes to start ``req`` on now (None when it cannot start now without taking
    what is promised to a planned job or a reservation), and the candidates whose free
    resources now still cover one share of it: the pass only ever takes, so the others
    will not fit later in the pass either and the caller may drop them."""
    end = now + req.duration
    fitting: list[tuple[FitKey, NodeProfile]] = []
    still: list[NodeProfile] = []
    required = req.required
    exclusive = req.exclusive
    c, m, g = req.need
    for node in candidates:
        if exclusive:
            c, m, g = node.cap
            if node.running:
                continue
        if node.cpus[0] < c or node.mem[0] < m or node.gpus[0] < g:
            continue
        still.append(node)
        # The profile never falls below "now" unless something was taken from a later
        # time (``dips``); only then is the whole interval checked.
        if node.dips and not node.fits(now, end, c, m, g):
            continue
        if (node.windows or req.reservation is not None) and not windows_allow(node, req, now, end):
            continue
        fitting.append((fit_key(node, (node.cpus[0], node.mem[0], node.gpus[0]), (c, m, g)), node))
    if len(fitting) < req.nodes:
        return None, still
    if required and sum(1 for _, n in fitting if n.name in required) < len(required):
        return None, still
    return pick(fitting, req.nodes, required), still


def _feasible(node: NodeProfile, req: Request, lo: float, hi: float) -> list[list[float]]:
    """Closed intervals of start times in [lo, hi] at which ``req`` fits on ``node``."""
    c, m, g = need_on(req, node)
    dur = req.duration
    ivs = node.starts(c, m, g, dur)
    if node.windows:
        for ws, we, name in node.windows:
            if name == req.reservation:
                continue
            ivs = _remove_open(ivs, ws - dur, we)
    if req.reservation is not None:
        ivs = _intersect(ivs, [[ws, we - dur] for ws, we in req.allowed if we - dur >= ws])
    out = []
    for a, b in ivs:
        if b < lo or a > hi:
            continue
        out.append([max(a, lo), min(b, INF)])
    return out


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


class Planner:
    """Answers ``earliest_start`` for many requests in one pass, incrementally.

    For each distinct request (its placement key and duration) it keeps every candidate
    node's feasible start intervals and the sorted open/close events of those intervals.
    Later requests with the same key only recompute the nodes whose profile changed since
    (the pass reports every change through ``touched``), and the sweep stops at the first
    time enough nodes are feasible, so a single-node request is answered in a few steps.
    """

    __slots__ = ("now", "horizon", "log", "_plans")

    def __init__(self, now: float, horizon: float) -> None:
        self.now = now
        self.horizon = horizon
        self.log: list[NodeProfile] = []  # nodes whose profile changed, in order
        self._plans: dict[tuple[object, ...], _KeyPlan] = {}

    def touched(self, node: NodeProfile) -> None:
        self.log.append(node)

    def earliest_start(self, req: Request) -> tuple[float, list[NodeProfile]] | None:
        """The earliest time in [now, horizon] at which ``req`` fits, with the nodes to
        plan it on; None when it does not fit within the horizon."""
        pkey = (req.key, req.duration)
        kp = self._plans.get(pkey)
        if kp is None:
            kp = self._plans[pkey] = _KeyPlan(req, self.now, self.horizon)
        else:
            kp.refresh(req, self.log, self.now, self.horizon)
        kp.pos = len(self.log)
        return kp.sweep(req)


class _KeyPlan:
    __slots__ = ("nodes", "where", "ivs", "events", "pos")

    def __init__(self, req: Request, now: float, horizon: float) -> None:
        self.nodes = list(req.candidates)
        self.where = {n.name: i for i, n in enumerate(self.nodes)}
        self.ivs: list[list[list[float]]] = []
        events: list[tuple[float, int, int]] = []
        for i, node in enumerate(self.nodes):
            ivs = _feasible(node, req, now, horizon)
            self.ivs.append(ivs)
            for a, b in ivs:
                events.append((a, 0, i))  # opens sort before closes at the same time
                if b != INF:
                    events.append((b, 1, i))
        events.sort()
        self.events = events
        self.pos = 0

    def refresh(self, req: Request, log: list[NodeProfile], now: float, horizon: float) -> None:
        if self.pos == len(log):
            return
        changed = sorted({self.where[n.name] for n in log[self.pos :] if n.name in self.where})
        events = self.events
        for i in changed:
            for a, b in self.ivs[i]:
                del events[bisect_left(events, (a, 0, i))]
                if b != INF:
                    del events[bisect_left(events, (b, 1, i))]
            ivs = _feasible(self.nodes[i], req, now, horizon)
            self.ivs[i] = ivs
            for a, b in ivs:
                insort(events, (a, 0, i))
                if b != INF:
                    insort(events, (b, 1, i))

    def sweep(self, req: Request) -> tuple[float, list[NodeProfile]] | None:
        need = req.nodes
        required = req.required
        events = self.events
        open_: set[int] = set()
        at: float | None = None
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
            at = t
            break
        if at is None:
            return None
        fitting: list[tuple[FitKey, NodeProfile]] = []
        for j in sorted(open_):
            node = self.nodes[j]
            fitting.append((fit_key(node, node.free_at(at), need_on(req, node)), node))
        return at, pick(fitting, need, required)
