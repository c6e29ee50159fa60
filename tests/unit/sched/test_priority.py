"""Multifactor priority and the order in which jobs are examined."""

from __future__ import annotations

from muster.sched import SchedConfig
from muster.sched.priority import BASIC_TOP
from muster.sched.testing import JobBuilder, SchedHarness, job

DAY = 86400


def only(**weights: int) -> SchedConfig:
    base = dict(
        weight_age=0, weight_fairshare=0, weight_job_size=0, weight_partition=0, weight_qos=0
    )
    base.update(weights)
    return SchedConfig(**base)  # type: ignore[arg-type]


def priorities_at(h: SchedHarness, at: float) -> dict[int, int]:
    return h.schedule(at=at).priorities


def waiting() -> JobBuilder:
    """A job that cannot start on a blocked cluster."""
    return job().gpus(8)


def blocked_cluster(config: SchedConfig) -> SchedHarness:
    h = SchedHarness(config).gpu_nodes(1, gpus=8)
    h.run_job(job().gpus(8).time("1:00:00"), at=0)
    return h


def test_age_raises_priority_until_priority_max_age() -> None:
    h = blocked_cluster(only(weight_age=1000))
    old = h.submit(waiting(), at=0)
    young = h.submit(waiting(), at=6 * DAY)
    p = priorities_at(h, 7 * DAY)
    assert p[old] == 1000
    assert p[young] == 1000 // 7
    assert priorities_at(h, 30 * DAY)[old] == 1000


def test_fair_share_comes_from_the_hook_by_user_then_account() -> None:
    h = blocked_cluster(only(weight_fairshare=10000))
    h.fairshare = {"alice": 0.9, "physics": 0.2}
    a = h.submit(waiting().user("alice", "physics"))
    b = h.submit(waiting().user("bob", "physics"))
    c = h.submit(waiting().user("carol", "chem"))
    p = priorities_at(h, 10)
    assert (p[a], p[b], p[c]) == (9000, 2000, 5000)


def test_job_size_favours_big_jobs_unless_priority_favor_small() -> None:
    for favor_small, bigger_wins in ((False, True), (True, False)):
        h = SchedHarness(only(weight_job_size=1000, favor_small=favor_small)).gpu_nodes(4)
        h.run_job(job().nodes(4).gpus(8).time("1:00:00"))
        big = h.submit(job().nodes(4).gpus(8))
        small = h.submit(job().gpus(1))
        p = priorities_at(h, 1)
        assert (p[big] > p[small]) is bigger_wins


def test_partition_priority_job_factor_and_qos_weigh_in() -> None:
    h = SchedHarness(only(weight_partition=1000, weight_qos=500))
    h.gpu_nodes(1, partitions=("low", "high"))
    h.partition("high", priority_job_factor=4)
    h.qos_priority = {"normal": 0, "urgent": 100}
    h.run_job(job().gpus(8).time("1:00:00"))
    low = h.submit(job().partition("low"))
    high = h.submit(job().partition("high").qos("urgent"))
    p = priorities_at(h, 1)
    assert p[low] == 250
    assert p[high] == 1000 + 500


def test_nice_lowers_priority_but_never_to_zero() -> None:
    h = blocked_cluster(only(weight_fairshare=100))
    nice = h.submit(waiting().nice(30))
    nicer = h.submit(waiting().nice(1000))
    p = priorities_at(h, 1)
    assert p[nice] == 20 and p[nicer] == 1


def test_an_admin_priority_replaces_the_formula_and_zero_holds() -> None:
    h = blocked_cluster(SchedConfig())
    first = h.submit(waiting(), at=0)
    boosted = h.submit(waiting(), at=1)
    held = h.submit(waiting(), at=2)
    h.priority_overrides = {boosted: 10**6, held: 0}
    d = h.schedule(at=3)
    assert d.priorities[boosted] == 10**6
    assert d.priorities[held] == 0
    assert str(d.reasons[held]) == "JobHeldAdmin"
    assert d.reasons[boosted].value == "Resources"
    assert d.reasons[first].value == "Priority"


def test_held_jobs_show_priority_zero() -> None:
    h = SchedHarness().gpu_nodes(1)
    j = h.submit(job().held())
    assert priorities_at(h, 0)[j] == 0


def test_basic_priority_is_first_come_first_served() -> None:
    h = blocked_cluster(SchedConfig(priority_type="priority/basic"))
    a = h.submit(waiting(), at=5)
    b = h.submit(waiting(), at=6)
    p = priorities_at(h, 7)
    assert p[a] == BASIC_TOP - a and p[b] == p[a] - 1


def test_a_higher_partition_tier_is_examined_first_whatever_the_priority() -> None:
    h = SchedHarness(only(weight_age=1000)).gpu_nodes(1, partitions=("batch", "prio"))
    h.partition("prio", priority_tier=2)
    old = h.submit(job().gpus(8).partition("batch"), at=0)
    urgent = h.submit(job().gpus(8).partition("prio"), at=DAY)
    d = h.schedule(at=2 * DAY)
    assert d.priorities[old] > d.priorities[urgent]
    assert h.started(d) == [urgent]


def test_equal_priorities_go_by_submit_time_then_job_id() -> None:
    h = blocked_cluster(only())
    late = h.submit(waiting().id(10), at=5)
    early_high_id = h.submit(waiting().id(20), at=1)
    early_low_id = h.submit(waiting().id(15), at=1)
    d = h.schedule(at=6)
    assert d.reasons[early_low_id].value == "Resources"
    assert d.reasons[early_high_id].value == "Priority"
    assert d.reasons[late].value == "Priority"
