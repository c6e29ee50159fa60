"""Listings served from fragments encoded once per change (``ctld.listing``): after every
kind of change they equal the uncached path (``job_wire`` of every job, encoded), only the
jobs that changed are encoded again, and one job's query encodes that job alone."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import StorageError
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState, Reason
from muster.ctld.controller import Controller, Identity
from muster.ctld.hetindex import with_id_sets
from muster.ctld.listing import JobListing
from muster.ctld.steps import StepBook
from muster.ctld.store import Store
from muster.ctld.wire import job_wire

CONF = """
ClusterName=t
MinJobAge=300
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=debug Nodes=node[3-4] MaxTime=60 State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)
SCRIPT = {"script": "#!/bin/sh\ntrue\n", "workdir": "/w"}


class _Start:  # the scheduler's Start, reduced to what apply_starts reads
    def __init__(self, job_id: int, node: str) -> None:
        self.job_id, self.partition, self.backfilled = job_id, "gpu", False
        self.alloc = [NodeAlloc(node, 2, 100, [0])]


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def _uncached(ctl: Controller, now: float, brief: bool) -> object:
    jobs = with_id_sets([job_wire(j, now, brief) for j in ctl.jobs.values()], ctl.jobs)
    return json.loads(json.dumps({"jobs": jobs, "now": now}))


def _check(ctl: Controller, listing: JobListing) -> None:
    now = ctl.clock.now()
    for brief in (True, False):
        assert json.loads(listing.body(list(ctl.jobs.values()), now, brief, ctl.jobs)) == _uncached(ctl, now, brief)


def _submit(ctl: Controller, **spec: object) -> int:
    return ctl.queue.submit(JobSpec(**{**SCRIPT, **spec}), ALICE).job_id  # type: ignore[arg-type]


def _started(ctl: Controller) -> int:
    job_id = _submit(ctl, name="run")
    ctl.launches.apply_starts([_Start(job_id, "node1")], ctl.clock.now())
    ctl.launches.launch_done(job_id)
    return job_id


def _end(ctl: Controller, job_id: int) -> None:
    ctl.launches.job_done({"job_id": job_id, "node": "node1", "restart_count": 0, "exit_code": 0})


def _update(ctl: Controller, job_id: int) -> None:
    ctl.queue.update(ctl.jobs[job_id], ALICE, {"name": "renamed", "comment": "c", "nice": 5})


def _move(ctl: Controller, job_id: int) -> None:
    ctl.queue.update(ctl.jobs[job_id], ROOT, {"partition": "debug", "min_nodes": 2, "priority": 7})


def _hold(ctl: Controller, job_id: int) -> None:
    ctl.queue.hold(ctl.jobs[job_id], ALICE, admin_hold=False)


def _release(ctl: Controller, job_id: int) -> None:
    _hold(ctl, job_id)
    ctl.queue.release(ctl.jobs[job_id], ALICE)


def _requeue(ctl: Controller, job_id: int) -> None:
    ctl.queue.requeue_job(ctl.jobs[job_id], ALICE, hold=True)


def _cancel(ctl: Controller, job_id: int) -> None:
    ctl.queue.cancel(ctl.jobs[job_id], ALICE)


def _pass(ctl: Controller, job_id: int) -> None:
    # what a scheduling pass writes without a commit
    job = ctl.jobs[job_id]
    job.priority, job.reason, job.planned_start, job.planned_nodes = 42, Reason.RESOURCES, 2000.0, ["node2"]


def _progress(ctl: Controller, job_id: int) -> None:
    ctl.jobs[job_id].progress = {"step": 10}


def _interactive(ctl: Controller) -> int:
    job_id = _submit(ctl, name="salloc", interactive=True)
    ctl.launches.apply_starts([_Start(job_id, "node1")], ctl.clock.now())
    ctl.launches.launch_done(job_id)
    return job_id


def _released(ctl: Controller, job_id: int) -> None:
    # salloc releases its allocation: committed with its steps (StepBook._commit)
    StepBook(ctl, b"k" * 32).complete_allocation(ctl.jobs[job_id], ALICE, 0, 0)


