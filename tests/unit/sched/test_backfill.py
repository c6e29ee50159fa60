"""Backfill: planned starts for waiting jobs, and lower jobs that start only if they
delay none of them."""

from __future__ import annotations

import pytest

from muster.core.states import Reason
from muster.sched import SchedConfig
from muster.sched.cycle import _Pass
from muster.sched.testing import SchedHarness, job


def seed_cluster(config: SchedConfig | None = None) -> SchedHarness:
    return SchedHarness(config).gpu_nodes(4, gpus=8)


def test_the_seed_scenario_backfills_the_short_eval_job_and_holds_the_long_one() -> None:
    h = seed_cluster()
    a = h.run_job(job().nodes(2).gpus(8).time("10:00"), at=0)
    b = h.submit(job().nodes(4).gpus(8).time("1:00:00"), at=1)
    d = h.schedule(at=1)
    assert d.reasons[b] is Reason.RESOURCES
    assert h.start_of(b) == 600  # A's end

    c = h.submit(job().nodes(1).gpus(8).time("5:00"), at=20)
    d = h.schedule(at=20)
    assert h.started(d) == [c]
    assert d.starts[0].backfilled
    assert h.start_of(b) == 600

    dd = h.submit(job().nodes(1).gpus(8).time("1:00:00"), at=30)
    d = h.schedule(at=30)
    assert h.started(d) == []
    assert d.reasons[dd] is Reason.PRIORITY
    assert h.start_of(b) == 600
    assert h.start_of(dd) == 600 + 3600  # after B

    h.finish(c)
    h.finish(a)
    d = h.schedule(at=600)
    assert h.started(d) == [b]
    assert dd in d.reasons


def test_a_job_that_ends_before_the_planned_start_is_backfilled() -> None:
    h = seed_cluster()
    h.run_job(job().nodes(3).gpus(8).time("1:00:00"), at=0)
    big = h.submit(job().nodes(4).gpus(8).time("1:00:00"), at=1)
    short = h.submit(job().gpus(8).time("59:00"), at=2)
    long = h.submit(job().gpus(8).time("1:00:01"), at=3)
    d = h.schedule(at=60)
    assert h.started(d) == [short]
    assert d.reasons[long] is Reason.PRIORITY
    assert d.plans[big].start_time == 3600


def test_a_job_with_no_time_limit_is_never_backfilled_in_front_of_a_plan() -> None:
    h = seed_cluster()
    h.run_job(job().nodes(3).gpus(8).time("1:00:00"), at=0)
    h.submit(job().nodes(4).gpus(8).time("1:00:00"), at=1)
    forever = h.submit(job().gpus(8), at=2)
    d = h.schedule(at=60)
    assert forever not in h.started(d)


def test_a_running_job_without_a_time_limit_never_ends_in_the_plan() -> None:
    h = seed_cluster()
    h.run_job(job().nodes(1).gpus(8), at=0)
    big = h.submit(job().nodes(4).gpus(8).time("1:00:00"), at=1)
    d = h.schedule(at=2)
    assert d.reasons[big] is Reason.RESOURCES
    assert big not in d.plans


def test_plans_beyond_the_backfill_window_are_not_made() -> None:
    h = seed_cluster(SchedConfig(bf_window=1800))
    h.run_job(job().nodes(4).gpus(8).time("1:00:00"), at=0)
    waiting = h.submit(job().nodes(4).gpus(8).time("1:00:00"), at=1)
    d = h.schedule(at=2)
    assert waiting not in d.plans


def test_only_the_first_bf_max_job_test_blocked_jobs_get_plans() -> None:
    h = seed_cluster(SchedConfig(bf_max_job_test=2))
    h.run_job(job().nodes(4).gpus(8).time("1:00:00"), at=0)
    ids = [h.submit(job().gpus(8).time("10:00"), at=i + 1) for i in range(5)]
    d = h.schedule(at=10)
    assert sorted(d.plans) == ids[:2]
    assert d.stats.planned == 2


def test_conservative_backfill_plans_every_waiting_job() -> None:
    h = seed_cluster(SchedConfig(bf_max_job_test=2, conservative=True))
    h.run_job(job().nodes(4).gpus(8).time("1:00:00"), at=0)
    ids = [h.submit(job().gpus(8).time("10:00"), at=i + 1) for i in range(5)]
    d = h.schedule(at=10)
    assert sorted(d.plans) == ids
    # four fit at the first release, the fifth after the first of them ends
    assert [d.plans[i].start_time for i in ids] == [3600] * 4 + [4200]


