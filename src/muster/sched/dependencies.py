"""``--dependency``: whether a pending job may be considered yet.

Slurm's forms: ``after:ID[+MIN]``, ``afterany:ID``, ``afterok:ID``, ``afternotok:ID``,
``aftercorr:ID`` (read as afterok), ``afterburstbuffer:ID`` (read as afterany) and
``singleton``; several IDs join with ``:``; terms join with ``,`` (all must hold) or
``?`` (any may hold).

Job arrays (``Snapshot.arrays``: array job id -> {task id: job id}): ``ID`` naming an array
means every task of it; ``ID_TASK`` one task; ``aftercorr:ID`` makes task *i* of the
dependent array wait for task *i* of array ``ID`` (a task with no counterpart is free), and
reads as ``afterok`` on the whole array for a job that is not an array task. Over several
jobs, ``afterok``/``after``/``afterany`` need every one; ``afternotok`` waits until all
have ended and then needs one that failed.

The answer is one of three words: ``MET``, ``WAIT`` (can resolve later) or ``NEVER``
(e.g. ``afterok`` on a job that failed: Slurm's DependencyNeverSatisfied). A job id the
snapshot knows nothing about has left memory and counts as met, as Slurm does once a job
is purged. The controller refuses a submission naming a job id that never existed
("Job dependency problem"); jobs recorded before it did list such ids in
``Job.unknown_deps``, which can never be satisfied.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from muster.core.job import Job

__all__ = ["DepState", "DependencyIndex", "DependencyMemo", "Dependency", "parse_dependency"]

_TERM_RE = re.compile(r"^(after|afterany|afterok|afternotok|aftercorr|afterburstbuffer):(.+)$")
_ID_RE = re.compile(r"^(\d+)(?:_(\d+))?(?:\+(\d+))?$")


class DepState(Enum):
    MET = "met"
    WAIT = "wait"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class _Term:
    kind: str  # after, afterany, afterok, afternotok, aftercorr, singleton
    job_ids: tuple[tuple[int, int | None, int], ...]  # (job id, array task or None, delay s)


@dataclass(frozen=True, slots=True)
class Dependency:
    terms: tuple[_Term, ...]
    any_of: bool  # "?" joined: one term suffices

    @property
    def singleton(self) -> bool:
        return any(t.kind == "singleton" for t in self.terms)

    def job_ids(self) -> list[int]:
        """The job ids named (array job ids for ``ID_TASK``), in order, once each."""
        return list(dict.fromkeys(j for t in self.terms for j, _task, _delay in t.job_ids))


@lru_cache(maxsize=4096)
def parse_dependency(text: str) -> Dependency:
    """Parse a dependency string; raises ValueError on bad syntax."""
    text = text.strip()
    if "," in text and "?" in text:
        raise ValueError(f"Invalid dependency specification: {text}")
    any_of = "?" in text
    terms: list[_Term] = []
    for raw in text.split("?" if any_of else ","):
        raw = raw.strip()
        if raw == "singleton":
            terms.append(_Term("singleton", ()))
            continue
        m = _TERM_RE.match(raw)
        if m is None:
            raise ValueError(f"Invalid dependency specification: {text}")
        kind = {"afterburstbuffer": "afterany"}.get(m.group(1), m.group(1))
        ids: list[tuple[int, int | None, int]] = []
        for part in m.group(2).split(":"):
            im = _ID_RE.match(part)
            if im is None or (im.group(3) and kind != "after"):
                raise ValueError(f"Invalid dependency specification: {text}")
            task = int(im.group(2)) if im.group(2) is not None else None
            ids.append((int(im.group(1)), task, int(im.group(3) or 0) * 60))
        terms.append(_Term(kind, tuple(ids)))
    if not terms:
        raise ValueError(f"Invalid dependency specification: {text}")
    return Dependency(tuple(terms), any_of)


class DependencyIndex:
    """What the dependency rules need to know about other jobs, indexed once per pass."""

    __slots__ = ("started", "pending", "finished", "active_names", "arrays")

    def __init__(
        self,
        pending: list[Job],
        running: list[Job],
        finished: Mapping[int, str],
        arrays: dict[int, dict[int, int]] | None = None,
    ) -> None:
        self.started = {j.job_id: (j.start_time or 0.0) for j in running}
        self.pending = {j.job_id for j in pending}
        self.finished = finished
        self.active_names = {(j.user, j.spec.name) for j in running}
        self.arrays = arrays or {}

    def state(self, job: Job, now: float) -> DepState:
        text = job.spec.dependency
        if not text:
            return DepState.MET
        try:
            dep = parse_dependency(text)
        except ValueError:
            return DepState.NEVER
        states = [self._term(job, t, now) for t in dep.terms]
        if dep.any_of:
            if DepState.MET in states:
                return DepState.MET
            return DepState.WAIT if DepState.WAIT in states else DepState.NEVER
        if DepState.NEVER in states:
            return DepState.NEVER
        return DepState.WAIT if DepState.WAIT in states else DepState.MET

    def _term(self, job: Job, term: _Term, now: float) -> DepState:
        if term.kind == "singleton":
            busy = (job.user, job.spec.name) in self.active_names
            return DepState.WAIT if busy else DepState.MET
        worst = DepState.MET
        for job_id, task, delay in term.job_ids:
            if job_id in job.unknown_deps:
                return DepState.NEVER
            kind, targets = self._targets(job, term.kind, job_id, task)
            s = self._all(kind, targets, delay, now)
            if s is DepState.NEVER:
                return s
            if s is DepState.WAIT:
                worst = s
        return worst

    def _targets(self, job: Job, kind: str, job_id: int, task: int | None) -> tuple[str, list[int]]:
        """The job ids a reference stands for, and the rule to apply to each."""
        tasks = self.arrays.get(job_id)
        if kind == "aftercorr":
            kind = "afterok"
            if tasks is not None and job.array_task_id is not None and task is None:
                mine = tasks.get(job.array_task_id)
                return kind, [] if mine is None else [mine]
        if tasks is None:
            return kind, [job_id]
        if task is not None:
            one = tasks.get(task)
            return kind, [] if one is None else [one]
        return kind, sorted(tasks.values())

    def _all(self, kind: str, targets: list[int], delay: int, now: float) -> DepState:
        states = [self._one(kind, t, delay, now) for t in targets]
        if kind == "afternotok" and len(states) > 1:
            # every job must have ended; one failure is enough
            if DepState.WAIT in states:
                return DepState.WAIT
            return DepState.MET if DepState.MET in states else DepState.NEVER
        if DepState.NEVER in states:
            return DepState.NEVER
        return DepState.WAIT if DepState.WAIT in states else DepState.MET

    def _one(self, kind: str, job_id: int, delay: int, now: float) -> DepState:
        if job_id in self.pending:
            return DepState.WAIT
        started = self.started.get(job_id)
        if started is not None:
            if kind == "after" and started + delay <= now:
                return DepState.MET
            return DepState.WAIT
        state = self.finished.get(job_id)
        if state is None or kind in ("after", "afterany"):
            return DepState.MET
        ok = state == "COMPLETED"
        if kind == "afterok":
            return DepState.MET if ok else DepState.NEVER
        return DepState.NEVER if ok else DepState.MET  # afternotok


class DependencyMemo:
    """Dependency states kept from one pass to the next by whoever runs the passes (the
    controller, the simulator), each forgotten on the events that can change it: a job it
    names leaving or entering the queue, starting, or ending (a job that is neither
    pending nor running has ended, and its end state is final until it is queued again).

    Each pass, ``sync`` compares the pending job ids and the running jobs' start times
    with the previous pass's (set operations), and drops the states of the jobs that name
    one that changed; ``get`` answers from what is left. Only plain references are kept:
    a dependency with ``singleton``, ``after:ID+MIN`` (it moves with time), ``aftercorr``,
    an array job, or ids unknown at submission is computed afresh every pass. The
    answers are those of ``DependencyIndex.state`` for the same snapshot."""

    __slots__ = ("pending", "started", "states", "dependents")

    def __init__(self) -> None:
        self.pending: set[int] | None = None  # the pending job ids of the last pass
        self.started: dict[int, float] = {}  # the running jobs of the last pass: start time
        # job id -> (its dependency text, its state, the ids it names)
        self.states: dict[int, tuple[str, DepState, tuple[int, ...]]] = {}
        self.dependents: dict[int, set[int]] = {}  # a named id -> the jobs that name it

    def sync(self, pending: list[Job], running: list[Job]) -> None:
        """Forget what this pass's queue makes stale (call once per pass, before ``get``)."""
        ids = {j.job_id for j in pending}
        started = {j.job_id: (j.start_time or 0.0) for j in running}
        if self.pending is None:
            self.states.clear()
            self.dependents.clear()
        elif self.states:
            changed = ids ^ self.pending
            changed.update(k for k, _ in started.items() ^ self.started.items())
            states, dependents = self.states, self.dependents
            for t in changed:
                states.pop(t, None)  # (a job that left the queue needs no state)
                for job_id in dependents.pop(t, ()):
                    states.pop(job_id, None)
            if len(dependents) > 2 * len(states) + 1024:  # named ids of jobs long gone
                self.dependents = {}
                for job_id, (_text, _state, named) in states.items():
                    for t in named:
                        self.dependents.setdefault(t, set()).add(job_id)
        self.pending, self.started = ids, started

    def get(self, job: Job) -> DepState | None:
        """The job's state from an earlier pass, if nothing it names changed since."""
        hit = self.states.get(job.job_id)
        if hit is None or hit[0] != job.spec.dependency:
            return None
        return hit[1]

    def put(self, job: Job, state: DepState, arrays: Mapping[int, object]) -> None:
        """Remember the state just computed for ``job``, if it is one that only the ids it
        names can change."""
        text = job.spec.dependency
        if not text or job.unknown_deps:
            return
        try:
            dep = parse_dependency(text)
        except ValueError:
            return
        for term in dep.terms:
            if term.kind in ("singleton", "aftercorr"):
                return
            for job_id, task, delay in term.job_ids:
                if delay or task is not None or job_id in arrays:
                    return
        named = tuple(dep.job_ids())
        self.states[job.job_id] = (text, state, named)
        for t in named:
            self.dependents.setdefault(t, set()).add(job.job_id)
