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

from muster.sched.filters import Request
from muster.sched.profile import INF, NodeProfile
from muster.sched.select import FitKey, fit_key, pick

__all__ = ["earliest_start", "need_on", "start_now", "windows_allow"]


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


def start_now(req: Request, now: float) -> list[NodeProfile] | None:
    """The nodes to start ``req`` on now, or None when it cannot start now without
    taking what is promised to a planned job or a reservation."""
    end = now + req.duration
    fitting: list[tuple[FitKey, NodeProfile]] = []
    required = req.required
    exclusive = req.exclusive
    c, m, g = req.need
    for node in req.candidates:
        if exclusive:
            c, m, g = node.cap
            if node.running:
                continue
        if node.cpus[0] < c or node.mem[0] < m or node.gpus[0] < g:
            continue
        # The profile never falls below "now" unless something was taken from a later
        # time (``dips``); only then is the whole interval checked.
        if node.dips and not node.fits(now, end, c, m, g):
            continue
        if (node.windows or req.reservation is not None) and not windows_allow(
            node, req, now, end
        ):
            continue
        fitting.append(
            (fit_key(node, (node.cpus[0], node.mem[0], node.gpus[0]), (c, m, g)), node)
        )
    if len(fitting) < req.nodes:
        return None
    if required and sum(1 for _, n in fitting if n.name in required) < len(required):
        return None
    return pick(fitting, req.nodes, required)


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


def earliest_start(
    req: Request, now: float, horizon: float
) -> tuple[float, list[NodeProfile]] | None:
    """The earliest time in [now, horizon] at which ``req`` fits, with the nodes to plan
    it on; None when it does not fit within the horizon."""
    need = req.nodes
    per_node: list[tuple[NodeProfile, list[list[float]]]] = []
    events: list[tuple[float, int]] = []
    required = req.required
    for node in req.candidates:
        ivs = _feasible(node, req, now, horizon)
        if not ivs:
            if node.name in required:
                return None
            continue
        per_node.append((node, ivs))
        for a, b in ivs:
            events.append((a, 0))  # opens sort before closes at the same time
            if b != INF:
                events.append((b, 1))
    if len(per_node) < need:
        return None
    events.sort()
    count = 0
    at: float | None = None
    for t, kind in events:
        if kind == 0:
            count += 1
            if count >= need and _enough(per_node, t, need, required):
                at = t
                break
        else:
            count -= 1
    if at is None:
        return None
    fitting: list[tuple[FitKey, NodeProfile]] = []
    for node, ivs in per_node:
        if any(a <= at <= b for a, b in ivs):
            fitting.append((fit_key(node, node.free_at(at), need_on(req, node)), node))
    return at, pick(fitting, need, required)


def _enough(
    per_node: list[tuple[NodeProfile, list[list[float]]]],
    t: float,
    need: int,
    required: frozenset[str],
) -> bool:
    """With -w, the count alone is not enough: the named nodes must be feasible too."""
    if not required:
        return True
    ok = {n.name for n, ivs in per_node if any(a <= t <= b for a, b in ivs)}
    return required <= ok and len(ok) >= need
