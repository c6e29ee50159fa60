"""Planning one-node jobs from a per-time heap of the nodes that open then (issue 40): the
same plans, nodes and reasons as the full sweep over every node that opens then."""

from __future__ import annotations

import random

import pytest

from muster.sched import SchedConfig
from muster.sched.backfill import _KeyPlan
from muster.sched.decisions import Decisions
from muster.sched.testing import SchedHarness, job


def _scene(seed: int, config: SchedConfig) -> SchedHarness:
    """Nodes of different sizes, full of running jobs whose limits end together in a few
    groups (many nodes free at one time), and a queue of one-node jobs of a few shapes,
    a few multi-node jobs among them."""
    rng = random.Random(seed)
    h = SchedHarness(config).gpu_nodes(24, gpus=8).gpu_nodes(8, gpus=4, cpus=32, prefix="small")
    limits = ["30:00", "1:00:00", "1:00:00", "2:00:00"]
    for i in range(24):
        h.run_job(job().gpus(8).time(rng.choice(limits)).nodelist(f"gpu{i + 1}"), at=0)
    for i in range(8):
        h.run_job(job().gpus(rng.choice((2, 4))).time(rng.choice(limits)).nodelist(f"small{24 + i + 1}"), at=0)
    for i in range(60):
        r = rng.random()
        if r < 0.1:
            b = job().nodes(rng.choice((2, 3))).gpus(8).time("1:00:00")
        elif r < 0.5:
            b = job().gpus(8).time(rng.choice(("20:00", "45:00", "1:30:00")))
        else:
            b = job().gpus(rng.choice((1, 2, 4))).time(rng.choice(("10:00", "40:00")))
        h.submit(b, at=1 + i)
    return h


def _passes(h: SchedHarness) -> list[Decisions]:
    out = [h.schedule(at=100)]
    for t in (200, 1900):  # more passes: with the plans of the pass before
        out.append(h.schedule(at=t))
    return out


def _summary(ds: list[Decisions]) -> list[object]:
    return [
        (
            sorted((s.job_id, tuple(a.node for a in s.alloc)) for s in d.starts),
            sorted((i, p.start_time, tuple(p.nodes)) for i, p in d.plans.items()),
            sorted((i, str(r)) for i, r in d.reasons.items()),
        )
        for d in ds
    ]


@pytest.mark.parametrize("conservative", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_one_node_plans_are_those_of_the_full_sweep(
    seed: int, conservative: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = SchedConfig(conservative=conservative)
    fast = _summary(_passes(_scene(seed, config)))
    assert any(plans for _starts, plans, _reasons in fast)  # the scene plans something
    monkeypatch.setattr(_KeyPlan, "_first_one", lambda self, req: self._sweep_all(req, None))
    assert _summary(_passes(_scene(seed, config))) == fast


def test_same_shape_jobs_take_the_nodes_that_free_together_best_fit_first() -> None:
    # eight nodes free at 1 h; the 4-GPU node is the best fit for 4-GPU jobs, then the others
    h = SchedHarness().gpu_nodes(6, gpus=8).gpu_nodes(1, gpus=4, prefix="small")
    for i in range(6):
        h.run_job(job().gpus(8).time("1:00:00").nodelist(f"gpu{i + 1}"), at=0)
    h.run_job(job().gpus(4).time("1:00:00").nodelist("small7"), at=0)
    ids = [h.submit(job().gpus(4).time("10:00"), at=1 + i) for i in range(3)]
    d = h.schedule(at=10)
    assert [d.plans[i].start_time for i in ids] == [3600, 3600, 3600]
    assert [d.plans[i].nodes for i in ids] == [["small7"], ["gpu1"], ["gpu1"]]
