"""The failure ledger: every node failure, failed launch, Prolog, Epilog, health or pre-flight
check, GPU fault, hang and replacement, kept in the store with its evidence (which check,
what output, which job and ranks) and its attribution (node, job or unknown); and the
quarantine rule's inputs (``QuarantineFailures=``, ``QuarantineWindow=``).

The records are rows of the store's append-only event log (kind ``ledger``, no job id: the
job is in the record), so both backends keep them and a restarted controller, or the one
that took over, reads them back (``load``: the records of the last window). Memory holds, per
node, its last ``KEEP`` records (``scontrol show node`` and ``GET /v1/nodes/{name}/failures``
show them) and, per cause (a job, a user's hangs), the nodes it failed on, so a failure is
judged in O(its node's and its cause's records), never by a scan of the ledger.

Whose fault, and when a node is quarantined, are pure rules: ``core.attribution``. What a
verdict does (drain, quarantine, give back a node a job's own failure drained) is
``ClusterState.node_fault``, the one entry every caller uses.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from muster.core.attribution import KINDS, Failure, attribute, blame_key, quarantine_due
from muster.core.config import Config
from muster.ctld.store import Store

__all__ = ["DEFAULT_FAILURES", "DEFAULT_WINDOW", "Entry", "Ledger"]

log = logging.getLogger("musterctld")

DEFAULT_FAILURES = 2  # QuarantineFailures: distinct causes within the window (0: never)
DEFAULT_WINDOW = 86400  # QuarantineWindow, seconds
KEEP = 32  # records kept in memory per node (and per cause)
EVIDENCE_MAX = 1024  # characters of evidence kept per record
PRUNE_AT = 10000  # causes kept in memory before the ones out of the window are dropped
REPEAT = 300.0  # seconds within which the same failure of a job on a node is one record


@dataclass(frozen=True)
class Entry:
    """A ledger record as stored and shown: the failure, how it was judged, what was done."""

    failure: Failure
    attribution: str
    action: str = ""  # "drained", "quarantined", "released", "" (nothing)

    def to_dict(self) -> dict[str, Any]:
        f = self.failure
        return {
            "time": f.time,
            "node": f.node,
            "kind": f.kind,
            "job_id": f.job_id,
            "user": f.user,
            "ranks": list(f.ranks),
            "evidence": f.evidence,
            "attribution": self.attribution,
            "action": self.action,
            "counted": f.counted,
            "behind": f.behind,
        }

    @classmethod
    def from_dict(cls, time: float, d: dict[str, Any]) -> Entry:
        f = Failure(
            time=float(d.get("time", time)),
            node=str(d["node"]),
            kind=str(d.get("kind", "")),
            job_id=int(d.get("job_id") or 0),
            user=str(d.get("user") or ""),
            evidence=str(d.get("evidence") or ""),
            ranks=tuple(int(r) for r in d.get("ranks") or ()),
            counted=bool(d.get("counted", True)),
            behind=bool(d.get("behind", False)),
        )
        return cls(f, str(d.get("attribution") or ""), str(d.get("action") or ""))


class Ledger:
    """The ledger in memory, equal to its rows in the store from ``load`` on."""

    def __init__(self, store: Store, config: Callable[[], Config]) -> None:
        self.store = store
        self.config = config  # the controller's, as reconfigure last set it
        self.by_node: dict[str, deque[Entry]] = {}
        self.by_cause: dict[str, deque[Failure]] = {}
        self.resumed_at: dict[str, float] = {}
        # records committed by this controller, by (kind, attribution): /metrics
        self.added: Counter[tuple[str, str]] = Counter()

    # --- settings (read at each use: scontrol reconfigure changes them live) ---------------

    @property
    def threshold(self) -> int:
        return self.config().get_int("QuarantineFailures", DEFAULT_FAILURES)

    @property
    def window(self) -> float:
        return float(self.config().get_int("QuarantineWindow", DEFAULT_WINDOW))

    # --- start-up --------------------------------------------------------------------------

    def load(self, now: float) -> None:
        """The records of the last window (at least a day) back from the store."""
        self.by_node.clear()
        self.by_cause.clear()
        self.resumed_at.clear()
        for t, data in self.store.ledger(now - max(self.window, float(DEFAULT_WINDOW))):
            try:
                self._remember(Entry.from_dict(t, data))
            except (KeyError, TypeError, ValueError):
                log.warning("failure ledger: a record the controller cannot read was skipped: %r", data)

    def _remember(self, entry: Entry) -> None:
        f = entry.failure
        self.by_node.setdefault(f.node, deque(maxlen=KEEP)).append(entry)
        if f.kind == "resume":
            self.resumed_at[f.node] = f.time
        else:
            self.by_cause.setdefault(blame_key(f), deque(maxlen=KEEP)).append(f)
            if len(self.by_cause) > PRUNE_AT:
                self.prune(f.time)

    def prune(self, now: float) -> None:
        """Forget the causes (jobs, users) whose last failure left the window: one per job
        that ever failed would otherwise pile up in memory (the store keeps them all)."""
        horizon = now - max(self.window, float(DEFAULT_WINDOW))
        for key in [k for k, seen in self.by_cause.items() if not seen or seen[-1].time < horizon]:
            del self.by_cause[key]

    # --- records ---------------------------------------------------------------------------

    def failure(
        self,
        now: float,
        node: str,
        kind: str,
        job_id: int = 0,
        user: str = "",
        evidence: str = "",
        ranks: tuple[int, ...] = (),
        counted: bool = True,
        behind: bool = False,
    ) -> tuple[Failure, str]:
        """A failure judged against the records it may share a cause with (not yet stored).
        ``counted`` False: the node was out of service already (``Failure.counted``)."""
        if kind not in KINDS:
            raise ValueError(f"unknown ledger kind {kind!r}")
        same_outage = any(e.failure.kind == kind and e.failure.time == now for e in self.by_node.get(node, ()))
        f = Failure(now, node, kind, job_id, user, evidence[:EVIDENCE_MAX], ranks, counted and not same_outage, behind)
        return f, attribute(f, [*self.related(f), f], self.window)

    def repeated(self, f: Failure) -> Entry | None:
        """The record ``f`` repeats: the same failure of the same job (without a job: with the
        same evidence) on the same node told again within ``REPEAT`` seconds (a launch's
        answer and the agent's heartbeat both report a failed Prolog)."""
        for e in reversed(self.by_node.get(f.node, ())):
            if f.time - e.failure.time > REPEAT:
                break
            same = e.failure.job_id == f.job_id if f.job_id else e.failure.evidence == f.evidence
            if e.failure.kind == f.kind and same:
                return e
        return None

    def related(self, f: Failure) -> list[Failure]:
        """The records ``f`` is judged against: its node's and its cause's."""
        mine = [e.failure for e in self.by_node.get(f.node, ())]
        return [*mine, *(o for o in self.by_cause.get(blame_key(f), ()) if o.node != f.node)]

    def add(self, f: Failure, attribution: str, action: str = "") -> Entry:
        """Commit the record, then remember it (``StorageError`` leaves memory as it was)."""
        entry = Entry(f, attribution, action)
        self.store.add_ledger(f.time, entry.to_dict())
        self._remember(entry)
        self.added[(f.kind, attribution or "none")] += 1
        return entry

    def resume(self, now: float, node: str, user: str) -> Entry:
        """An operator returned ``node``: its earlier failures no longer count towards
        quarantine."""
        return self.add(Failure(now, node, "resume", evidence=f"resumed by {user}"), "", "resumed")

    def same_cause_nodes(self, f: Failure) -> list[str]:
        """The other nodes where ``f``'s cause failed the same way within the window."""
        seen = self.by_cause.get(blame_key(f), ())
        return sorted(
            {o.node for o in seen if o.node != f.node and o.kind == f.kind and f.time - o.time <= self.window}
        )

    def quarantine_due(self, node: str, now: float) -> list[Failure]:
        """The failures that take ``node`` out of service now (``core.attribution``)."""
        records = [e.failure for e in self.by_node.get(node, ())]
        causes = {blame_key(r) for r in records}
        others = [o for c in causes for o in self.by_cause.get(c, ()) if o.node != node]
        return quarantine_due(node, [*records, *others], now, self.threshold, self.window, self.resumed_at.get(node))

    def history(self, node: str, limit: int = KEEP) -> list[Entry]:
        """The node's latest records, oldest first."""
        return list(self.by_node.get(node, ()))[-limit:]

    def summary(self, failures: list[Failure]) -> str:
        """``quarantined: ...``'s text: how many failures in the window, the last kinds and jobs."""
        parts = [f.kind + (f" job {f.job_id}" if f.job_id else "") for f in failures[-4:]]
        return f"{len(failures)} failures in {self.window:.0f} s ({'; '.join(parts)})"
