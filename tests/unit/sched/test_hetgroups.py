"""Heterogeneous jobs in the pass: every component starts now, or none does, and a
group that waits is planned whole, at one start time."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster.core.states import Reason
from muster.sched import SchedConfig
from muster.sched.testing import JobBuilder, SchedHarness, job


def cpu_cluster(n: int = 4, config: SchedConfig | None = None) -> SchedHarness:
    return SchedHarness(config).gpu_nodes(n, gpus=0, cpus=8, mem=16_000, prefix="n")


def test_a_group_that_fits_starts_every_component_in_one_pass() -> None:
    h = cpu_cluster()
    ids = h.submit_het(job().nodes(1).time("10:00"), job().nodes(2).time("10:00"))
    d = h.schedule(at=0)
    assert sorted(h.started(d)) == ids
    nodes = [a.node for s in d.starts for a in s.alloc]
    assert len(nodes) == 3


def test_no_component_starts_when_one_does_not_fit_and_the_others_keep_their_place() -> None:
    h = cpu_cluster()
    busy = h.run_job(job().nodes(2).cpus(8).time("10:00"), at=0)
    # one node would be free for the first component, but the second needs three
    ids = h.submit_het(job().nodes(1).time("10:00"), job().nodes(3).time("10:00"), at=1)
    d = h.schedule(at=1)
    assert h.started(d) == []
    assert all(d.reasons[i] is Reason.RESOURCES for i in ids)
    # planned whole, at one time: when the busy job ends
    assert h.start_of(ids[0]) == h.start_of(ids[1]) == 600
    h.finish(busy)
    d = h.schedule(at=600)
    assert sorted(h.started(d)) == ids


def test_the_profile_is_given_back_when_a_group_fails_so_a_later_job_still_starts() -> None:
    h = cpu_cluster(2)
    ids = h.submit_het(job().nodes(1).cpus(8).time("10:00"), job().nodes(3).time("10:00"))
    small = h.submit(job().nodes(2).cpus(8).time("5:00"))
    d = h.schedule(at=0)
    assert h.started(d) == [small]
    assert all(i in d.reasons for i in ids)


def test_a_held_component_keeps_the_whole_group_waiting_with_its_reason() -> None:
    h = cpu_cluster()
    ids = h.submit_het(job().nodes(1), job().nodes(1).held())
    d = h.schedule(at=0)
    assert h.started(d) == []
    assert d.reasons[ids[0]] is Reason.HELD_USER
    assert d.reasons[ids[1]] is Reason.HELD_USER


def test_a_group_behind_a_planned_job_starts_only_if_it_delays_nothing() -> None:
    h = cpu_cluster()
    h.run_job(job().nodes(3).cpus(8).time("10:00"), at=0)
    big = h.submit(job().nodes(4).cpus(8).time("1:00:00"), at=1)
    # fits now on the free node, but its second component runs past the big job's start
    ids = h.submit_het(job().nodes(1).cpus(4).time("5:00"), job().nodes(1).cpus(4).time("1:00:00"), at=2)
    d = h.schedule(at=2)
    assert h.started(d) == []
    assert h.start_of(big) == 600
    assert all(d.reasons[i] is Reason.PRIORITY for i in ids)
    assert h.start_of(ids[0]) == h.start_of(ids[1]) == 600 + 3600


def test_gpu_indices_taken_by_a_failed_group_are_given_back() -> None:
    h = SchedHarness().gpu_nodes(2, gpus=8)
    h.run_job(job().nodes(1).gpus(8).time("10:00"), at=0)
    # the first component fits now (4 GPUs of the free node), the second cannot
    ids = h.submit_het(job().nodes(1).gpus(4).time("10:00"), job().nodes(1).gpus(8).time("10:00"))
    other = h.submit(job().nodes(1).gpus(8).time("10:00"))
    d = h.schedule(at=0)
    assert h.started(d) == [other]
    assert sorted(d.starts[0].alloc[0].gpu_ids) == list(range(8))
    assert h.start_of(ids[0]) == h.start_of(ids[1]) == 600


# -- properties ---------------------------------------------------------------------------

PROPERTY = settings(
    max_examples=int(os.environ.get("MUSTER_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
shapes = st.tuples(
    st.integers(1, 3), st.integers(1, 8), st.integers(0, 4), st.sampled_from(["5:00", "30:00", "2:00:00"])
)


def _builder(shape: tuple[int, int, int, str]) -> JobBuilder:
    nodes, cpus, gpus, limit = shape
    b = job().nodes(nodes).cpus(cpus).time(limit)
    return b.gpus(gpus) if gpus else b


@PROPERTY
@given(
    running=st.lists(shapes, max_size=3),
    queue=st.lists(st.one_of(shapes.map(lambda s: [s]), st.lists(shapes, min_size=2, max_size=3)), max_size=6),
    config=st.sampled_from(
        [SchedConfig(), SchedConfig(conservative=True), SchedConfig(scheduler_type="sched/builtin")]
    ),
)
def test_a_het_group_starts_whole_or_not_at_all_and_is_planned_at_one_time(
    running: list[tuple[int, int, int, str]], queue: list[list[tuple[int, int, int, str]]], config: SchedConfig
) -> None:
    h = SchedHarness(config).gpu_nodes(3, gpus=4, cpus=8, mem=64_000)
    for shape in running:
        h.submit(_builder(shape))
        h.schedule(at=0)  # whatever fits runs (the harness checks every pass's invariants)
    groups = []
    for entry in queue:
        if len(entry) == 1:
            h.submit(_builder(entry[0]), at=1)
        else:
            groups.append(h.submit_het(*(_builder(s) for s in entry), at=1))
    for at in (1.0, 2.0):
        d = h.schedule(at=at)
        started = set(h.started(d))
        for ids in groups:
            assert len(started & set(ids)) in (0, len(ids)), f"group {ids} started in part"
            plans = {d.plans[i].start_time for i in ids if i in d.plans}
            assert len(plans) <= 1, f"group {ids} planned at several times"
            if plans:
                assert all(i in d.plans for i in ids), f"group {ids} planned in part"
