"""What a planned start promises (sched/README.md, "Promises"), checked over sequences of
passes: random arrivals, and running jobs that end at or before their time limit (early
ends; none overruns).

* conservative: a planned start never moves later and no job starts after the first
  start planned for it; a job that once had a plan keeps one until it starts;
* sched/backfill (the default, FIFO priority): a job's decision in every pass is what it
  would be if no job that arrived after it were queued, so a later arrival never moves
  its planned start.

And the case that tells them apart: an early end opens room that a job planned into a
hole and an older job both want.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster.sched import SchedConfig, schedule
from muster.sched.decisions import Decisions
from muster.sched.testing import SchedHarness, job

PROPERTY = settings(
    max_examples=int(os.environ.get("MUSTER_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
EPS = 1e-6
CONSERVATIVE = SchedConfig(conservative=True, priority_type="priority/basic", bf_window=7 * 86400)
DEFAULT_FIFO = SchedConfig(priority_type="priority/basic")

# (gap before it arrives, nodes, CPUs per node, GPUs per node, time limit, share of the
# limit it actually runs)
Arrival = tuple[int, int, int, int, int, float]
arrivals = st.lists(
    st.tuples(
        st.integers(0, 120),
        st.integers(1, 2),
        st.integers(1, 8),
        st.integers(0, 4),
        st.sampled_from([60, 300, 600, 1800]),
        st.sampled_from([0.1, 0.5, 0.9, 1.0]),
    ),
    min_size=1,
    max_size=18,
)
machines = st.sampled_from([(1, 8, 0), (1, 16, 4), (3, 8, 4), (4, 4, 0)])  # nodes, CPUs, GPUs


def replay(
    config: SchedConfig,
    machine: tuple[int, int, int],
    rows: list[Arrival],
    before: Callable[[SchedHarness, float], None] | None = None,
    after: Callable[[SchedHarness, float, Decisions], None] | None = None,
    topology: str | None = None,
) -> None:
    """Run one pass at every arrival and every end, as the controller does on events;
    ``before(h, now)`` ahead of each pass, ``after(h, now, decisions)`` once it is applied;
    ``topology``: topology.conf text over the nodes gpu1..gpuN."""
    nodes, cpus, gpus = machine
    h = SchedHarness(config).gpu_nodes(nodes, gpus=gpus, cpus=cpus, mem=64_000)
    if topology is not None:
        h.topology_conf(topology)
    events: list[tuple[float, int, int]] = []  # (time, 0 arrive / 1 end, row or job id)
    t = 0
    for i, (gap, *_rest) in enumerate(rows):
        t += gap
        heapq.heappush(events, (float(t), 0, i))
    run_for: dict[int, float] = {}
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, x = heapq.heappop(events)
            if kind == 0:
                _, n, c, g, limit, share = rows[x]
                b = job().nodes(min(n, nodes)).cpus(min(c, cpus)).time(limit).mem(100)
                if g and gpus:
                    b = b.gpus(min(g, gpus))
                job_id = h.submit(b, at=now)
                run_for[job_id] = max(1.0, round(limit * share))
            else:
                h.finish(x)
        if before is not None:
            before(h, now)
        d = h.schedule(at=now)
        if after is not None:
            after(h, now, d)
        for s in d.starts:
            heapq.heappush(events, (now + run_for[s.job_id], 1, s.job_id))
    assert not h.pending, "every job ran"


def _tree(nodes: int) -> str | None:
    """Leaves of two nodes under one switch (None for a single node)."""
    if nodes < 2:
        return None
    leaves = [f"SwitchName=s{i} Nodes=gpu[{i * 2 + 1}-{min(i * 2 + 2, nodes)}]" for i in range((nodes + 1) // 2)]
    return "\n".join([*leaves, f"SwitchName=top Switches=s[0-{len(leaves) - 1}]"]) + "\n"


@PROPERTY
@given(machines, arrivals, st.booleans())
def test_conservative_never_moves_a_planned_start_later(
    machine: tuple[int, int, int], rows: list[Arrival], tree: bool
) -> None:
    first: dict[int, float] = {}
    last: dict[int, float] = {}

    def check(h: SchedHarness, now: float, d: Decisions) -> None:
        for s in d.starts:
            assert now <= first.get(s.job_id, now) + EPS, (
                f"job {s.job_id} started at {now}, after its first planned start {first[s.job_id]}"
            )
            last.pop(s.job_id, None)
        for job_id, before in last.items():
            assert job_id in d.plans, f"job {job_id} lost its planned start {before}"
            assert d.plans[job_id].start_time <= before + EPS, (
                f"job {job_id}: planned start moved from {before} to {d.plans[job_id].start_time}"
            )
        for job_id, plan in d.plans.items():
            first.setdefault(job_id, plan.start_time)
            last[job_id] = plan.start_time

    replay(CONSERVATIVE, machine, rows, after=check, topology=_tree(machine[0]) if tree else None)


@PROPERTY
@given(machines, arrivals)
def test_under_fifo_backfill_a_later_arrival_never_changes_an_earlier_jobs_decision(
    machine: tuple[int, int, int], rows: list[Arrival]
) -> None:
    def before(h: SchedHarness, now: float) -> None:
        snap = h.snapshot()
        d = schedule(snap, now, h.config)
        started = {s.job_id: s for s in d.starts}
        for job_id in [*d.plans, *started]:
            # FIFO: job ids follow arrival order; drop every job that arrived after this one
            alone = dataclasses.replace(snap, pending=[j for j in snap.pending if j.job_id <= job_id])
            twin = schedule(alone, now, h.config)
            assert twin.plans.get(job_id) == d.plans.get(job_id), (job_id, twin.plans, d.plans)
            assert [s for s in twin.starts if s.job_id == job_id] == ([started[job_id]] if job_id in started else [])

    replay(DEFAULT_FIFO, machine, rows, before=before)


def _hole(config: SchedConfig) -> tuple[float, float, float]:
    """Four CPUs. a1 (2 CPUs, until 100) and a2 (2 CPUs, until 50) run; b wants all four
    for 100 s and is planned at 100; c (2 CPUs, 50 s) arrives after b and is planned into
    the hole [50, 100) that a2 leaves. Then a1 ends early, at 3. Returns c's first plan,
    and b's and c's starts or plans after that pass."""
    h = SchedHarness(config).gpu_nodes(1, gpus=0, cpus=4, mem=64_000)
    a1 = h.run_job(job().cpus(2).time(100).mem(100), at=0)
    h.run_job(job().cpus(2).time(50).mem(100), at=0)
    b = h.submit(job().cpus(4).time(100).mem(100), at=1)
    assert h.schedule(at=1).plans[b].start_time == 100
    c = h.submit(job().cpus(2).time(50).mem(100), at=2)
    first = h.schedule(at=2).plans[c].start_time
    h.finish(a1)
    d = h.schedule(at=3)
    when = {s.job_id: 3.0 for s in d.starts} | {k: p.start_time for k, p in d.plans.items()}
    return first, when[b], when[c]


def test_conservative_keeps_the_hole_promised_to_a_later_job_when_an_early_end_opens_room() -> None:
    assert _hole(CONSERVATIVE) == (50, 53, 3)  # c starts at once, b moves up to 53


def test_fifo_backfill_re_plans_the_older_job_first_and_the_later_one_loses_its_hole() -> None:
    assert _hole(DEFAULT_FIFO) == (50, 50, 150)  # b takes the room from 50: c slips to 150
