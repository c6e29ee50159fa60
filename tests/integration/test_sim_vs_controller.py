"""The simulator and the controller make the same schedule from the same trace.

One small trace is replayed twice on a manual clock: through the controller's own code
(``Controller`` with a SQLite ``Store``, ``ctld.view.build_snapshot``, ``sched.schedule``,
``Controller.apply_starts`` and ``Controller.job_done``, the way ``CtldApp.run_pass`` and the
agents drive them), and through ``muster.sim``. Start times, end times and final states
must be identical, job by job. The controller side runs a pass at every event time; the
simulator skips passes that cannot start anything, so this also checks that shortcut.
"""

from __future__ import annotations

import heapq
import pathlib
import random

import pytest

from muster.core.clock import ManualClock
from muster.core.config import Config, parse_config
from muster.core.job import JobSpec
from muster.ctld.controller import Controller, Identity
from muster.ctld.loop import run_pass
from muster.ctld.store import Store
from muster.sched import SchedConfig
from muster.sim.cluster import cluster_from_config, spec_for
from muster.sim.engine import Estimate, Simulation
from muster.sim.policies import build_settings, job_order, sjf_priority
from muster.sim.traces import Trace, TraceJob, read_trace

pytestmark = pytest.mark.integration

EPOCH = 1_700_000_000.0
ROOT = Identity(0, 0, "root", "root", "h", admin=True)
NODES = "DefMemPerCPU=100\nNodeName=n[1-4] CPUs=4 RealMemory=1000\nPartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"


def _trace_file(path: pathlib.Path, seed: int = 5, n: int = 60) -> str:
    """A busy little SWF trace for 16 processors: bursts of arrivals, mixed sizes, some jobs
    running past their requested time (they are killed at it)."""
    rng = random.Random(seed)
    lines = ["; MaxProcs: 16", "; MaxNodes: 4"]
    t = 0
    for i in range(1, n + 1):
        t += rng.choice([0, 0, 1, 5, 20, 60, 200])
        run = rng.randint(5, 600)
        req = run if rng.random() < 0.2 else int(run * rng.uniform(0.7, 3.0)) + 1
        procs = rng.choice([1, 1, 2, 3, 4, 4, 6, 8, 12, 16])
        lines.append(f"{i} {t} -1 {run} {procs} -1 -1 {procs} {req} -1 1 {1 + i % 3} 1 -1 -1 -1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _config(policy: str) -> Config:
    settings = build_settings(policy, max_time_limit=3600)
    text = "ClusterName=simcheck\n" + "".join(f"{k}={v}\n" for k, v in settings.items()) + NODES
    return parse_config(text, f"{policy}.conf")


def _through_the_controller(
    conf: Config, jobs: list[TraceJob], db: str, order: str = "fifo"
) -> dict[int, tuple[float, float, str]]:
    clock = ManualClock(EPOCH)
    ctl = Controller(conf, Store(db), clock)
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 0, "running": []})
    sched_config = SchedConfig.from_settings(dict(conf.settings))
    estimate = Estimate("requested")
    cluster = cluster_from_config(conf)
    heap: list[tuple[float, int, str, int]] = []
    seq = 0
    for i, j in enumerate(jobs):
        heapq.heappush(heap, (EPOCH + j.submit, seq, "arrive", i))
        seq += 1
    ids: dict[int, int] = {}  # trace index -> job id
    killed: set[int] = set()
    while heap:
        now = heap[0][0]
        clock.set(now)
        while heap and heap[0][0] == now:
            _, _, kind, i = heapq.heappop(heap)
            if kind == "arrive":
                spec = spec_for(jobs[i].size, "procs", cluster)
                spec.time_limit = estimate.limit(jobs[i])
                who = Identity(1000, 1000, f"u{jobs[i].user}", "g1", "h", admin=False)
                job = ctl.queue.submit(JobSpec.from_dict(spec.to_dict()), who)
                ids[i] = job.job_id
                if order == "sjf":  # an admin sets the priority, as `scontrol update` does
                    ctl.queue.update(job, ROOT, {"priority": sjf_priority(job.time_limit)})
            else:
                job = ctl.jobs[ids[i]]
                report = {"job_id": job.job_id, "restart_count": 0, "exit_code": 0, "signal": 0, "node": job.batch_host}
                if job.job_id in killed:
                    report |= {"terminated_by": "timeout", "signal": 9}
                ctl.launches.job_done(report)
        # The controller's own pass (``ctld.loop``), minus handing launches to dispatch.
        result = run_pass(ctl, sched_config, now)
        for s in result.decisions.starts:
            if ctl.jobs[s.job_id].start_time != now:
                continue  # not admitted this pass
            ctl.launches.launch_done(s.job_id)
            i = s.job_id - 1
            assert ids[i] == s.job_id
            limit = ctl.jobs[s.job_id].time_limit
            run = jobs[i].run
            if limit is not None and run > limit:
                killed.add(s.job_id)
                run = limit
            heapq.heappush(heap, (now + run, seq, "end", i))
            seq += 1
    return {
        job.job_id: (job.start_time - EPOCH, job.end_time - EPOCH, str(job.state))  # type: ignore[operator]
        for job in ctl.jobs.values()
    }


def _through_the_simulator(conf: Config, trace: Trace, order: str = "fifo") -> dict[int, tuple[float, float, str]]:
    sim = Simulation(
        trace.jobs,
        trace.unit,
        cluster_from_config(conf),
        SchedConfig.from_settings(dict(conf.settings)),
        epoch=EPOCH,
        order=order,
    )
    result = sim.run()
    assert not result.never_started
    states = {j.job_id: str(j.state) for j in sim.jobs}
    return {o.job_id: (o.start, o.end, states[o.job_id]) for o in result.outcomes}


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative", "sjf"])
def test_the_simulator_and_the_controller_start_every_job_at_the_same_time(tmp_path: pathlib.Path, policy: str) -> None:
    trace = read_trace(_trace_file(tmp_path / "small.swf"))
    conf = _config(policy)
    order = job_order(policy)
    controller = _through_the_controller(conf, trace.jobs, str(tmp_path / "muster.db"), order)
    simulated = _through_the_simulator(conf, trace, order)
    assert len(controller) == len(simulated) == len(trace.jobs) == 60
    assert simulated == controller
    # The trace is busy enough for the comparison to mean something.
    waits = [simulated[i + 1][0] - j.submit for i, j in enumerate(trace.jobs)]
    assert sum(w > 0 for w in waits) >= 20
    assert any(state == "TIMEOUT" for _, _, state in simulated.values())
