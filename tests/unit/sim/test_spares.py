"""``muster sim --failures ... --spares N``: failed nodes under running jobs replaced in place
by spares held out of scheduling; the pool refilled by repaired nodes."""

from __future__ import annotations

import io
import json
import os

import pytest

from muster.sched import SchedConfig
from muster.sim.cluster import uniform_cluster
from muster.sim.engine import Simulation
from muster.sim.failures import FailureModel
from muster.sim.main import build_parser, run
from muster.sim.policies import build_settings
from muster.sim.traces import TraceJob

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "kth-sp2-400.swf")


def _replay(spares: int, nodes: int = 6, seed: int = 7) -> Simulation:
    jobs = [TraceJob(trace_id=str(i), submit=i * 600.0, run=20_000.0, size=2) for i in range(12)]
    cluster = uniform_cluster("procs", {}, nodes, 2, None)
    settings = build_settings("easy", max_time_limit=10**7)
    model = FailureModel(rate=2.0, repair=3600, interval=1800, cost=30, restart=120, seed=seed, spares=spares)
    return Simulation(jobs, "procs", cluster, SchedConfig.from_settings(settings), failures=model, allow_overrun=True)


def test_spares_replace_failed_nodes_in_place_and_every_job_completes_once() -> None:
    sim = _replay(spares=2)
    result = sim.run()
    assert not result.never_started and len(result.outcomes) == 12
    assert sim.replacements > 0
    for o in result.outcomes:
        work = sim.work[o.job_id - 1]
        assert work.saved == pytest.approx(20_000.0)
        assert work.lost + work.checkpoint + work.restart + work.saved == pytest.approx(work.allocated)
    # a replacement is not a requeue: fewer restarts through the queue than interruptions
    assert sum(o.restarts for o in result.outcomes) < sum(sim.work[o.job_id - 1].restarts for o in result.outcomes)
    assert sim.recoveries.count(0.0) == sim.replacements
    # the spares never ran a job before a failure called them, and the machine is idle at the end
    assert all(v.running_jobs == 0 for v in sim.cluster.nodes)
    again = _replay(spares=2).run()
    assert [(o.start, o.end) for o in again.outcomes] == [(o.start, o.end) for o in result.outcomes]


def test_spares_are_held_out_of_scheduling() -> None:
    sim = _replay(spares=2, nodes=6)
    result = sim.run()
    first_nodes = {n for o in result.outcomes if o.restarts == 0 and o.start < 600 for n in o.nodes}
    assert first_nodes and first_nodes <= {"n1", "n2", "n3", "n4"}  # n5 and n6 stand by


def test_a_pool_as_large_as_the_machine_is_refused() -> None:
    with pytest.raises(ValueError, match="spares leave no node"):
        _replay(spares=6, nodes=6)


def _cli(*extra: str) -> dict[str, object]:
    argv = [FIXTURE, "--jobs", "200", "--nodes", "100", "--cpus-per-node", "1", "--failures", "50/1000"]
    out, err = io.StringIO(), io.StringIO()
    assert run(build_parser().parse_args([*argv, "--no-progress", "--json", "-", *extra]), out, err) == 0
    doc: dict[str, object] = json.loads(out.getvalue())
    return doc


def test_the_command_adds_the_pool_figures_only_when_asked() -> None:
    plain = _cli()
    goodput = plain["runs"][0]["goodput"]  # type: ignore[index]
    assert "replacements" not in goodput and "spares" not in plain["failures"]  # type: ignore[operator]
    pooled = _cli("--spares", "4")
    g = pooled["runs"][0]["goodput"]  # type: ignore[index]
    assert g["replacements"] > 0 and g["ettr"] <= g["goodput"]
    assert pooled["failures"]["spares"] == 4  # type: ignore[index]
    zero = _cli("--spares", "0")["runs"][0]["goodput"]  # type: ignore[index]
    assert zero["replacements"] == 0 and zero["goodput"] == goodput["goodput"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--spares", "-1", "--failures", "1"], "--spares: must be at least 0"), (["--spares", "2"], "needs --failures")],
)
def test_bad_spares_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        run(build_parser().parse_args([FIXTURE, "--jobs", "10", "--no-progress", *argv]), io.StringIO(), io.StringIO())
