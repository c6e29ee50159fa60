"""Jobs as the API lists them, each encoded once per change, not once per request.

``squeue`` over a long queue used to cost the controller a wire dict and a JSON encoding of
every job at every request (~0.2 ms a job): most of a thousand-job squeue. ``JobListing``
keeps each job's encoded JSON fragment (one for the brief view squeue reads, one for the
full view) and assembles a listing from fragments; a fragment is encoded again only when
its job changed. A single job costs its own fragment, never the queue's.

A fragment is current when two things still match what it was encoded from:

* the job's version, ``ClusterState.job_versions``, bumped by every committed change
  (``ClusterState.record``: submit, start, end, update, hold, release, requeue, cancel) and
  by a reload from the store. Changes to a job's nested objects (its spec, shape,
  allocation) are only ever made inside such a change;
* the job's fields that change without a commit, compared at each request (``VOLATILE``):
  the scheduling pass and the limits write priority, reason and planned start, progress
  reports are committed only now and then, and a preemption's marks are cleared when its
  victim has ended. Every other field changes only with the version.

That second list is checked, not trusted: with ``check`` (``MUSTER_CHECK_LISTING=1``, which
the test suite sets for every controller it starts) a cached fragment is also compared with
all of the job's own fields, and a field that changed without a new version fails the
request, naming the field.

A purged job's fragments go with it (``prune``). The run time of a running job depends on
the time of the request, so its fragment is stored without it and ``run_time`` is added at
assembly, as is a heterogeneous job's set of component ids (which components are still in
memory; ``hetindex.with_id_sets``). Who may see which jobs (``PrivateData``) is decided per caller before assembly:
fragments hold nothing that depends on the caller.

A brief listing may be narrowed to the fields a command's format reads (``?view=brief&
fields=job_id,state,spec.name``, ``select``): each job's object then holds those of its
brief keys (``spec.K`` a key of its ``spec``), a few values instead of forty, cached per
set of fields like the rest.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

from muster.core.arrays import format_ranges
from muster.core.errors import InvalidRequest
from muster.core.job import Job
from muster.core.states import JobState
from muster.ctld.hetindex import components
from muster.ctld.wire import BRIEF_FIELDS, BRIEF_SPEC_KEYS, job_wire

# The job's fields written outside a commit, compared at each request (the module's text).
VOLATILE = (
    "priority",
    "reason",
    "planned_start",
    "planned_nodes",
    "progress",
    "preempted_by",
    "preempt_deadline",
    "preempt_mode",
    "preempt_time",
)
_volatile = attrgetter(*VOLATILE)
# All of the job's own fields, compared in ``check`` mode; nested objects go with the version.
_NESTED = {"spec", "shape"}
_OWN = tuple(f.name for f in dataclasses.fields(Job) if f.name not in _NESTED)
_own = attrgetter(*_OWN)
# As starlette's JSONResponse encodes (the uncached path), so both give the same bytes.
_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode


# What a brief job may be narrowed to: its keys (``wire.job_wire(brief=True)``) and spec.K.
BRIEF_KEYS = frozenset(
    (*BRIEF_FIELDS, "spec", "shape", "state", "reason", "run_time", "het_job_id_set")
    + ("nodelist", "sched_nodelist", "num_nodes", "num_cpus", "num_tasks", "num_gpus", "state_code", "tres")
    + ("account", "qos", "batch_host", "stragglers")
) | {f"spec.{k}" for k in BRIEF_SPEC_KEYS}


def select(fields: list[str]) -> tuple[str, ...]:
    """The fields a brief listing is narrowed to; an unknown one is refused."""
    unknown = [f for f in fields if f not in BRIEF_KEYS]
    if unknown:
        raise InvalidRequest(f"unknown job field(s): {','.join(unknown)} (known: {','.join(sorted(BRIEF_KEYS))})")
    return tuple(dict.fromkeys(fields))


def _narrow(d: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    out = {k: d[k] for k in fields if k in d}
    spec = [k[5:] for k in fields if k.startswith("spec.")]
    if spec and "spec" not in fields:
        full = d.get("spec") or {}
        out["spec"] = {k: full[k] for k in spec if k in full}
    return out


_Entry = tuple[int, tuple[Any, ...], bytes, int | None, tuple[Any, ...] | None]


def _unchanged(job: Job, entry: _Entry) -> bool:
    """``check`` mode: the job's own fields are those its fragment was encoded from, or a
    field changed without a new version (not in ``VOLATILE``, and no ``record``): a bug."""
    then, now = entry[4], _own(job)
    if then is None or then == now:
        return True
    names = [n for n, a, b in zip(_OWN, then, now, strict=True) if a != b]
    raise AssertionError(f"job {job.job_id}: {', '.join(names)} changed without a new version (ctld.listing)")


def _run_time(job: Job, now: float) -> int:
    return int(job.run_seconds(now))  # suspended time not counted


class JobListing:
    """Encoded fragments of jobs, by view and job id, with what they were encoded from."""

    __slots__ = ("versions", "check", "_views", "_size", "encoded", "_kept")

    def __init__(self, versions: dict[int, int], check: bool = False) -> None:
        self.versions = versions  # ClusterState.job_versions: read, never written here
        self.check = check  # compare every own field of a cached job too (the module's text)
        # (brief, narrowed to) -> job id -> (version, volatile fields, fragment, het leader
        # whose id set it shows, all own fields when checking): one dict per view, so that
        # a listing's lookups are by job id alone
        self._views: dict[tuple[bool, tuple[str, ...] | None], dict[int, _Entry]] = {}
        self._size = 0  # fragments held, in all views
        self.encoded = 0  # fragments encoded so far (what a test counts)
        self._kept = 0  # fragments left by the last prune

    def fragment(
        self,
        job: Job,
        now: float,
        brief: bool,
        jobs: Mapping[int, Job],
        sets: dict[int, str] | None = None,
        narrow: tuple[str, ...] | None = None,
    ) -> bytes:
        """The job's JSON object as ``job_wire`` and ``hetindex.with_id_sets`` give it,
        encoded; ``jobs``: all jobs in memory (a heterogeneous job's set of ids is those of
        its components still there), ``sets``: those sets found so far in this listing;
        ``narrow``: those fields alone (``select``; a brief listing's)."""
        view = self._view(brief, narrow)
        version = self.versions.get(job.job_id, 0)
        fields = _volatile(job)
        hit = view.get(job.job_id)
        if hit is not None and hit[0] == version and hit[1] == fields and (not self.check or _unchanged(job, hit)):
            frag, leader = hit[2], hit[3]
        else:
            d = job_wire(job, now, brief)
            if job.state is JobState.RUNNING:
                d.pop("run_time", None)
            leader = d.get("het_job_id")
            if narrow is not None:
                d = _narrow(d, narrow)
                if "het_job_id_set" not in narrow:
                    leader = None
            frag = _encode(d).encode("utf-8")
            self.encoded += 1
            self._size += hit is None
            view[job.job_id] = (version, fields, frag, leader, _own(job) if self.check else None)
        # What depends on the time of the request or on other jobs, after the rest.
        extra = []
        if job.state is JobState.RUNNING and (narrow is None or "run_time" in narrow):
            extra.append(f'"run_time":{_run_time(job, now)}')
        if leader is not None:
            sets = {} if sets is None else sets
            if leader not in sets:
                sets[leader] = format_ranges(c.job_id for c in components(jobs, leader)) or str(leader)
            extra.append('"het_job_id_set":' + _encode(sets[leader]))
        if not extra:
            return frag
        tail = ",".join(extra).encode() + b"}"
        return frag[:-1] + (b"," + tail if len(frag) > 2 else tail)

    def body(
        self,
        jobs: list[Job],
        now: float,
        brief: bool,
        everyone: Mapping[int, Job],
        narrow: tuple[str, ...] | None = None,
    ) -> bytes:
        """``{"jobs": [...], "now": now}`` encoded, as JSONResponse would encode it."""
        sets: dict[int, str] = {}
        cache, versions, running, check = self._view(brief, narrow), self.versions, JobState.RUNNING, self.check
        out = []
        for job in jobs:
            # ``fragment``'s cache hit, inlined for the common case (a job whose fragment
            # needs nothing added at assembly): a listing is thousands of these.
            hit = cache.get(job.job_id)
            if (
                hit is not None
                and hit[3] is None
                and job.state is not running
                and hit[0] == versions.get(job.job_id, 0)
                and hit[1] == _volatile(job)
                and (not check or _unchanged(job, hit))
            ):
                out.append(hit[2])
            else:
                out.append(self.fragment(job, now, brief, everyone, sets, narrow))
        return b'{"jobs":[' + b",".join(out) + b'],"now":' + _encode(now).encode() + b"}"

    def prune(self, present: Mapping[int, Job], slack: int = 64) -> None:
        """Forget fragments of jobs no longer in memory (purged), once the cache has doubled
        since the last prune. (Not against the number of jobs: a job may have several
        fragments, one per view and set of fields, and a cache of live ones alone was
        copied at every listing.)"""
        if self._size > 2 * self._kept + slack:
            for key, view in self._views.items():
                self._views[key] = {i: v for i, v in view.items() if i in present}
            self._size = self._kept = sum(len(v) for v in self._views.values())

    def _view(self, brief: bool, narrow: tuple[str, ...] | None) -> dict[int, _Entry]:
        view = self._views.get((brief, narrow))
        if view is None:
            view = self._views[(brief, narrow)] = {}
        return view

    def cached_ids(self) -> set[int]:
        """The job ids with a fragment in some view (what a test checks)."""
        return {i for view in self._views.values() for i in view}
