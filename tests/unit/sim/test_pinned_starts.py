"""The simulator's schedule of a real trace does not change by accident.

``tests/fixtures/kth-sp2-400.swf`` is 400 jobs cut from the KTH SP2 trace (a busy stretch:
the FCFS queue grows to hundreds of jobs); ``kth-sp2-400.starts.json`` holds every job's
start under fcfs, easy, sjf and backfill, written by ``benchmarks/sim_starts.py`` before
the simulator learned to look only at the head of a FCFS queue. A change that is meant to
move starts rewrites the file with that script, and says why in its commit.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from muster.sim.cluster import uniform_cluster
from muster.sim.engine import Estimate, Simulation, replayable
from muster.sim.metrics import compute
from muster.sim.policies import build_settings, job_order, sched_config
from muster.sim.traces import read_trace

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
TRACE = FIXTURES / "kth-sp2-400.swf"
PINNED = json.loads((FIXTURES / "kth-sp2-400.starts.json").read_text())


def _simulation(policy: str) -> Simulation:
    trace = read_trace(str(TRACE))
    cluster = uniform_cluster(trace.unit, trace.header)
    est = Estimate("requested")
    jobs, refused = replayable(trace.jobs, trace.unit, cluster, est)
    assert not refused
    settings = build_settings(policy, max_time_limit=max(est.limit(j) for j in jobs))
    return Simulation(jobs, trace.unit, cluster, sched_config(settings), estimate=est, order=job_order(policy))


def _starts(sim: Simulation) -> list[float]:
    result = sim.run()
    assert not result.never_started
    return [o.start for o in sorted(result.outcomes, key=lambda o: o.job_id)]


@pytest.mark.parametrize("policy", ["fcfs", "easy", "sjf", "backfill"])
def test_every_job_of_the_kth_cut_starts_when_it_did_before(policy: str) -> None:
    assert _starts(_simulation(policy)) == PINNED[policy]


def test_a_fcfs_pass_over_the_head_of_the_queue_starts_what_a_pass_over_all_of_it_does() -> None:
    head = _simulation("fcfs")
    whole = _simulation("fcfs")
    whole._strict_order = False  # every pass sees the whole queue
    assert _starts(head) == _starts(whole) == PINNED["fcfs"]
    assert head.passes == whole.passes
    assert head.head_retries > 0  # some passes started more than the first head held


def test_conservative_starts_no_job_of_the_kth_cut_after_its_first_planned_start() -> None:
    result = _simulation("conservative").run()
    m = compute(result.outcomes, 100)
    assert m["planned"] > 200 and m["late_vs_first_plan"] == m["late_vs_earliest_plan"] == 0
    # the default depth re-plans in priority order: some promises break on the same trace
    assert compute(_simulation("backfill").run().outcomes, 100)["late_vs_first_plan"] > 0
