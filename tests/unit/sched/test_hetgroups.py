"""Heterogeneous jobs in the pass: every component starts now, or none does, and a
group that waits is planned whole, at one start time."""

from __future__ import annotations

from muster.core.states import Reason
from muster.sched import SchedConfig
from muster.sched.testing import SchedHarness, job


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
