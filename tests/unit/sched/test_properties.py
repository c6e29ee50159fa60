"""Properties of every pass, checked with hypothesis on random small clusters:

* no node, CPU, memory or GPU is ever given twice at the same time, now or in the plan;
* backfill never delays the planned start of a higher-priority job: a job's decision does
  not change when every lower-priority job is removed from the queue;
* decisions are deterministic, whatever the order of the snapshot's lists;
* a job that fits an idle cluster starts in the first pass.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from muster.core.job import Job
from muster.sched import SchedConfig, schedule
from muster.sched.decisions import Decisions
from muster.sched.filters import validate_submit
from muster.sched.snapshot import ReservationView, Snapshot
from muster.sched.testing import JobBuilder, SchedHarness, job

# MUSTER_HYPOTHESIS_EXAMPLES=1000 for a deeper search than the suite's quick default.
PROPERTY = settings(
    max_examples=int(os.environ.get("MUSTER_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
NOW = 500.0

configs = st.sampled_from(
    [
        SchedConfig(),
        SchedConfig(conservative=True),
        SchedConfig(bf_max_job_test=2),
        SchedConfig(bf_resolution=60),
        SchedConfig(bf_window=900),
        SchedConfig(scheduler_type="sched/builtin"),
        SchedConfig(priority_type="priority/basic"),
    ]
)


@st.composite
def job_builders(draw: st.DrawFn, nodes: int, gpus: int, cpus: int, mem: int) -> JobBuilder:
    b = job().nodes(draw(st.integers(1, min(3, nodes))))
    b = b.cpus(draw(st.integers(1, cpus))).mem(draw(st.sampled_from([0, mem // 4, mem // 2])))
    if gpus:
        b = b.gpus(draw(st.integers(0, gpus)))
    b = b.time(draw(st.sampled_from([None, 60, 300, 600, 3600])))
    if draw(st.integers(0, 9)) == 0:
        b = b.exclusive()
    if draw(st.integers(0, 9)) == 0:
        b = b.nodelist(f"gpu{draw(st.integers(1, nodes))}")
    if draw(st.integers(0, 9)) == 0:
        b = b.user("alice").reservation("team")
    b = b.nice(draw(st.sampled_from([0, 0, 10])))
    return b


@st.composite
def clusters(draw: st.DrawFn) -> SchedHarness:
    """A cluster with running jobs, a queue, maybe a reservation, at time NOW."""
    n = draw(st.integers(1, 5))
    gpus = draw(st.sampled_from([0, 4, 8]))
    cpus = draw(st.sampled_from([8, 16]))
    mem = draw(st.sampled_from([1000, 4000]))
    h = SchedHarness(draw(configs)).gpu_nodes(n, gpus=gpus, cpus=cpus, mem=mem)
    if draw(st.booleans()):
        start = draw(st.sampled_from([0.0, NOW + 100, NOW + 2000]))
        h.reserve(ReservationView("team", start, start + 1800, ("gpu1",), users=("alice",)))
    builders = st.lists(job_builders(n, gpus, cpus, mem), min_size=1, max_size=12)
    for i, b in enumerate(draw(builders)):
        h.submit(b, at=float(i))
    h.schedule(at=0.0)  # some start: they are the running jobs
    for i, b in enumerate(draw(builders)):
        h.submit(b, at=100.0 + i)
    h.fairshare = {"alice": draw(st.floats(0, 1))}
    return h


Interval = tuple[str, float, float, int, int, int]


def _intervals(snap: Snapshot, d: Decisions, config: SchedConfig) -> list[Interval]:
    """(node, start, end, cpus, mem, gpus) of everything that holds resources: running
    jobs until their expected end (as the profile rounds it), starts and plans."""
    res = config.bf_resolution
    out: list[Interval] = []
    by_id = {j.job_id: j for j in snap.pending}
    caps = {v.name: (v.cpus, v.mem, v.gpus) for v in snap.nodes}
    for j in snap.running:
        end = j.expected_end()
        end = math.inf if end is None else end
        if end <= NOW:
            end = NOW + res
        elif res > 1 and end != math.inf:
            end = -(-end // res) * res
        for a in j.alloc:
            out.append((a.node, NOW, end, a.cpus, a.mem, len(a.gpu_ids)))
    for s in d.starts:
        lim = by_id[s.job_id].time_limit
        end = NOW + lim if lim else math.inf
        for a in s.alloc:
            out.append((a.node, NOW, end, a.cpus, a.mem, len(a.gpu_ids)))
    for job_id, plan in d.plans.items():
        j = by_id[job_id]
        end = plan.start_time + j.time_limit if j.time_limit else math.inf
        for name in plan.nodes:
            c, m, g = (
                caps[name]
                if j.shape.exclusive
                else (j.shape.cpus_per_node, j.shape.mem_per_node, j.shape.gpus_per_node)
            )
            out.append((name, plan.start_time, end, c, m, g))
    return out


@PROPERTY
@given(clusters())
def test_nothing_is_given_twice_now_or_in_the_plan(h: SchedHarness) -> None:
    snap = h.snapshot()
    d = schedule(snap, NOW, h.config)
    caps = {v.name: (v.cpus, v.mem, v.gpus) for v in snap.nodes}
    ivs = _intervals(snap, d, h.config)
    by_res = {j.job_id: j.spec.reservation for j in snap.pending}
    for name, t, *_ in ivs:
        used = [0, 0, 0]
        for other, begin, end, c, m, g in ivs:
            if other == name and begin <= t < end:
                used[0] += c
                used[1] += m
                used[2] += g
        assert all(u <= cap for u, cap in zip(used, caps[name], strict=True)), (name, t, ivs)
    # reserved nodes: only the reservation's jobs overlap its window, now or in the plan
    limits = {j.job_id: j.time_limit for j in snap.pending}
    for r in snap.reservations:
        held = [(s.job_id, NOW, [a.node for a in s.alloc]) for s in d.starts] + [
            (job_id, p.start_time, p.nodes) for job_id, p in d.plans.items()
        ]
        for job_id, begin, names in held:
            if by_res.get(job_id) == r.name or not set(names) & set(r.nodes):
                continue
            lim = limits[job_id]
            finish = begin + lim if lim else math.inf
            assert finish <= r.start or begin >= r.end, (job_id, begin, finish, r)


def _order(snap: Snapshot, d: Decisions) -> list[Job]:
    tiers = {p.name: p.priority_tier for p in snap.partitions.values()}
    return sorted(
        snap.pending,
        key=lambda j: (
            -max(tiers.get(p, 0) for p in (j.spec.partitions or [j.partition])),
            -d.priorities[j.job_id],
            j.submit_time,
            j.job_id,
        ),
    )


@PROPERTY
@given(clusters(), st.integers(0, 24))
def test_lower_priority_jobs_never_change_a_higher_jobs_decision(h: SchedHarness, cut: int) -> None:
    # Conservative backfill re-places jobs by the starts promised to them, holding every
    # promise until its job's turn, not by priority: its own rule is tested in test_promise.
    assume(not h.config.conservative)
    snap = h.snapshot()
    full = schedule(snap, NOW, h.config)
    keep = _order(snap, full)[:cut]
    kept = {j.job_id for j in keep}
    fewer = schedule(dataclasses.replace(snap, pending=keep), NOW, h.config)
    for job_id in kept:
        assert _start_of(full, job_id) == _start_of(fewer, job_id)
        assert full.plans.get(job_id) == fewer.plans.get(job_id)
        assert full.reasons.get(job_id) == fewer.reasons.get(job_id)


def _start_of(d: Decisions, job_id: int) -> object:
    return next((s for s in d.starts if s.job_id == job_id), None)


@PROPERTY
@given(clusters(), st.randoms(use_true_random=False))
def test_decisions_do_not_depend_on_the_order_of_the_snapshot(h: SchedHarness, rnd: random.Random) -> None:
    snap = h.snapshot()
    first = schedule(snap, NOW, h.config)
    shuffled = dataclasses.replace(
        snap,
        nodes=rnd.sample(snap.nodes, len(snap.nodes)),
        pending=rnd.sample(snap.pending, len(snap.pending)),
        running=rnd.sample(snap.running, len(snap.running)),
        partitions=dict(rnd.sample(list(snap.partitions.items()), len(snap.partitions))),
    )
    again = schedule(shuffled, NOW, h.config)
    first.stats.phase_seconds.clear()
    again.stats.phase_seconds.clear()
    assert first == again


@PROPERTY
@given(st.data())
def test_a_job_that_fits_an_idle_cluster_starts_in_the_first_pass(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 4))
    gpus = data.draw(st.sampled_from([0, 4, 8]))
    h = SchedHarness(data.draw(configs)).gpu_nodes(n, gpus=gpus, cpus=16, mem=4000)
    b = data.draw(job_builders(n, gpus, 16, 4000))
    j = h.submit(b)
    snap = h.snapshot()
    pending = snap.pending[0]
    ok = validate_submit(pending.spec, pending.shape, snap.partitions, snap.nodes)
    if ok is None and pending.spec.reservation is None:
        assert h.started(h.schedule(at=0)) == [j]


@PROPERTY
@given(clusters())
def test_the_first_planned_job_starts_no_later_than_planned(h: SchedHarness) -> None:
    """When running jobs end at their limits and nothing new arrives, the highest-priority
    job given a plan starts by its planned time: what starts meanwhile never delays it."""
    d = h.schedule(at=NOW)
    if not d.plans:
        return
    first = min(d.plans, key=lambda j: _rank(h, d, j))
    planned = d.plans[first].start_time
    now = NOW
    while first in h.pending:
        assert now < planned, f"job {first} planned at {planned} still waits at {now}"
        ends = [j.start_time + j.time_limit for j in h.running.values() if j.start_time is not None and j.time_limit]
        now = min([t for t in ends if t > now] + [planned, max([now, *ends]) + 1])
        for j in list(h.running.values()):
            if j.start_time is not None and j.time_limit and j.start_time + j.time_limit <= now:
                h.finish(j.job_id)
        h.schedule(at=now)


def _rank(h: SchedHarness, d: Decisions, job_id: int) -> tuple[int, float, int]:
    j = h.pending[job_id]
    return (-d.priorities[job_id], j.submit_time, job_id)
