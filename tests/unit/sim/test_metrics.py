"""Metrics, checked against values computed by hand, and the theoretical bounds."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from muster.sched import SchedConfig
from muster.sim.cluster import uniform_cluster
from muster.sim.engine import JobOutcome, Simulation
from muster.sim.metrics import (
    bounded_slowdown,
    compute,
    format_table,
    offered_load,
    percentile,
    recorded_outcomes,
    size_class,
)
from muster.sim.policies import POLICIES, build_settings, job_order
from muster.sim.traces import TraceJob


def outcome(name: str, submit: float, start: float, end: float, size: int, **kw: bool) -> JobOutcome:
    return JobOutcome(0, name, size, submit, start, end, 0, **kw)


# The EASY story of test_engine, on 4 processors, written out by hand:
#   job  submit start end size  wait run  bsld               JCT
#   a    0      0     10  2     0    10   max(1, 10/10) = 1   10
#   b    1      10    15  4     9    5    (9+5)/10 = 1.4      14
#   c    2      2     7   2     0    5    max(1, 5/10) = 1    5
#   d    3      15    35  1     12   20   32/20 = 1.6         32
STORY = [
    outcome("a", 0, 0, 10, 2),
    outcome("b", 1, 10, 15, 4),
    outcome("c", 2, 2, 7, 2, backfilled=True),
    outcome("d", 3, 15, 35, 1),
]


def test_metrics_of_a_small_schedule_computed_by_hand() -> None:
    m = compute(STORY, capacity=4)
    assert m["jobs"] == 4
    assert m["wait_mean"] == 21 / 4
    assert m["wait_median"] == 4.5  # mean of the middle two of 0, 0, 9, 12
    assert m["wait_p95"] == 12 and m["wait_max"] == 12
    assert m["bounded_slowdown_mean"] == pytest.approx((1 + 1.4 + 1 + 1.6) / 4)
    assert m["jct_mean"] == 61 / 4
    # work = 2*10 + 4*5 + 2*5 + 1*20 = 70 processor-seconds over 4 x 35
    assert m["utilisation"] == 70 / (4 * 35)
    assert m["makespan"] == 35
    assert m["backfilled"] == 1 and m["killed_at_limit"] == 0
    assert [(c["size"], c["jobs"], c["wait_mean"]) for c in m["by_size"]] == [
        ("1", 1, 12),
        ("2", 2, 0),
        ("3-4", 1, 9),
    ]


def test_the_story_replayed_under_easy_gives_the_hand_computed_metrics() -> None:
    jobs = [
        TraceJob("a", 0, 10, 2, 10),
        TraceJob("b", 1, 5, 4, 5),
        TraceJob("c", 2, 5, 2, 5),
        TraceJob("d", 3, 20, 1, 20),
    ]
    cfg = SchedConfig.from_settings(build_settings("easy", max_time_limit=20))
    result = Simulation(jobs, "procs", uniform_cluster("procs", {"maxprocs": "4"}), cfg).run()
    m = compute(result.outcomes, 4)
    # The hand-made STORY carries no plans; the replay planned b at 10 (behind a) and d at
    # 15 (behind b), and both started then.
    plans = {k: m.pop(k) for k in ("planned", "late_vs_first_plan", "slip_mean", "slip_max", "late_vs_earliest_plan")}
    assert m == {k: v for k, v in compute(STORY, 4).items() if k not in plans}
    assert plans == {
        "planned": 2,
        "late_vs_first_plan": 0,
        "slip_mean": None,
        "slip_max": None,
        "late_vs_earliest_plan": 0,
    }


def test_utilisation_states_its_denominator_and_the_submit_based_variant() -> None:
    m = compute([outcome("late", 0, 100, 200, 4)], capacity=4)
    assert m["utilisation"] == 1.0  # from first start
    assert m["utilisation_from_submit"] == 0.5  # from first submit
    assert "first start" in m["utilisation_denominator"]


@pytest.mark.parametrize(
    ("wait", "run", "expected"),
    [(0, 100, 1.0), (100, 100, 2.0), (14, 1, 1.5), (5, 1, 1.0), (90, 0.5, 9.05)],
)
def test_bounded_slowdown_uses_a_ten_second_floor(wait: float, run: float, expected: float) -> None:
    assert bounded_slowdown(wait, run) == pytest.approx(expected)


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 21))
    assert percentile(values, 95) == 19
    assert percentile(values, 50) == 10
    assert percentile(values, 100) == 20
    assert percentile([7], 95) == 7
    assert math.isnan(percentile([], 95))


@pytest.mark.parametrize(
    ("size", "label"),
    [(1, "1"), (2, "2"), (3, "3-4"), (4, "3-4"), (5, "5-8"), (8, "5-8"), (9, "9-16"), (100, "65-128")],
)
def test_size_classes_are_powers_of_two(size: int, label: str) -> None:
    assert size_class(size) == label


def test_the_recorded_schedule_comes_from_the_trace_waits() -> None:
    jobs = [TraceJob("1", 0, 10, 2, recorded_wait=5), TraceJob("2", 3, 4, 1)]
    (o,) = recorded_outcomes(jobs)
    assert (o.trace_id, o.start, o.end) == ("1", 5, 15)


def test_offered_load_is_work_over_capacity_times_the_submit_span() -> None:
    jobs = [TraceJob("1", 0, 10, 2), TraceJob("2", 50, 20, 1)]
    assert offered_load(jobs, 4) == (10 * 2 + 20 * 1) / (4 * 50)
    assert math.isnan(offered_load(jobs[:1], 4))


def test_the_table_lists_every_run_side_by_side() -> None:
    text = format_table([("easy", compute(STORY, 4)), ("none", {"jobs": 0})])
    assert "bounded slowdown mean (tau 10 s)" in text
    assert "wait mean (s)" in text and "5" in text
    lines = text.splitlines()
    assert lines[0].split()[-2:] == ["easy", "none"]
    assert any(line.startswith("3-4") and "1 / 9 s / 1.4" in line for line in lines)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 200), st.integers(1, 300), st.integers(1, 8), st.floats(0.5, 3)),
        min_size=2,
        max_size=30,
    ),
    st.sampled_from(POLICIES),
    st.booleans(),
)
def test_utilisation_never_exceeds_the_offered_load_or_one(
    rows: list[tuple[int, int, int, float]], policy: str, overrun: bool
) -> None:
    jobs, t = [], 0
    for i, (gap, run, size, ratio) in enumerate(rows):
        t += gap
        jobs.append(TraceJob(str(i), t, run, size, max(1.0, run * ratio)))
    assume(jobs[-1].submit > jobs[0].submit)
    cfg = SchedConfig.from_settings(build_settings(policy, max_time_limit=1000))
    result = Simulation(
        jobs,
        "procs",
        uniform_cluster("procs", nodes=2, cpus_per_node=4),
        cfg,
        allow_overrun=overrun,
        order=job_order(policy),
    ).run()
    m = compute(result.outcomes, 8)
    assert m["utilisation"] <= 1 + 1e-12
    assert m["utilisation"] <= offered_load(jobs, 8) + 1e-12