def _grace_over(ctl: Controller, job_id: int) -> None:
    # a preemption's marks, cleared without a commit once its victim is no longer running
    job = ctl.jobs[job_id]
    job.preempted_by = job.preempt_deadline = job.preempt_mode = None


def _preempted(ctl: Controller) -> int:
    job_id = _started(ctl)
    job = ctl.jobs[job_id]
    with ctl.atomic(job):
        job.preempted_by, job.preempt_deadline, job.preempt_mode = 1, 1060.0, "REQUEUE"
        ctl.record(1000.0, [(job, "preempt", {"by": 1})])
    return job_id


CHANGES: dict[str, tuple[Callable[[Controller], int], Callable[[Controller, int], None]]] = {
    "update of a pending job": (_submit, _update),
    "update of partition, nodes and priority": (_submit, _move),
    "start": (_submit, lambda c, i: (c.launches.apply_starts([_Start(i, "node2")], 1000.0), None)[1]),
    "end": (_started, _end),
    "hold": (_submit, _hold),
    "hold and release": (_submit, _release),
    "requeue of a running job": (_started, _requeue),
    "cancel of a pending job": (_submit, _cancel),
    "cancel of a running job": (_started, _cancel),
    "a scheduling pass": (_submit, _pass),
    "a progress report": (_started, _progress),
    "a preemption's marks cleared": (_preempted, _grace_over),
    "an allocation released": (_interactive, _released),
}


@pytest.mark.parametrize("check", [False, True], ids=["production", "checking"])
@pytest.mark.parametrize("change", CHANGES)
def test_a_listing_after_a_change_is_the_uncached_one_and_encodes_only_that_job(
    ctl: Controller, change: str, check: bool
) -> None:
    make, act = CHANGES[change]
    for _ in range(3):
        _submit(ctl, name="other")
    job_id = make(ctl)
    listing = JobListing(ctl.job_versions, check=check)
    _check(ctl, listing)
    before = listing.encoded
    _check(ctl, listing)
    assert listing.encoded == before  # nothing changed: nothing encoded
    act(ctl, job_id)
    _check(ctl, listing)
    assert listing.encoded == before + 2  # the changed job, in each view


def test_submitting_adds_a_job_and_purging_forgets_it(ctl: Controller) -> None:
    listing = JobListing(ctl.job_versions, check=True)
    first = _submit(ctl)
    _check(ctl, listing)
    second = _submit(ctl, array="1-3")
    _check(ctl, listing)
    assert listing.encoded == 2 + 2 * 3
    for job_id in (first, second):
        _cancel(ctl, job_id)
    ctl.clock.advance(1000.0)  # type: ignore[attr-defined]
    ctl.purge()
    assert first not in ctl.jobs and first not in ctl.job_versions
    _check(ctl, listing)
    listing.prune(ctl.jobs, slack=0)
    assert listing.cached_ids() == set(ctl.jobs)


def test_a_running_jobs_run_time_is_that_of_the_request(ctl: Controller) -> None:
    job_id = _started(ctl)
    listing = JobListing(ctl.job_versions, check=True)
    _check(ctl, listing)
    ctl.clock.advance(75.0)  # type: ignore[attr-defined]
    _check(ctl, listing)
    body = json.loads(listing.body([ctl.jobs[job_id]], ctl.clock.now(), True, ctl.jobs))
    assert body["jobs"][0]["run_time"] == 75
    assert listing.encoded == 2  # the time passing is no change


