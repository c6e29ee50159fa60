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


@pytest.mark.parametrize("expedite", [True, False])
def test_an_expedited_job_restarts_first_on_its_surviving_node_plus_one(expedite: bool) -> None:
    from muster.sim.engine import _FAIL
    from muster.sim.failures import FailureModel
    from muster.sim.policies import build_settings

    cluster = uniform_cluster("procs", {}, 4, 2, None)
    jobs = [
        TraceJob(trace_id="train", submit=0, run=1000, size=4),  # two nodes
        TraceJob(trace_id="busy", submit=1, run=5000, size=2),
        TraceJob(trace_id="other", submit=2, run=1000, size=4),  # waits: one node is free
    ]
    config = SchedConfig.from_settings(build_settings("easy", max_time_limit=10**7))
    model = FailureModel(rate=1e-12, repair=10**6, interval=0, expedite=expedite)
    sim = Simulation(jobs, "procs", cluster, config, failures=model, allow_overrun=True)
    sim.jobs[0].spec.nice = 5000  # lower priority than `other`: only expedite puts it first
    sim._push(100.0, _FAIL, 1)  # the train job's second node dies at t=100
    out = {o.trace_id: o for o in sim.run().outcomes}
    first_nodes = {v.name for v in cluster.nodes[:2]}
    if expedite:
        assert out["train"].start == 100 and out["train"].restarts == 1
        assert cluster.nodes[0].name in out["train"].nodes and cluster.nodes[1].name not in out["train"].nodes
        assert out["other"].start > 100
    else:
        assert out["other"].start == 100 and set(out["other"].nodes) & first_nodes
