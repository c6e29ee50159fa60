"""Failure-aware replay (``muster sim --failures``): the work model, the engine's requeues,
the checkpoint sweep, and the command line."""

from __future__ import annotations

import io
import math
import os

import pytest

from muster.sched import SchedConfig
from muster.sim.cluster import uniform_cluster
from muster.sim.engine import Simulation
from muster.sim.failures import Attempt, CheckpointSweep, FailureModel, JobWork, parse_causes, parse_rate
from muster.sim.main import build_parser, run
from muster.sim.policies import build_settings
from muster.sim.traces import TraceJob

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "kth-sp2-400.swf")


def test_rates_are_per_node_day_and_bad_ones_are_refused() -> None:
    assert parse_rate("4/1000") == pytest.approx(0.004)
    assert parse_rate("0.01") == 0.01
    for bad in ("0", "-1", "x", "1/0", "nan"):
        with pytest.raises(ValueError):
            parse_rate(bad)
    assert parse_causes("gpu=3,other=1") == {"gpu": 0.75, "other": 0.25}
    with pytest.raises(ValueError):
        parse_causes("gpu")


def test_an_attempt_pays_for_its_checkpoints_and_keeps_what_they_saved() -> None:
    a = Attempt(left=10_000, restart=300, interval=3600, cost=60)
    assert a.checkpoints == 2  # after 1 h and 2 h of work; none after the last piece
    assert a.wall == 300 + 10_000 + 2 * 60
    # cut 1 h 30 min of work after the first checkpoint: 3600 saved, 1800 lost
    saved, lost, ckpt, restart = a.cut(300 + 3600 + 60 + 1800)
    assert (saved, lost, ckpt, restart) == (3600, 1800, 60, 300)
    assert Attempt(left=100, restart=0, interval=0, cost=60).cut(40) == (0.0, 40.0, 0.0, 0.0)


def test_a_job_account_adds_up_over_its_attempts() -> None:
    model = FailureModel(rate=1.0, interval=100, cost=10, restart=5)
    job = JobWork(work=250, size=4)
    assert job.begin(model) == 250 + 2 * 10
    job.interrupt(150)  # 110 s into the second piece: 100 saved, 40 lost
    assert (job.saved, job.lost, job.checkpoint, job.restarts) == (100, 40, 10, 1)
    assert job.begin(model) == 5 + 150 + 1 * 10
    job.finish(165)
    assert job.saved == 250 and job.allocated == 315
    assert job.goodput == pytest.approx(250 / 315)
    assert job.lost + job.checkpoint + job.restart + job.saved == pytest.approx(job.allocated)


def _replay(model: FailureModel | None, nodes: int = 4) -> Simulation:
    jobs = [TraceJob(trace_id=str(i), submit=i * 600.0, run=20_000.0, size=2) for i in range(12)]
    cluster = uniform_cluster("procs", {}, nodes, 2, None)
    settings = build_settings("easy", max_time_limit=10**7)
    sim = Simulation(jobs, "procs", cluster, SchedConfig.from_settings(settings), failures=model, allow_overrun=True)
    return sim


def test_failed_nodes_requeue_their_jobs_which_all_complete_once() -> None:
    model = FailureModel(rate=2.0, repair=3600, interval=1800, cost=30, restart=120, seed=7)
    sim = _replay(model)
    result = sim.run()
    assert not result.never_started
    assert len(result.outcomes) == 12 and len({o.trace_id for o in result.outcomes}) == 12
    assert sim.node_failures is not None and sum(sim.node_failures.counts.values()) > 0
    assert sum(o.restarts for o in result.outcomes) > 0
    for o in result.outcomes:
        work = sim.work[o.job_id - 1]
        assert work.saved == pytest.approx(20_000.0)
        assert work.allocated >= work.saved
        assert work.restarts == o.restarts
    # the same seed gives the same replay
    again = _replay(model).run()
    assert [(o.start, o.end) for o in again.outcomes] == [(o.start, o.end) for o in result.outcomes]


def test_without_failures_the_replay_is_unchanged() -> None:
    plain = _replay(None).run()
    assert all(o.restarts == 0 for o in plain.outcomes)
    assert all(o.end - o.start == 20_000.0 for o in plain.outcomes)


def test_the_sweep_finds_an_interval_near_youngs() -> None:
    model = FailureModel(rate=0.1, cost=60, restart=0, seed=3)
    sweep = CheckpointSweep(model, nodes=16, work=7 * 86400, runs=60).sweep(points=9)
    young = math.sqrt(2 * (86400 / (0.1 * 16)) * 60)
    assert sweep["young_interval_s"] == pytest.approx(young)
    assert sweep["best_goodput"] >= sweep["young_goodput"] - 1e-9
    assert 0.3 * young <= sweep["best_interval_s"] <= 3 * young
    assert sweep["no_checkpoint_goodput"] < sweep["young_goodput"]


def test_the_command_reports_goodput_and_refuses_bad_values() -> None:
    argv = [
        FIXTURE,
        "--jobs",
        "200",
        "--nodes",
        "100",
        "--cpus-per-node",
        "1",
        "--failures",
        "50/1000",
        "--no-progress",
    ]
    out, err = io.StringIO(), io.StringIO()
    assert run(build_parser().parse_args(argv), out, err) == 0
    text = out.getvalue()
    assert "goodput" in text and "node failures" in text and "jobs / restarts / goodput" in text
    for bad in (["--failures", "x"], ["--checkpoint-sweep", "8"], ["--failures", "1", "--repair-time", "soon"]):
        with pytest.raises(Exception, match="failure|--checkpoint-sweep|--repair-time"):
            run(build_parser().parse_args([FIXTURE, "--jobs", "10", "--no-progress", *bad]), out, err)
