"""Multifactor priority and the order in which jobs are examined."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from muster.sched import SchedConfig
from muster.sched.priority import BASIC_TOP, PriorityPolicy, examination_order, order_key
from muster.sched.snapshot import Snapshot
from muster.sched.testing import JobBuilder, SchedHarness, job

DAY = 86400


def only(**weights: int) -> SchedConfig:
    base: dict[str, object] = dict(
        priority_type="priority/multifactor",
        weight_age=0,
        weight_fairshare=0,
        weight_job_size=0,
        weight_partition=0,
        weight_qos=0,
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


def test_fair_share_comes_from_the_hook_by_association_then_user_then_account() -> None:
    h = blocked_cluster(only(weight_fairshare=10000))
    h.fairshare = {"alice": 0.9, "physics": 0.2, "chem|dave": 0.7, "physics|dave": 0.1}
    a = h.submit(waiting().user("alice", "physics"))
    b = h.submit(waiting().user("bob", "physics"))
    c = h.submit(waiting().user("carol", "chem"))
    d_chem = h.submit(waiting().user("dave", "chem"))
    d_phys = h.submit(waiting().user("dave", "physics"))
    p = priorities_at(h, 10)
    assert (p[a], p[b], p[c]) == (9000, 2000, 5000)
    assert (p[d_chem], p[d_phys]) == (7000, 1000)  # one user, two associations


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


def test_factors_are_the_formula_term_by_term_and_total_what_the_pass_gives() -> None:
    config = SchedConfig(
        priority_type="priority/multifactor",
        weight_age=1000,
        weight_fairshare=10000,
        weight_job_size=300,
        weight_partition=1000,
        weight_qos=500,
        max_age=10 * DAY,
    )
    h = SchedHarness(config).gpu_nodes(4, partitions=("low", "high"))
    h.partition("high", priority_job_factor=4)
    h.qos_priority = {"normal": 0, "urgent": 100}
    h.fairshare = {"physics|alice": 0.25}
    h.run_job(job().nodes(4).gpus(8).time("1:00:00"), at=0)
    j = h.submit(job().nodes(2).gpus(8).partition("low").qos("urgent").user("alice", "physics").nice(7), at=0)
    given = h.schedule(at=DAY).priorities[j]
    snap = h.snapshot()
    policy = PriorityPolicy(snap, DAY, config)
    pending = next(x for x in snap.pending if x.job_id == j)
    f = policy.factors(pending, ("low",))
    assert (f.age, f.fairshare, f.jobsize, f.partition, f.qos) == (0.1, 0.25, 0.5, 0.25, 1.0)
    assert f.total == given == int(1000 * 0.1 + 10000 * 0.25 + 300 * 0.5 + 1000 * 0.25 + 500) - 7
    assert policy.factors(pending, ("low", "high")).partition == 1.0  # the best it may use


def test_nice_lowers_priority_but_never_to_zero() -> None:
    h = blocked_cluster(only(weight_fairshare=100))
    nice = h.submit(waiting().nice(30))
    nicer = h.submit(waiting().nice(1000))
    p = priorities_at(h, 1)
    assert p[nice] == 20 and p[nicer] == 1


def test_an_admin_priority_replaces_the_formula_and_zero_holds() -> None:
    h = blocked_cluster(SchedConfig(priority_type="priority/multifactor"))
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


# -- the examination order in bulk, against the one-key definition --------------------

_fields = st.tuples(
    st.sampled_from([0, 1, 2, -1, (1 << 16) + 5]),  # tier, some out of range
    st.one_of(st.integers(-5, 40), st.sampled_from([BASIC_TOP, 1 << 60])),  # priority
    st.sampled_from([0.0, 1.0, 1.0000004, 2.5, -3.0, 1e13]),  # submit time
    st.one_of(st.integers(-2, 30), st.just(1 << 50)),  # job id
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_fields, max_size=25), st.sampled_from(["any", "rising", "falling"]))
def test_examination_order_sorts_as_order_key_does(rows: list[tuple[int, int, float, int]], priorities: str) -> None:
    # distinct priorities take the short paths: no tie to break, or already in order
    if priorities == "rising":
        rows = [(t, i, s, j) for i, (t, _, s, j) in enumerate(rows)]
    elif priorities == "falling":
        rows = [(t, 100 - i, s, j) for i, (t, _, s, j) in enumerate(rows)]
    jobs = [job().id(j).build(j, s, "batch") for _, _, s, j in rows]
    tiers = [t for t, _, _, _ in rows]
    prios = [p for _, p, _, _ in rows]
    keys = [order_key(t, p, jb) for t, p, jb in zip(tiers, prios, jobs, strict=True)]
    expected = sorted(range(len(rows)), key=keys.__getitem__)
    assert examination_order(tiers, prios, jobs) == expected


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**33), st.sampled_from([0, 0, 5, -3, 2**33])), max_size=20),
    st.lists(st.booleans(), max_size=20),
)
def test_fifo_priorities_in_bulk_match_one_by_one(ids_nice: list[tuple[int, int]], held: list[bool]) -> None:
    config = SchedConfig(priority_type="priority/basic")
    jobs = []
    for k, (job_id, nice) in enumerate(ids_nice):
        b = job().id(job_id).nice(nice)
        if k < len(held) and held[k]:
            b = b.held()
        jobs.append(b.build(job_id, 0.0, "batch"))
    snap = Snapshot(nodes=[], partitions={}, pending=jobs, running=[])
    policy = PriorityPolicy(snap, 0.0, config)
    parts = [("batch",)] * len(jobs)
    one_by_one = [policy.priority(j, p) for j, p in zip(jobs, parts, strict=True)]
    assert policy.priorities(jobs, parts) == one_by_one
