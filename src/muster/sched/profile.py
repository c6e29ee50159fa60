"""The availability profile: each node's free resources from ``now`` on.

A ``NodeProfile`` is the pass's working copy of one node. Its free CPUs, memory and GPUs
form a step function of time: ``times[i]`` is when step ``i`` begins (``times[0]`` is
``now``) and ``cpus[i]``/``mem[i]``/``gpus[i]`` hold from then until ``times[i + 1]``
(the last step lasts forever). It starts as the node's free resources now, rising at the
expected end (start + time limit) of each job running on it; a running job with no time
limit never gives its resources back in the plan, and one already past its limit is
expected to go at the next resolution step.

The pass then ``take``s from it: a job started now takes from ``now`` to its end, a
planned job (a *reservation in the plan*) from its planned start to its end. Because every
start and every plan is taken out of the same profile, nothing is ever given twice and no
later job can use what an earlier one was promised.

Invariants: ``times`` is strictly increasing and starts at ``now``; every value stays
between 0 and the node's capacity; ``gpu_ids`` (the GPU indices free *now*) has exactly
``gpus[0]`` entries, except while a conservative hold from ``now`` (``Backfill.hold``)
counts GPUs it has not taken an index for: then it has that many more.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

from muster.sched.reservations import Window
from muster.sched.snapshot import NodeView

__all__ = ["EPS", "INF", "NodeProfile", "Need"]

INF = math.inf
# Times closer than this are the same time: a start computed as (end - duration) and
# then ended at (start + duration) must land on the very step it came from.
EPS = 1e-6

# Per-node need: (cpus, mem, gpus).
Need = tuple[int, int, int]

_NO_FEATURES: frozenset[str] = frozenset()


class NodeProfile:
    __slots__ = (
        "view",
        "name",
        "index",
        "cap",
        "gpu_type",
        "features",
        "weight",
        "switch",
        "available",
        "gpu_ids",
        "running",
        "times",
        "cpus",
        "mem",
        "gpus",
        "dips",
        "windows",
        "version",
        "_memo",
        "_memo_version",
    )

    def __init__(self, view: NodeView, now: float) -> None:
        # Every pass builds one per node: no call that a comparison can replace.
        self.view = view
        self.name = view.name
        self.index = view.index
        self.cap: Need = (view.cpus, view.mem, view.gpus)
        self.gpu_type = view.gpu_type
        self.features = frozenset(view.features) if view.features else _NO_FEATURES
        self.weight = view.weight
        self.switch = view.switch
        self.available = view.available
        self.gpu_ids = sorted(view.free_gpu_ids)
        self.running = view.running_jobs
        self.times: list[float] = [now]
        free_cpus, free_mem = view.free_cpus, view.free_mem
        self.cpus = [free_cpus if free_cpus > 0 else 0]
        self.mem = [free_mem if free_mem > 0 else 0]
        self.gpus = [len(self.gpu_ids)]
        # True once something is taken from a future time: the profile may then be lower
        # later than now, and "fits now" no longer implies "fits for the whole job".
        self.dips = False
        self.windows: Sequence[Window] = ()  # set by the pass for nodes with reservations
        self.version = 0
        self._memo: dict[tuple[int, int, int], list[list[float]]] = {}
        self._memo_version = 0

    # -- building -------------------------------------------------------------------
    def add_releases(self, releases: list[tuple[float, int, int, int]]) -> None:
        """Add the ends of running jobs: (time, cpus, mem, gpus) given back at time.
        Call once, before any ``take``."""
        if not releases:
            return
        releases.sort()
        times, cpus, mem, gpus = self.times, self.cpus, self.mem, self.gpus
        now = times[0]
        c, m, g = cpus[0], mem[0], gpus[0]
        cc, cm, cg = self.cap
        # Every pass builds every node's profile: comparisons rather than min() calls.
        for t, dc, dm, dg in releases:
            if t <= now:
                continue
            c += dc
            if c > cc:
                c = cc
            m += dm
            if m > cm:
                m = cm
            g += dg
            if g > cg:
                g = cg
            if t == times[-1]:
                cpus[-1], mem[-1], gpus[-1] = c, m, g
            else:
                times.append(t)
                cpus.append(c)
                mem.append(m)
                gpus.append(g)
        self.version += 1

    # -- questions ------------------------------------------------------------------
    def fits_now(self, c: int, m: int, g: int) -> bool:
        return self.cpus[0] >= c and self.mem[0] >= m and self.gpus[0] >= g

    def fits(self, start: float, end: float, c: int, m: int, g: int) -> bool:
        """Whether (c, m, g) is free during all of [start, end)."""
        times = self.times
        i = bisect_right(times, start) - 1
        if i < 0:
            i = 0
        n = len(times)
        cpus, mem, gpus = self.cpus, self.mem, self.gpus
        while True:
            if cpus[i] < c or mem[i] < m or gpus[i] < g:
                return False
            i += 1
            if i == n or times[i] >= end - EPS:
                return True

    def free_at(self, t: float) -> Need:
        i = max(0, bisect_right(self.times, t) - 1)
        return (self.cpus[i], self.mem[i], self.gpus[i])

    def starts(self, c: int, m: int, g: int, duration: float) -> list[list[float]]:
        """The start times at which (c, m, g) stays free for ``duration``: a list of closed
        intervals [first, last] in time order (last may be INF). Callers must not modify
        the answer.

        Derived from the runs of steps where (c, m, g) fits, which are remembered per
        need until the profile changes: jobs of one shape mostly differ in their time
        limit, and a pass asks this of every candidate node for each of them."""
        if self._memo_version != self.version:
            self._memo.clear()
            self._memo_version = self.version
        key = (c, m, g)
        runs = self._memo.get(key)
        if runs is None:
            runs = self._memo[key] = self._runs(c, m, g)
        if duration == INF:
            return [r for r in runs if r[1] == INF]
        return [r if r[1] == INF else [r[0], r[1] - duration] for r in runs if r[1] - r[0] >= duration]

    def _runs(self, c: int, m: int, g: int) -> list[list[float]]:
        """The maximal [start, end) spans of steps where (c, m, g) is free; the last may
        end at INF."""
        out: list[list[float]] = []
        steps = zip(self.times, self.cpus, self.mem, self.gpus, strict=True)
        if not self.dips:
            # Without dips the profile only rises: once it fits, it fits forever.
            for t, ci, mi, gi in steps:
                if ci >= c and mi >= m and gi >= g:
                    return [[t, INF]]
            return out
        run: float | None = None
        for t, ci, mi, gi in steps:
            if ci >= c and mi >= m and gi >= g:
                if run is None:
                    run = t
            elif run is not None:
                out.append([run, t])
                run = None
        if run is not None:
            out.append([run, INF])
        return out

    # -- changes --------------------------------------------------------------------
    def take(self, start: float, end: float, c: int, m: int, g: int) -> None:
        """Subtract (c, m, g) during [start, end); the caller has checked it fits."""
        i = self._split(start)
        j = self._split(end) if end != INF else len(self.times)
        cpus, mem, gpus = self.cpus, self.mem, self.gpus
        for k in range(i, j):
            cpus[k] -= c
            mem[k] -= m
            gpus[k] -= g
        if start > self.times[0]:
            self.dips = True
        self.version += 1

    def give(self, start: float, end: float, c: int, m: int, g: int) -> None:
        """Add back what ``take(start, end, c, m, g)`` took (a hold being released)."""
        i = self._split(start)
        j = self._split(end) if end != INF else len(self.times)
        cpus, mem, gpus = self.cpus, self.mem, self.gpus
        for k in range(i, j):
            cpus[k] += c
            mem[k] += m
            gpus[k] += g
        self.version += 1

    def fence(self, start: float, end: float) -> None:
        """Nothing free during [start, end): the node is kept idle for a job beside it
        (--exclusive=topo). Whatever was free is taken; nothing is given back later."""
        i = self._split(start)
        j = self._split(end) if end != INF else len(self.times)
        cpus, mem, gpus = self.cpus, self.mem, self.gpus
        for k in range(i, j):
            cpus[k] = mem[k] = gpus[k] = 0
        if start > self.times[0]:
            self.dips = True
        self.version += 1

    def take_gpu_ids(self, count: int) -> list[int]:
        """The ``count`` lowest free GPU indices now, removed from the free list."""
        ids, self.gpu_ids = self.gpu_ids[:count], self.gpu_ids[count:]
        return ids

    def _split(self, t: float) -> int:
        """Make ``t`` a step boundary; return the index of the step starting at ``t``."""
        times = self.times
        i = bisect_right(times, t)
        if i > 0 and t - times[i - 1] < EPS:
            return i - 1
        if i == 0:  # before now: clamp (callers never take from the past)
            return 0
        if i < len(times) and times[i] - t < EPS:
            return i
        times.insert(i, t)
        self.cpus.insert(i, self.cpus[i - 1])
        self.mem.insert(i, self.mem[i - 1])
        self.gpus.insert(i, self.gpus[i - 1])
        return i
