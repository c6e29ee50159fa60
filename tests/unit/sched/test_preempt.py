"""Preemption planned inside the pass: the fewest victims, those that lose the least work
(test_preempt_victims.py) or Slurm's lowest-priority ones, never for a job that could not
run, and holds until the victims leave."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core.states import Reason
from muster.sched import SchedConfig
from muster.sched.snapshot import QosPreempt
from muster.sched.testing import SchedHarness, job

QOS = SchedConfig(preempt_type="preempt/qos", preempt_mode="REQUEUE", priority_type="priority/basic")


def cluster(config: SchedConfig = QOS, nodes: int = 4) -> SchedHarness:
    h = SchedHarness(config).gpu_nodes(nodes, gpus=8)
    h.qos_preempt = {"high": QosPreempt(preempt=("scavenger",)), "scavenger": QosPreempt(grace_time=30)}
    return h


def scavenger(h: SchedHarness, gpus: int = 8, at: float = 0.0, priority: int = 10) -> int:
    j = h.run_job(job().gpus(gpus).time("10:00:00").qos("scavenger"), at=at)
    h.running[j].priority = priority
    return j


def victims(h: SchedHarness) -> list[int]:
    assert h.last is not None
    return sorted(p.job_id for p in h.last.preemptions)


def test_a_two_node_job_preempts_two_scavengers_and_starts_once_they_are_gone() -> None:
    h = cluster()
    scav = [scavenger(h, at=i) for i in range(4)]
    big = h.submit(job().nodes(2).gpus(8).time("1:00:00").qos("high"), at=100)
    d = h.schedule(at=100)
    assert h.started(d) == []
    assert len(d.preemptions) == 2
    assert all(p.preemptor == big and p.mode == "REQUEUE" and p.grace_time == 30 for p in d.preemptions)
    assert sorted(d.holds[big]) == sorted({a.node for v in victims(h) for a in h.running[v].alloc})
    # in its grace time: no more victims, and nothing else starts on the held nodes
    other = h.submit(job().gpus(8).time("10:00").qos("scavenger"), at=110)
    d = h.schedule(at=110)
    assert d.preemptions == [] and h.started(d) == []
    gone = [p.job_id for p in h.history[-2].preemptions]
    for v in gone:
        h.requeue(v)
    d = h.schedule(at=130)
    assert h.started(d) == [big]
    assert sorted(a.node for a in d.starts[0].alloc) == sorted(h.history[-3].holds[big])
    assert other not in h.started(d) and set(scav) - set(gone) <= set(h.running)


def test_the_fewest_victims_are_chosen() -> None:
    h = cluster(nodes=2)
    small = [scavenger(h, gpus=4, at=i, priority=1) for i in range(2)]  # both on gpu1
    whole = scavenger(h, gpus=8, at=2, priority=1)  # gpu2
    assert {h.running[s].alloc[0].node for s in small} != {h.running[whole].alloc[0].node}
    h.submit(job().gpus(8).time("1:00:00").qos("high"), at=10)
    h.schedule(at=10)
    assert victims(h) == [whole]


def test_with_slurms_victim_order_the_lowest_priority_victims_are_chosen() -> None:
    h = cluster(config=SchedConfig(**{**_fields(QOS), "preempt_victim_order": "priority"}), nodes=3)
    a = scavenger(h, at=0, priority=50)
    b = scavenger(h, at=1, priority=5)
    c = scavenger(h, at=2, priority=20)
    h.submit(job().nodes(2).gpus(8).time("1:00:00").qos("high"), at=10)
    h.schedule(at=10)
    assert victims(h) == sorted([b, c])
    assert a in h.running


def test_among_equals_the_victim_that_checkpointed_last_is_chosen() -> None:
    h = cluster(nodes=3)
    a, b, c = (scavenger(h, at=0) for _ in range(3))
    h.running[a].progress = {"ckpt_time": 900.0}
    h.running[b].progress = {"ckpt_time": 990.0}  # loses 10 s
    h.running[c].progress = None  # loses all 1000 s
    h.submit(job().gpus(8).time("1:00:00").qos("high"), at=1000)
    d = h.schedule(at=1000)
    assert victims(h) == [b]
    assert d.preemptions[0].lost == 10.0
    assert d.preemptions[0].reason == "Preempted by job 4 (last checkpoint 10 s ago)"


def test_a_victim_within_preempt_exempt_time_is_spared() -> None:
    h = cluster(config=SchedConfig(**{**_fields(QOS), "preempt_exempt_time": 600}), nodes=2)
    old = scavenger(h, at=0)
    scavenger(h, at=900)
    h.submit(job().gpus(8).time("1:00:00").qos("high"), at=1000)
    h.schedule(at=1000)
    assert victims(h) == [old]
    h.submit(job().gpus(8).time("1:00:00").qos("high"), at=1001)
    assert h.schedule(at=1001).preemptions == []  # the other one ran only 101 s


def test_nobody_is_preempted_for_a_job_that_could_not_run_even_then() -> None:
    h = cluster(nodes=2)
    scavenger(h, at=0)
    h.run_job(job().gpus(8).time("10:00:00"), at=1)  # normal QOS: not preemptable by high
    big = h.submit(job().nodes(2).gpus(8).time("1:00:00").qos("high"), at=10)
    d = h.schedule(at=10)
    assert d.preemptions == [] and d.reasons[big] is Reason.RESOURCES
    constrained = h.submit(job().gpus(8).time("1:00:00").qos("high").constraint("nvlink"), at=11)
    d = h.schedule(at=11)
    assert d.preemptions == [] and constrained not in h.started(d)


def test_a_qos_not_in_the_preempt_list_preempts_nobody() -> None:
    h = cluster(nodes=1)
    scavenger(h, at=0)
    h.submit(job().gpus(8).time("1:00:00").qos("normal"), at=10)
    assert h.schedule(at=10).preemptions == []


def test_partition_prio_preempts_jobs_of_a_lower_tier_with_its_mode() -> None:
    config = SchedConfig(preempt_type="preempt/partition_prio", preempt_mode="REQUEUE", priority_type="priority/basic")
    h = SchedHarness(config).gpu_nodes(2, gpus=8, partitions=("low", "high"))
    h.partition("low", priority_tier=1, preempt_mode="CANCEL", grace_time=5)
    h.partition("high", priority_tier=10)
    low = h.run_job(job().gpus(8).time("1:00:00").partition("low"), at=0)
    h.run_job(job().gpus(8).time("1:00:00").partition("high"), at=1)
    h.submit(job().gpus(8).time("1:00:00").partition("high"), at=10)
    d = h.schedule(at=10)
    assert [(p.job_id, p.mode, p.grace_time) for p in d.preemptions] == [(low, "CANCEL", 5)]


def test_preempt_mode_off_disables_preemption() -> None:
    h = cluster(config=SchedConfig(**{**_fields(QOS), "preempt_mode": "OFF"}), nodes=1)
    scavenger(h, at=0)
    h.submit(job().gpus(8).time("1:00:00").qos("high"), at=10)
    assert h.schedule(at=10).preemptions == []


def test_an_expedited_job_goes_first_and_restarts_on_its_held_nodes() -> None:
    h = SchedHarness(SchedConfig(priority_type="priority/basic")).gpu_nodes(5, gpus=8)
    early = h.submit(job().nodes(3).gpus(8).time("1:00:00"), at=0)
    train = h.submit(job().nodes(3).gpus(8).time("1:00:00"), at=1)
    j = h.pending[train]
    j.expedited, j.held_nodes, j.hold_until = True, ["gpu4", "gpu5"], 1000.0
    d = h.schedule(at=10)
    assert h.started(d) == [train]
    assert {"gpu4", "gpu5"} <= {a.node for a in d.starts[0].alloc}
    assert d.reasons[early] is Reason.RESOURCES


def test_held_nodes_are_given_to_nobody_else_until_the_hold_ends() -> None:
    h = SchedHarness(SchedConfig(priority_type="priority/basic")).gpu_nodes(3, gpus=8)
    h.run_job(job().gpus(8).time("1:00:00"), at=0)  # gpu1 busy
    train = h.submit(job().nodes(3).gpus(8).time("1:00:00"), at=1)
    j = h.pending[train]
    j.held_nodes, j.hold_until = ["gpu2", "gpu3"], 100.0
    small = h.submit(job().gpus(8).time("10:00"), at=2)
    d = h.schedule(at=10)
    assert h.started(d) == []
    d = h.schedule(at=101)  # the hold ended
    assert h.started(d) == [small]


def _fields(c: SchedConfig) -> dict[str, object]:
    return {f: getattr(c, f) for f in c.__slots__}  # type: ignore[attr-defined]


def test_two_preemptors_in_one_pass_take_different_victims_and_nodes() -> None:
    h = cluster(nodes=4)
    for i in range(4):
        scavenger(h, at=i)
    a = h.submit(job().gpus(8).time("1:00:00").qos("high"), at=10)
    b = h.submit(job().gpus(8).time("1:00:00").qos("high"), at=11)
    d = h.schedule(at=20)
    assert {p.preemptor for p in d.preemptions} == {a, b} and len({p.job_id for p in d.preemptions}) == 2
    assert set(d.holds[a]).isdisjoint(d.holds[b])


def test_an_exclusive_preemptor_evicts_every_job_of_a_node() -> None:
    h = cluster(nodes=2)
    for i in range(4):
        scavenger(h, gpus=4, at=i)
    h.running[1].priority = 99  # gpu1's pair is dearer than gpu2's
    h.submit(job().gpus(1).exclusive().time("1:00:00").qos("high"), at=10)
    h.schedule(at=10)
    assert victims(h) == [3, 4]


def test_a_required_node_is_where_the_victims_are_taken() -> None:
    h = cluster(nodes=2)
    first, second = scavenger(h, at=0, priority=1), scavenger(h, at=1, priority=50)
    h.submit(job().gpus(8).time("1:00:00").qos("high").nodelist(h.running[second].alloc[0].node), at=10)
    h.schedule(at=10)
    assert victims(h) == [second] and first in h.running


@settings(max_examples=60, deadline=None)
@given(
    scav=st.lists(st.integers(1, 8), min_size=1, max_size=10),
    nodes=st.integers(1, 3),
    gpus=st.integers(1, 8),
)
def test_a_preemptor_fits_on_its_held_nodes_once_its_victims_are_gone(scav: list[int], nodes: int, gpus: int) -> None:
    h = cluster(nodes=4)
    for i, g in enumerate(scav):
        j = h.submit(job().gpus(g).time("10:00:00").qos("scavenger"), at=i)
        h.schedule(at=i)
        if j in h.running:
            h.running[j].priority = 10
    big = h.submit(job().nodes(nodes).gpus(gpus).time("1:00:00").qos("high"), at=100)
    d = h.schedule(at=100)
    if big in h.started(d):
        return
    free = {v.name: len(v.free_gpu_ids) for v in h.nodes}
    for v in h.running.values():
        for a in v.alloc:
            free[a.node] += len(a.gpu_ids)  # everything preemptable gone
    possible = sum(1 for f in free.values() if f >= gpus) >= nodes
    assert bool(d.preemptions) == possible
    if d.preemptions:
        held = d.holds[big]
        assert len(held) == nodes
        left = {v.name: len(v.free_gpu_ids) for v in h.nodes}
        for p in h.history[-1].preemptions:
            for a in h.running[p.job_id].alloc:
                left[a.node] += len(a.gpu_ids)
        assert all(left[n] >= gpus for n in held)
