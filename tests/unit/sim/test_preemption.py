"""Preemption in the simulator: the same pass decides, the engine ends the victims after
their grace time (requeued from scratch, as traces model no checkpoints, or cancelled)
and counts the work they lost."""

from __future__ import annotations

import dataclasses

import pytest

from muster.sched import SchedConfig
from muster.sim.cluster import uniform_cluster
from muster.sim.engine import Simulation
from muster.sim.traces import TraceJob


def simulation(mode: str, grace: int = 0) -> Simulation:
    cluster = uniform_cluster("procs", {"maxprocs": "4"})
    base = cluster.partitions[cluster.default_partition]
    cluster.partitions[base.name] = dataclasses.replace(base, priority_tier=1, preempt_mode=mode, grace_time=grace)
    cluster.partitions["urgent"] = dataclasses.replace(base, name="urgent", priority_tier=10, is_default=False)
    config = SchedConfig(preempt_type="preempt/partition_prio", preempt_mode="REQUEUE")
    jobs = [
        TraceJob(trace_id="scav", submit=0, run=100, size=4, estimate=1000),
        TraceJob(trace_id="urgent", submit=40, run=10, size=4, estimate=20),
    ]
    sim = Simulation(jobs, "procs", cluster, config)
    urgent = sim.jobs[1]
    urgent.partition, urgent.spec.partitions = "urgent", ["urgent"]
    return sim


@pytest.mark.parametrize("grace", [0, 5])
def test_a_requeued_victim_reruns_after_the_preemptor_and_its_lost_work_is_counted(grace: int) -> None:
    result = simulation("REQUEUE", grace).run()
    out = {o.trace_id: o for o in result.outcomes}
    assert out["urgent"].start == 40 + grace and out["urgent"].end == 50 + grace
    assert out["scav"].start == 50 + grace and out["scav"].end == 150 + grace  # from scratch
    assert result.preemptions == 1
    assert result.preempted_lost_hours == pytest.approx((40 + grace) * 4 / 3600)


def test_a_cancelled_victim_ends_at_its_grace_time() -> None:
    result = simulation("CANCEL", 5).run()
    out = {o.trace_id: o for o in result.outcomes}
    assert out["scav"].end == 45 and out["scav"].killed
    assert out["urgent"].start == 45