def test_a_failed_commit_leaves_no_stale_fragment(ctl: Controller, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = _submit(ctl)
    listing = JobListing(ctl.job_versions, check=True)
    _check(ctl, listing)

    def fail(*_a: object, **_k: object) -> None:
        raise StorageError("disk full")

    monkeypatch.setattr(ctl.store, "record", fail)
    with pytest.raises(StorageError):
        _update(ctl, job_id)
    _check(ctl, listing)
    assert ctl.jobs[job_id].spec.name != "renamed"


def test_one_jobs_query_encodes_that_job_alone(ctl: Controller) -> None:
    for _ in range(20):
        _submit(ctl)
    listing = JobListing(ctl.job_versions, check=True)
    job = ctl.jobs[7]
    assert json.loads(listing.fragment(job, 1000.0, False, ctl.jobs)) == json.loads(json.dumps(job_wire(job, 1000.0)))
    assert listing.encoded == 1
    assert ctl.jobs[7].state is JobState.PENDING


def test_a_heterogeneous_jobs_id_set_follows_its_components_in_memory(ctl: Controller) -> None:
    jobs = ctl.hets.submit([JobSpec(**SCRIPT), JobSpec(**{**SCRIPT, "script": None}), JobSpec(**SCRIPT)], ALICE)
    listing = JobListing(ctl.job_versions, check=True)
    _check(ctl, listing)
    body = json.loads(listing.body(list(ctl.jobs.values()), 1000.0, False, ctl.jobs))
    assert {j["het_job_id_set"] for j in body["jobs"]} == {f"{jobs[0].job_id}-{jobs[-1].job_id}"}
    del ctl.jobs[jobs[-1].job_id]  # a component gone from memory: no commit, still seen
    _check(ctl, listing)


def test_a_narrowed_listing_is_cached_and_follows_changes(ctl: Controller) -> None:
    from muster.ctld.listing import select

    listing = JobListing(ctl.job_versions, check=True)
    running, waiting = _started(ctl), _submit(ctl, name="wait", comment="c")
    narrow = select(["job_id", "run_time", "spec.name", "state"])
    now = ctl.clock.now()

    def expected() -> list[dict[str, object]]:
        out = []
        for j in ctl.jobs.values():
            d = job_wire(j, ctl.clock.now(), True)
            spec = {"name": d["spec"]["name"]} if "name" in d["spec"] else {}
            out.append({k: d[k] for k in ("job_id", "run_time", "state") if k in d} | {"spec": spec})
        return out

    assert json.loads(listing.body(list(ctl.jobs.values()), now, True, ctl.jobs, narrow))["jobs"] == expected()
    encoded = listing.encoded
    ctl.clock.advance(30)  # type: ignore[attr-defined]
    body = json.loads(listing.body(list(ctl.jobs.values()), ctl.clock.now(), True, ctl.jobs, narrow))
    assert listing.encoded == encoded and body["jobs"] == expected()  # run_time moved, nothing re-encoded
    _update(ctl, waiting)
    body = json.loads(listing.body(list(ctl.jobs.values()), ctl.clock.now(), True, ctl.jobs, narrow))
    assert listing.encoded == encoded + 1 and body["jobs"] == expected()
    assert running in ctl.jobs


def test_fragments_of_live_jobs_in_several_views_are_not_copied_at_every_listing(ctl: Controller) -> None:
    listing = JobListing(ctl.job_versions, check=True)
    for _ in range(3):
        _submit(ctl)
    for view in ((True, None), (True, ("job_id",)), (True, ("job_id", "state")), (False, None)):
        listing.body(list(ctl.jobs.values()), ctl.clock.now(), view[0], ctl.jobs, view[1])
    listing.prune(ctl.jobs, slack=0)
    views = dict(listing._views)
    listing.prune(ctl.jobs, slack=0)
    assert all(listing._views[k] is v for k, v in views.items())  # nothing to forget: not rebuilt
    assert sum(len(v) for v in views.values()) == 12


def test_checking_names_a_field_changed_without_a_new_version(ctl: Controller) -> None:
    """Production compares only ``VOLATILE`` fields at each request; the test suite's
    controllers check all of them, so that a writer outside ``record`` is found."""
    job_id = _submit(ctl)
    listing = JobListing(ctl.job_versions, check=True)
    now = ctl.clock.now()
    listing.body(list(ctl.jobs.values()), now, True, ctl.jobs)
    listing.fragment(ctl.jobs[job_id], now, False, ctl.jobs)
    ctl.jobs[job_id].system_comment = "written without a commit"
    with pytest.raises(AssertionError, match=f"job {job_id}: system_comment changed without a new version"):
        listing.body(list(ctl.jobs.values()), now, True, ctl.jobs)
    with pytest.raises(AssertionError, match="system_comment"):
        listing.fragment(ctl.jobs[job_id], now, False, ctl.jobs)
