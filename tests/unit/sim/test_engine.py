"""The event engine: hand-computed schedules, limits, estimates, and the properties every
replay must have (no wait on an idle machine, capacity never exceeded, determinism)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core.states import JobState
from muster.sched import SchedConfig
from muster.sim.cluster import Cluster, uniform_cluster
from muster.sim.engine import Estimate, JobOutcome, Simulation
from muster.sim.policies import POLICIES, build_settings, job_order, sjf_priority
from muster.sim.traces import TraceJob


def tj(
    name: str, submit: float, run: float, size: int, estimate: float | None = None, status: int | None = None
) -> TraceJob:
    return TraceJob(trace_id=name, submit=submit, run=run, size=size, estimate=estimate, status=status)


def pool(procs: int = 4) -> Cluster:
    return uniform_cluster("procs", {"maxprocs": str(procs)})


def config(policy: str) -> SchedConfig:
    return SchedConfig.from_settings(build_settings(policy, max_time_limit=100_000))


def replay(
    jobs: list[TraceJob], policy: str = "easy", cluster: Cluster | None = None, **kw: object
) -> dict[str, JobOutcome]:
    sim = Simulation(jobs, "procs", cluster or pool(), config(policy), order=job_order(policy), **kw)  # type: ignore[arg-type]
    result = sim.run()
    assert not result.never_started
    return {o.trace_id: o for o in result.outcomes}


# Four processors. a holds two until 10; b wants all four; c fits beside a and ends at 7,
# before b's reserved start; d wants one for 20 s and would run past b's start.
STORY = [
    tj("a", 0, 10, 2, 10),
    tj("b", 1, 5, 4, 5),
    tj("c", 2, 5, 2, 5),
    tj("d", 3, 20, 1, 20),
]


def starts(out: dict[str, JobOutcome]) -> dict[str, float]:
    return {k: o.start for k, o in sorted(out.items())}


def test_fcfs_keeps_strict_submission_order() -> None:
    assert starts(replay(STORY, "fcfs")) == {"a": 0, "b": 10, "c": 15, "d": 15}


@pytest.mark.parametrize("policy", ["easy", "backfill", "conservative"])
def test_backfill_starts_the_short_job_that_ends_before_the_reserved_start(policy: str) -> None:
    out = replay(STORY, policy)
    assert starts(out) == {"a": 0, "b": 10, "c": 2, "d": 15}
    assert out["c"].backfilled and not out["b"].backfilled
    assert out["c"].end == 7


def test_sjf_starts_the_shortest_waiting_job_first() -> None:
    jobs = [tj("a", 0, 10, 4, 10), tj("b", 1, 8, 4, 8), tj("c", 2, 3, 4, 3)]
    assert starts(replay(jobs, "easy")) == {"a": 0, "b": 10, "c": 18}
    sim = Simulation(jobs, "procs", pool(), config("sjf"), order="sjf")
    out = {o.trace_id: o.start for o in sim.run().outcomes}
    assert out == {"a": 0, "b": 13, "c": 10}
    assert [j.admin_priority for j in sim.jobs] == [sjf_priority(10), sjf_priority(8), sjf_priority(3)]


def test_a_job_outliving_its_limit_is_killed_at_the_limit() -> None:
    sim = Simulation([tj("x", 0, 50, 1, 20)], "procs", pool(), config("easy"))
    (o,) = sim.run().outcomes
    assert (o.start, o.end, o.killed) == (0, 20, True)
    assert sim.jobs[0].state is JobState.TIMEOUT


def test_with_overrun_allowed_a_job_runs_its_full_time() -> None:
    sim = Simulation([tj("x", 0, 50, 1, 20)], "procs", pool(), config("easy"), allow_overrun=True)
    (o,) = sim.run().outcomes
    assert (o.end, o.killed) == (50, False)
    assert sim.jobs[0].state is JobState.COMPLETED


def test_a_job_that_overran_its_estimate_delays_the_planned_start() -> None:
    # a was expected to end at 5 and runs until 10: b, planned at 5, starts when a ends.
    out = replay([tj("a", 0, 10, 4, 5), tj("b", 1, 5, 4, 5)], allow_overrun=True)
    assert starts(out) == {"a": 0, "b": 10}


def test_trace_status_decides_completed_or_failed() -> None:
    sim = Simulation(
        [tj("ok", 0, 5, 1, 10, status=1), tj("bad", 0, 5, 1, 10, status=0)], "procs", pool(), config("easy")
    )
    sim.run()
    assert [j.state for j in sim.jobs] == [JobState.COMPLETED, JobState.FAILED]


def test_jobs_are_numbered_in_submission_order_and_keep_their_limits() -> None:
    est = Estimate.parse("2xActual")
    sim = Simulation([tj("a", 0, 10, 1, 100), tj("b", 5, 7, 2)], "procs", pool(), config("easy"), estimate=est)
    assert [(j.job_id, j.time_limit, j.shape.total_cpus) for j in sim.jobs] == [(1, 20, 1), (2, 14, 2)]


@pytest.mark.parametrize(
    ("text", "limit"),
    [("requested", 100), ("actual", 7), ("2xActual", 14), ("1.5xactual", 11), ("3x", 21)],
)
def test_estimates(text: str, limit: int) -> None:
    assert Estimate.parse(text).limit(tj("a", 0, 7, 1, 100)) == limit


def test_requested_falls_back_to_the_actual_run_time_when_unknown() -> None:
    assert Estimate.parse("requested").limit(tj("a", 0, 7.2, 1, None)) == 8


@pytest.mark.parametrize("text", ["guess", "0xActual", "-2xActual", "x2"])
def test_bad_estimates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid estimate"):
        Estimate.parse(text)


def test_a_gpu_job_gets_gpu_ids_on_whole_nodes() -> None:
    cluster = uniform_cluster("gpus", nodes=3, gpus_per_node=8)
    sim = Simulation([tj("big", 0, 10, 16, 10), tj("small", 0, 10, 4, 10)], "gpus", cluster, config("easy"))
    out = {o.trace_id: o for o in sim.run().outcomes}
    assert len(out["big"].nodes) == 2 and len(out["small"].nodes) == 1
    assert out["small"].start == 0 and out["big"].start == 0
    assert sorted(len(a.gpu_ids) for a in sim.jobs[0].alloc) == [8, 8]


# --- properties ---------------------------------------------------------------------------

trace_jobs = st.lists(
    st.tuples(
        st.integers(0, 50),  # gap to the previous submission
        st.integers(1, 100),  # run time
        st.integers(1, 8),  # size
        st.floats(0.3, 3.0),  # estimate / run
    ),
    min_size=1,
    max_size=25,
)


def _build(rows: list[tuple[int, int, int, float]]) -> list[TraceJob]:
    out, t = [], 0
    for i, (gap, run, size, ratio) in enumerate(rows):
        t += gap
        out.append(tj(str(i), t, run, size, max(1.0, run * ratio)))
    return out


@settings(max_examples=40, deadline=None)
@given(trace_jobs, st.sampled_from(POLICIES), st.booleans())
def test_no_job_waits_when_the_cluster_is_idle(
    rows: list[tuple[int, int, int, float]], policy: str, overrun: bool
) -> None:
    # Each job arrives after everything before it has ended (even if it overran).
    jobs, t = [], 0.0
    for i, (gap, run, size, ratio) in enumerate(rows):
        jobs.append(tj(str(i), t, run, size, max(1.0, run * ratio)))
        t += max(run, run * ratio) + gap + 1
    out = replay(jobs, policy, pool(8), allow_overrun=overrun)
    assert all(o.wait == 0 for o in out.values())


@settings(max_examples=40, deadline=None)
@given(trace_jobs, st.sampled_from(POLICIES), st.sampled_from([(1, 8), (4, 2), (8, 1)]))
def test_the_machine_is_never_overcommitted(
    rows: list[tuple[int, int, int, float]], policy: str, shape: tuple[int, int]
) -> None:
    nodes, cpus = shape
    out = replay(_build(rows), policy, uniform_cluster("procs", nodes=nodes, cpus_per_node=cpus))
    changes = sorted(
        [(o.start, o.size) for o in out.values()] + [(o.end, -o.size) for o in out.values()], key=lambda c: (c[0], c[1])
    )
    busy = 0
    for _, delta in changes:
        busy += delta
        assert busy <= 8
    assert all(o.start >= o.submit for o in out.values())


def _random_trace(seed: int, n: int = 120) -> list[TraceJob]:
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 30)
        run = rng.randint(1, 400)
        jobs.append(tj(str(i), round(t), run, rng.choice([1, 1, 2, 3, 4, 6, 8, 12, 16]), run * rng.uniform(0.8, 4)))
    return jobs


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("shape", [(1, 16), (16, 1), (4, 4)])
def test_skipping_passes_that_cannot_start_anything_changes_no_start(policy: str, shape: tuple[int, int]) -> None:
    jobs = _random_trace(7)
    cluster = lambda: uniform_cluster("procs", nodes=shape[0], cpus_per_node=shape[1])  # noqa: E731
    fast = replay(jobs, policy, cluster())
    slow = replay(jobs, policy, cluster(), skip_idle_passes=False)
    assert starts(fast) == starts(slow)


def test_the_same_replay_gives_the_same_schedule() -> None:
    jobs = _random_trace(11)
    assert starts(replay(jobs, "conservative", pool(16))) == starts(replay(jobs, "conservative", pool(16)))


def test_progress_is_reported_up_to_the_last_job() -> None:
    seen: list[tuple[int, int]] = []
    Simulation(
        _random_trace(3, 50),
        "procs",
        pool(16),
        config("easy"),
        progress=lambda done, total, t: seen.append((done, total)),
    ).run()
    assert seen[-1] == (50, 50)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


@pytest.mark.parametrize("shape", [(1, 16), (16, 1), (4, 4)])
@pytest.mark.parametrize("seed", [1, 2])
def test_fcfs_passes_over_the_queue_head_start_what_whole_queue_passes_start(shape: tuple[int, int], seed: int) -> None:
    jobs = _random_trace(seed, 200)
    runs = []
    for strict in (True, False):
        sim = Simulation(
            jobs, "procs", uniform_cluster("procs", nodes=shape[0], cpus_per_node=shape[1]), config("fcfs")
        )
        sim._strict_order = strict
        runs.append({o.trace_id: (o.start, o.nodes) for o in sim.run().outcomes})
    assert runs[0] == runs[1]