def test_jobs_past_the_depth_still_start_when_they_fit_now() -> None:
    h = seed_cluster(SchedConfig(bf_max_job_test=1))
    h.run_job(job().nodes(3).gpus(8).time("1:00:00"), at=0)
    h.submit(job().nodes(4).gpus(8).time("1:00:00"), at=1)
    h.submit(job().nodes(2).gpus(8).time("1:00:00"), at=2)
    small = h.submit(job().gpus(8).time("30:00"), at=3)
    d = h.schedule(at=10)
    assert h.started(d) == [small]


def test_builtin_scheduling_keeps_strict_order_inside_a_partition() -> None:
    h = seed_cluster(SchedConfig(scheduler_type="sched/builtin"))
    h.run_job(job().nodes(3).gpus(8).time("1:00:00"), at=0)
    big = h.submit(job().nodes(4).gpus(8).time("1:00:00"), at=1)
    small = h.submit(job().gpus(8).time("5:00"), at=2)
    d = h.schedule(at=10)
    assert h.started(d) == []
    assert d.reasons[big] is Reason.RESOURCES
    assert d.reasons[small] is Reason.PRIORITY
    assert d.plans == {}


@pytest.mark.parametrize("resolution, expected", [(1, 601.5), (60, 660)])
def test_planned_starts_follow_bf_resolution(resolution: int, expected: float) -> None:
    h = seed_cluster(SchedConfig(bf_resolution=resolution))
    h.run_job(job().nodes(4).gpus(8).time("10:00"), at=1.5)
    b = h.submit(job().nodes(4).gpus(8).time("10:00"), at=2)
    d = h.schedule(at=3)
    assert d.plans[b].start_time == expected


def test_an_overdue_job_is_expected_to_end_at_the_next_step() -> None:
    h = seed_cluster()
    h.run_job(job().nodes(4).gpus(8).time("10:00"), at=0)
    b = h.submit(job().nodes(4).gpus(8).time("10:00"), at=1)
    d = h.schedule(at=700)
    assert d.plans[b].start_time == 701


def test_exclusive_jobs_plan_whole_nodes() -> None:
    h = seed_cluster()
    h.run_job(job().nodes(4).gpus(1).time("10:00"), at=0)
    x = h.submit(job().nodes(2).exclusive().time("10:00"), at=1)
    small = h.submit(job().gpus(1).time("1:00:00"), at=2)
    d = h.schedule(at=3)
    assert d.plans[x].start_time == 600
    # the small job may not sit on the two nodes promised to the exclusive one
    (start,) = d.starts
    assert start.job_id == small
    assert start.alloc[0].node not in d.plans[x].nodes


def test_a_running_job_without_its_own_limit_ends_at_the_partition_default() -> None:
    h = seed_cluster()
    h.partition("main", default_time=900)
    a = h.run_job(job().nodes(4).gpus(8), at=0)
    h.running[a].time_limit = None  # as if the controller kept only the request
    b = h.submit(job().nodes(4).gpus(8).time("10:00"), at=1)
    assert h.schedule(at=2).plans[b].start_time == 900


def test_an_exclusive_partition_gives_whole_nodes_to_every_job() -> None:
    h = seed_cluster()
    h.partition("main", exclusive=True)
    a = h.submit(job().gpus(1))
    b = h.submit(job().gpus(1))
    d = h.schedule(at=0)
    assert h.started(d) == [a, b]
    assert [len(s.alloc[0].gpu_ids) for s in d.starts] == [8, 8]
    assert d.starts[0].alloc[0].node != d.starts[1].alloc[0].node


def test_plans_on_fractional_times_leave_no_slivers_in_the_profile() -> None:
    h = seed_cluster(SchedConfig(conservative=True))
    h.run_job(job().nodes(4).gpus(4).time(7), at=0.1)
    h.run_job(job().nodes(4).gpus(3).time(3), at=0.1)
    ids = [h.submit(job().gpus(2 + i % 5).time(1 + i % 4), at=0.2 + i / 10) for i in range(12)]
    run = _Pass(h.snapshot(), 0.3, h.config, None)
    d = run.run()
    assert all(pid in d.plans for pid in ids)
    for node in run.pool.values():
        assert min(node.cpus) >= 0 and min(node.gpus) >= 0, node.name
        assert all(b - a >= 1e-6 for a, b in zip(node.times, node.times[1:], strict=False))
