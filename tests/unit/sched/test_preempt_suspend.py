"""PreemptMode=SUSPEND,GANG in the planner: a suspended victim gives back its CPUs only
(it keeps its memory and GPUs, as in Slurm), so it is chosen only where CPUs are what the
preemptor lacks."""

from __future__ import annotations

from muster.core.states import Reason
from muster.sched import SchedConfig
from muster.sched.testing import SchedHarness, job

PRIO = SchedConfig(preempt_type="preempt/partition_prio", preempt_mode="SUSPEND", priority_type="priority/basic")


def cluster(nodes: int = 1) -> SchedHarness:
    h = SchedHarness(PRIO).gpu_nodes(nodes, gpus=8, cpus=64, mem=512_000, partitions=("low", "high"))
    h.partition("low", priority_tier=1)
    h.partition("high", priority_tier=10, preempt_mode="OFF")
    return h


def test_a_preemptor_short_of_cpus_suspends_a_lower_tier_job() -> None:
    h = cluster()
    low = h.run_job(job().cpus(64).gpus(2).mem(100_000).time("10:00:00").partition("low"), at=0)
    high = h.submit(job().cpus(32).gpus(4).mem(100_000).time("1:00:00").partition("high"), at=100)
    d = h.schedule(at=100)
    assert h.started(d) == []
    assert [(p.job_id, p.preemptor, p.mode, p.grace_time) for p in d.preemptions] == [(low, high, "SUSPEND", 0)]
    assert d.preemptions[0].reason == f"Preempted by job {high} (suspended until it ends)"
    assert d.preemptions[0].lost == 0.0 and d.holds[high] == ["gpu1"]


def test_a_suspended_job_keeps_its_gpus_so_a_preemptor_needing_them_waits() -> None:
    h = cluster()
    h.run_job(job().cpus(8).gpus(8).time("10:00:00").partition("low"), at=0)
    high = h.submit(job().cpus(8).gpus(1).time("1:00:00").partition("high"), at=100)
    d = h.schedule(at=100)
    assert d.preemptions == [] and h.started(d) == []
    assert d.reasons[high] in (Reason.RESOURCES, Reason.PRIORITY)


def test_a_suspended_job_keeps_its_memory() -> None:
    h = cluster()
    h.run_job(job().cpus(64).gpus(0).mem(500_000).time("10:00:00").partition("low"), at=0)
    h.submit(job().cpus(8).gpus(0).mem(100_000).time("1:00:00").partition("high"), at=100)
    d = h.schedule(at=100)
    assert d.preemptions == []


def test_an_exclusive_preemptor_cannot_use_a_suspended_job() -> None:
    h = cluster()
    h.run_job(job().cpus(64).gpus(0).mem(1000).time("10:00:00").partition("low"), at=0)
    h.submit(job().exclusive().gpus(0).time("1:00:00").partition("high"), at=100)
    assert h.schedule(at=100).preemptions == []


def test_only_the_victims_whose_cpus_are_needed_are_suspended() -> None:
    h = cluster()
    a = h.run_job(job().cpus(32).gpus(0).mem(1000).time("10:00:00").partition("low"), at=0)
    b = h.run_job(job().cpus(32).gpus(0).mem(1000).time("10:00:00").partition("low"), at=1)
    high = h.submit(job().cpus(16).gpus(8).mem(1000).time("1:00:00").partition("high"), at=100)
    d = h.schedule(at=100)
    assert len(d.preemptions) == 1 and d.preemptions[0].job_id in (a, b) and d.preemptions[0].preemptor == high


def test_suspend_is_not_used_under_preempt_qos() -> None:
    config = SchedConfig(preempt_type="preempt/qos", preempt_mode="SUSPEND", priority_type="priority/basic")
    h = SchedHarness(config).gpu_nodes(1, gpus=8, cpus=64, partitions=("low", "high"))
    h.run_job(job().cpus(64).gpus(0).time("10:00:00").partition("low").qos("scavenger"), at=0)
    from muster.sched.snapshot import QosPreempt

    h.qos_preempt = {"high": QosPreempt(preempt=("scavenger",))}
    h.submit(job().cpus(8).gpus(0).time("1:00:00").partition("high").qos("high"), at=100)
    assert h.schedule(at=100).preemptions == []
