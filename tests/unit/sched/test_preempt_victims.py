"""Victim order (issue 37): among the jobs the policy allows, the ones that lose the least
GPU-time since their last checkpoint go first, then the smaller; Slurm's priority order on
request (``PreemptParameters=victim_order=priority``)."""

from __future__ import annotations

from muster.sched import SchedConfig
from muster.sched.preempt import victim_cost, victim_key
from muster.sched.snapshot import QosPreempt
from muster.sched.testing import SchedHarness, job

QOS = SchedConfig(preempt_type="preempt/qos", preempt_mode="REQUEUE", priority_type="priority/basic")
SLURM = SchedConfig(
    preempt_type="preempt/qos", preempt_mode="REQUEUE", priority_type="priority/basic", preempt_victim_order="priority"
)


def cluster(config: SchedConfig = QOS, nodes: int = 3) -> SchedHarness:
    h = SchedHarness(config).gpu_nodes(nodes, gpus=8)
    h.qos_preempt = {"high": QosPreempt(preempt=("scavenger",)), "scavenger": QosPreempt(grace_time=30)}
    return h


def scavenger(h: SchedHarness, gpus: int = 8, priority: int = 10, ckpt: float | None = None) -> int:
    j = h.run_job(job().gpus(gpus).time("10:00:00").qos("scavenger"), at=0)
    h.running[j].priority = priority
    h.running[j].progress = {"ckpt_time": ckpt} if ckpt is not None else None
    return j


def victims(h: SchedHarness) -> list[int]:
    assert h.last is not None
    return sorted(p.job_id for p in h.last.preemptions)


def test_the_cost_of_a_victim_is_the_gpu_time_since_its_checkpoint() -> None:
    h = cluster()
    a = scavenger(h, gpus=8, ckpt=900.0)
    b = scavenger(h, gpus=4)
    assert victim_cost(h.running[a], 1000.0) == (800.0, 8)  # 100 s x 8 GPUs
    assert victim_cost(h.running[b], 1000.0) == (4000.0, 4)  # no checkpoint: its whole run
    # a checkpoint of an earlier attempt (before this start) saves nothing of this one
    h.running[a].progress = {"ckpt_time": -5.0}
    assert victim_cost(h.running[a], 1000.0) == (8000.0, 8)


def test_the_least_work_lost_goes_first_whatever_the_priority() -> None:
    h = cluster()
    fresh = scavenger(h, priority=90, ckpt=990.0)  # loses 10 s x 8 GPUs
    scavenger(h, priority=1, ckpt=100.0)  # the lowest priority, but loses 900 s x 8 GPUs
    scavenger(h, priority=5)  # loses everything
    h.submit(job().gpus(8).time("1:00:00").qos("high"), at=1000)
    d = h.schedule(at=1000)
    assert victims(h) == [fresh]
    assert d.preemptions[0].lost == 10.0


def test_slurms_order_takes_the_lowest_priority_whatever_it_loses() -> None:
    h = cluster(SLURM)
    scavenger(h, priority=90, ckpt=990.0)
    low = scavenger(h, priority=1, ckpt=100.0)
    scavenger(h, priority=5)
    h.submit(job().gpus(8).time("1:00:00").qos("high"), at=1000)
    h.schedule(at=1000)
    assert victims(h) == [low]


def test_among_equal_losses_the_smaller_job_goes_first() -> None:
    h = cluster(nodes=1)
    big = scavenger(h, gpus=4, ckpt=995.0)  # 5 s x 4 GPUs = 20 GPU-s
    small = scavenger(h, gpus=2, ckpt=990.0)  # 10 s x 2 GPUs = 20 GPU-s
    scavenger(h, gpus=2, ckpt=0.0)  # 1000 s x 2 GPUs
    h.submit(job().gpus(2).time("1:00:00").qos("high"), at=1000)
    h.schedule(at=1000)
    assert victims(h) == [small]
    assert big in h.running


def test_the_key_orders_by_loss_then_size_then_priority() -> None:
    h = cluster()
    a, b = scavenger(h, priority=3), scavenger(h, priority=7)
    ja, jb = h.running[a], h.running[b]
    assert victim_key(ja, (10.0, 8)) < victim_key(jb, (20.0, 8))
    assert victim_key(jb, (10.0, 4)) < victim_key(ja, (10.0, 8))
    assert victim_key(ja, (10.0, 8)) < victim_key(jb, (10.0, 8))  # equal cost: lower priority
    assert victim_key(jb, (0.0, 8), "priority") > victim_key(ja, (99.0, 8), "priority")


def test_preempt_parameters_choose_the_order() -> None:
    assert SchedConfig.from_settings({}).preempt_victim_order == "lost_work"
    conf = SchedConfig.from_settings({"PreemptParameters": "youngest_first,victim_order=priority"})
    assert conf.preempt_victim_order == "priority"
    assert SchedConfig.from_settings({"PreemptParameters": "victim_order=bogus"}).preempt_victim_order == "lost_work"
