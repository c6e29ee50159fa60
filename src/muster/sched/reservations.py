"""Advance reservations: which nodes are held for whom, and when.

Rules the pass applies (see ``backfill`` and ``cycle``):

* a job that names a reservation runs only on the reservation's nodes, inside one of its
  windows, and must end (by its time limit) before that window ends;
* every other job is kept off a reservation's nodes during its windows: on those nodes it
  may run only if it ends (by its time limit) before the window starts, so a job with no
  time limit never starts on a node with a reservation ahead;
* ``DAILY``/``WEEKLY`` repeat a window every day/week; ``windows`` expands them over the
  horizon the pass looks at, a pure function of the reservation and the times given;
* ``MAINT`` blocks like any reservation (sinfo shows the nodes as MAINT); a job kept out
  by one alone waits with ReqNodeNotAvail ("Reserved for maintenance") rather than
  Resources; ``IGNORE_JOBS`` only matters when the reservation is created (it
  may overlap running jobs), so the scheduler has nothing to do for it.
"""

from __future__ import annotations

from muster.core.job import Job
from muster.sched.snapshot import ReservationView

__all__ = ["ReservationBook", "Window", "may_use", "windows"]

_PERIOD = {"DAILY": 86400, "WEEKLY": 7 * 86400, "HOURLY": 3600}
_MAX_REPEATS = 1000

Window = tuple[float, float, str]  # (start, end, reservation name)


def windows(res: ReservationView, since: float, until: float) -> list[tuple[float, float]]:
    """The reservation's windows that end after ``since`` and start before ``until``,
    in time order. A repeating reservation yields one window per period."""
    if res.end <= res.start:
        return []
    period = next((_PERIOD[f] for f in (f.upper() for f in res.flags) if f in _PERIOD), 0)
    if not period:
        return [(res.start, res.end)] if res.end > since and res.start < until else []
    # first repetition that ends after `since`
    k = 0
    if res.end <= since:
        k = int((since - res.end) // period) + 1
    out: list[tuple[float, float]] = []
    while len(out) < _MAX_REPEATS:
        start, end = res.start + k * period, res.end + k * period
        if start >= until:
            break
        if end > since:
            out.append((start, end))
        k += 1
    return out


def may_use(res: ReservationView, job: Job) -> bool:
    """A job may run in a reservation that names its user or its account."""
    if job.user in res.users:
        return True
    return job.spec.account is not None and job.spec.account in res.accounts


class ReservationBook:
    """The pass's view of reservations: by name, and the windows on each node."""

    __slots__ = ("by_name", "windows_by_name", "node_windows", "maint")

    def __init__(self, reservations: list[ReservationView], since: float, until: float) -> None:
        self.by_name: dict[str, ReservationView] = {}
        self.windows_by_name: dict[str, list[tuple[float, float]]] = {}
        self.node_windows: dict[str, list[Window]] = {}
        self.maint = frozenset(r.name for r in reservations if "MAINT" in (f.upper() for f in r.flags))
        for res in sorted(reservations, key=lambda r: r.name):
            self.by_name[res.name] = res
            ws = windows(res, since, until)
            self.windows_by_name[res.name] = ws
            for node in res.nodes:
                slots = self.node_windows.setdefault(node, [])
                slots.extend((s, e, res.name) for s, e in ws)
        for slots in self.node_windows.values():
            slots.sort()

    def __bool__(self) -> bool:
        return bool(self.by_name)
