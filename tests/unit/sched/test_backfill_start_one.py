"""Starting one-node GPU jobs from the per-group index sorted by (free CPUs, free memory,
position) (issue 40): the same nodes, plans and reasons as keying every node of the best
group and picking the best fit."""

from __future__ import annotations

import random

import pytest

from muster.sched import SchedConfig
from muster.sched.backfill import Backfill
from muster.sched.decisions import Decisions
from muster.sched.profile import NodeProfile
from muster.sched.select import pick
from muster.sched.snapshot import ReservationView
from muster.sched.testing import SchedHarness, job


def _scene(seed: int, config: SchedConfig) -> SchedHarness:
    """Nodes of two sizes, partly used by running jobs of many shapes (so a group of equal
    free GPUs holds nodes with different free CPUs and memory), a reservation on a few of
    them, and a queue of one-node GPU jobs with a few multi-node ones that get plans (so
    some nodes dip later and fail the whole-time check)."""
    rng = random.Random(seed)
    h = SchedHarness(config).gpu_nodes(20, gpus=8).gpu_nodes(6, gpus=4, cpus=32, mem=256_000, prefix="small")
    for v in h.nodes:
        for _ in range(rng.randrange(3)):
            g, c, m = rng.choice((1, 2, 3)), rng.choice((8, 16, 24)), rng.choice((16_000, 32_000, 64_000))
            if len(v.free_gpu_ids) < g or v.free_cpus < c or v.free_mem < m:
                break
            b = job().gpus(g).cpus(c).mem(m)
            h.run_job(b.time(rng.choice(("20:00", "1:00:00", "3:00:00"))).nodelist(v.name), at=0)
    h.reserve(ReservationView("maint", 400.0, 4000.0, nodes=("gpu3", "gpu4", "small22"), users=("nobody",)))
    for i in range(80):
        r = rng.random()
        if r < 0.08:
            b = job().nodes(rng.choice((4, 6))).gpus(8).time("2:00:00")
        else:
            # CPUs and memory in steps of what running jobs hold: exact fits are common
            b = job().gpus(rng.choice((1, 1, 2, 4))).cpus(rng.choice((8, 16)))
            b = b.mem(rng.choice((16_000, 32_000))).time(rng.choice(("5:00", "30:00", "2:00:00")))
        h.submit(b, at=1 + i)
    return h


def _passes(h: SchedHarness) -> list[Decisions]:
    out = []
    for t in (100, 1300, 3700, 7300):
        for j in list(h.running.values()):  # the jobs due by then end
            if (j.start_time or 0) + (j.time_limit or 0) <= t:
                h.finish(j.job_id)
        out.append(h.schedule(at=t))
    return out


Summary = tuple[
    list[tuple[int, tuple[tuple[str, tuple[int, ...]], ...]]],
    list[tuple[int, float, tuple[str, ...]]],
    list[tuple[int, str]],
]


def _summary(ds: list[Decisions]) -> list[Summary]:
    return [
        (
            sorted((s.job_id, tuple((a.node, tuple(a.gpu_ids)) for a in s.alloc)) for s in d.starts),
            sorted((i, p.start_time, tuple(p.nodes)) for i, p in d.plans.items()),
            sorted((i, str(r)) for i, r in d.reasons.items()),
        )
        for d in ds
    ]


def _keyed(self: Backfill, req: object, duration: float) -> NodeProfile | None:
    """What start_now did before the index: key the best group's nodes, pick one."""
    fitting = self._fitting_by_gpus(req, duration)  # type: ignore[arg-type]
    return pick(fitting, 1, frozenset())[0] if fitting else None


@pytest.mark.parametrize("conservative", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_one_node_starts_are_those_of_the_keyed_best_group(
    seed: int, conservative: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = SchedConfig(conservative=conservative)
    fast = _summary(_passes(_scene(seed, config)))
    assert sum(len(starts) for starts, _plans, _reasons in fast) > 20  # the scene starts jobs
    assert any(plans for _starts, plans, _reasons in fast)  # and plans some
    monkeypatch.setattr(Backfill, "_best_one", _keyed)
    assert _summary(_passes(_scene(seed, config))) == fast


def test_the_fullest_node_that_fits_takes_a_one_gpu_job() -> None:
    # three nodes with one GPU free; the one with the fewest CPUs left that still fit wins
    h = SchedHarness().gpu_nodes(4, gpus=8)
    h.run_job(job().gpus(7).cpus(60).nodelist("gpu1"), at=0)  # 4 CPUs left: too few
    h.run_job(job().gpus(7).cpus(40).nodelist("gpu2"), at=0)  # 24 left
    h.run_job(job().gpus(7).cpus(50).nodelist("gpu3"), at=0)  # 14 left: best fit
    h.run_job(job().gpus(6).cpus(56).nodelist("gpu4"), at=0)  # 8 left, but 2 GPUs: worse
    one = h.submit(job().gpus(1).cpus(8).time("10:00"), at=1)
    two = h.submit(job().gpus(1).cpus(8).time("10:00"), at=2)
    three = h.submit(job().gpus(1).cpus(8).time("10:00"), at=3)
    four = h.submit(job().gpus(1).cpus(8).time("10:00"), at=4)
    d = h.schedule(at=10)
    nodes = {s.job_id: s.alloc[0].node for s in d.starts}
    # gpu3 then gpu2 (one GPU left each, fewest CPUs left first; gpu1 has too few), then
    # gpu4 (two GPUs left) with exactly the CPUs the job needs; then none has 8 CPUs left
    assert nodes == {one: "gpu3", two: "gpu2", three: "gpu4"}
    assert four not in nodes
