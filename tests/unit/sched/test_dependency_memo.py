"""The dependency memo (issue 40): dependency states kept from pass to pass and forgotten
when a job they name enters or leaves the queue, starts or ends, give the reasons of the
states computed afresh in every pass, while jobs start, end well or badly, are requeued,
cancelled and updated."""

from __future__ import annotations

import random

import pytest

from muster.sched import SchedConfig
from muster.sched.cycle import schedule
from muster.sched.decisions import Decisions
from muster.sched.dependencies import DependencyIndex, DependencyMemo
from muster.sched.memo import PassMemo
from muster.sched.testing import SchedHarness, job

KINDS = ("afterok", "afterany", "afternotok", "after")


def _dependency(rng: random.Random, known: list[int], arrays: list[int]) -> str:
    """A reference to earlier jobs, mostly one plain id, sometimes what is never kept."""
    r = rng.random()
    if r < 0.05:
        return "singleton"
    if r < 0.1 and arrays:
        return f"afterok:{rng.choice(arrays)}"  # a whole array
    if r < 0.13 and arrays:
        return f"aftercorr:{rng.choice(arrays)}"
    if r < 0.16:
        return f"after:{rng.choice(known)}+1"  # moves with time
    terms = [f"{rng.choice(KINDS)}:{':'.join(str(rng.choice(known)) for _ in range(rng.choice((1, 1, 2))))}"]
    if rng.random() < 0.2:
        terms.append(f"{rng.choice(KINDS)}:{rng.choice(known)}")
        return (rng.choice(",?")).join(terms)
    return terms[0]


def _submit(rng: random.Random, h: SchedHarness, at: float, arrays: list[int]) -> None:
    known = list(h.pending) + list(h.running) + list(h.finished)
    b = job().gpus(rng.choice((1, 2, 4, 8))).time(rng.choice(("10:00", "30:00"))).named(rng.choice(("a", "b")))
    if known and rng.random() < 0.7:
        b = b.depends(_dependency(rng, known, arrays))
    if rng.random() < 0.05:
        arrays.append(h.submit_array(b, range(3), at=at)[0])
    else:
        h.submit(b, at=at)


def _events(rng: random.Random, h: SchedHarness, now: float, arrays: list[int]) -> None:
    """What happens between passes: ends (well or badly), requeues, cancellations,
    updates of a dependency, new jobs."""
    for job_id in list(h.running):
        r = rng.random()
        if r < 0.3:
            h.finish(job_id, rng.choice(("COMPLETED", "COMPLETED", "FAILED")))
        elif r < 0.35:
            h.requeue(job_id)
    for job_id in list(h.pending):
        if rng.random() < 0.03:
            h.pending.pop(job_id)
            h.finished[job_id] = "CANCELLED"
    waiting = [j for j in h.pending.values() if j.spec.dependency]
    if waiting and rng.random() < 0.3:
        j = rng.choice(waiting)
        j.spec.dependency = _dependency(rng, list(h.finished) or [j.job_id - 1], arrays)  # scontrol update
    for _ in range(rng.randrange(4)):
        _submit(rng, h, now, arrays)


def _view(d: Decisions) -> tuple[object, ...]:
    return (
        sorted((i, str(r)) for i, r in d.reasons.items()),
        sorted(d.never.items()),
        [s.job_id for s in d.starts],
        sorted((i, p.start_time, tuple(p.nodes)) for i, p in d.plans.items()),
    )


@pytest.mark.parametrize("seed", range(12))
def test_passes_with_the_memo_decide_as_passes_without(seed: int) -> None:
    rng = random.Random(seed)
    h = SchedHarness(SchedConfig()).gpu_nodes(3, gpus=8)
    arrays: list[int] = []
    for i in range(30):
        _submit(rng, h, float(i), arrays)
    memo = PassMemo()
    now = 100.0
    kept = 0
    for _ in range(25):
        with_memo = schedule(h.snapshot(), now, h.config, memo=memo)
        assert _view(with_memo) == _view(schedule(h.snapshot(), now, h.config))
        kept += len(memo.deps.states)
        h.schedule(at=now)  # the starts happen (the harness's own pass, without a memo)
        now += rng.choice((1.0, 30.0, 600.0))
        _events(rng, h, now, arrays)
    assert kept  # states were kept from pass to pass, not recomputed every time


def test_a_state_is_forgotten_when_the_job_it_names_ends() -> None:
    h = SchedHarness().gpu_nodes(1, gpus=8)
    first = h.run_job(job().gpus(8).time("10:00"), at=0)
    second = h.submit(job().gpus(8).time("10:00").depends(f"afterok:{first}"), at=1)
    memo = DependencyMemo()
    snap = h.snapshot()
    memo.sync(snap.pending, snap.running)
    index = DependencyIndex(snap.pending, snap.running, snap.finished, snap.arrays)
    memo.put(h.pending[second], index.state(h.pending[second], 10), snap.arrays)
    assert memo.get(h.pending[second]) is not None  # WAIT, kept
    snap = h.snapshot()
    memo.sync(snap.pending, snap.running)  # nothing changed
    assert memo.get(h.pending[second]) is not None
    h.finish(first, "FAILED")
    snap = h.snapshot()
    memo.sync(snap.pending, snap.running)  # the job it names ended: recomputed
    assert memo.get(h.pending[second]) is None
