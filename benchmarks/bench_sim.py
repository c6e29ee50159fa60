"""How the cost of ``muster sim`` grows with the trace: microseconds per job, per policy,
on the first tenth of a trace and on all of it, and the ratio of the two.

    python benchmarks/bench_sim.py                      # the bundled KTH cut (5,000 jobs)
    python benchmarks/bench_sim.py KTH-SP2-1996-2.swf.gz    # any SWF trace you have: 2,848 and 28,481
    python benchmarks/bench_sim.py ITP.tar.gz --cluster cluster04 --nodes 64 --estimate actual
    python benchmarks/bench_sim.py TRACE --policies fcfs --profile   # where the time goes

A replay whose passes walk the whole queue costs more per job as the trace (and so the
queue) grows; one whose passes cost what they decide keeps its cost per job. The goal is
a ratio under 2 for every policy as the trace grows tenfold. ``conservative`` re-places
every waiting job in every pass, by definition: its cost per job follows the mean number
of waiting jobs (printed as "queue", the time-averaged count: total wait / makespan),
which is a property of the load, not of the trace's length.

The default trace is ``benchmarks/traces/kth-sp2-5000.swf.gz``: the first 5,000 records
of the KTH SP2 log (Parallel Workloads Archive; see the file's header), replayed on its
pool of 100 processors with the users' requested times as estimates. CPU seconds of
``Simulation.run`` are measured here (trace reading and metrics excluded; the simulator
itself never reads a clock). The machine may be shared: CPU seconds are the steadier
figure, and the ratio is the figure to read.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

from muster.sim.cluster import uniform_cluster
from muster.sim.engine import Estimate, Simulation, replayable
from muster.sim.metrics import compute
from muster.sim.policies import POLICIES, build_settings, job_order, sched_config
from muster.sim.traces import Trace, TraceJob, read_trace

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED = os.path.join(HERE, "traces", "kth-sp2-5000.swf.gz")


def replay(
    trace: Trace, jobs: list[TraceJob], policy: str, args: argparse.Namespace, profile: cProfile.Profile | None
) -> tuple[float, dict[str, float], int]:
    """CPU seconds of one replay, its metrics, and the passes it ran."""
    cluster = uniform_cluster(trace.unit, trace.header, args.nodes, args.cpus_per_node)
    est = Estimate.parse(args.estimate)
    kept, _ = replayable(jobs, trace.unit, cluster, est)
    settings = build_settings(policy, max_time_limit=max(est.limit(j) for j in kept))
    sim = Simulation(
        kept, trace.unit, cluster, sched_config(settings), estimate=est, label=policy, order=job_order(policy)
    )
    if profile is not None:
        profile.enable()
    cpu0 = time.process_time()
    result = sim.run()
    cpu = time.process_time() - cpu0
    if profile is not None:
        profile.disable()
    return cpu, compute(result.outcomes, cluster.capacity(trace.unit)), result.passes


def _queue(m: dict[str, float]) -> float:
    """Time-averaged number of waiting jobs: total wait over the makespan."""
    return m["wait_mean"] * m["jobs"] / m["makespan"] if m["makespan"] else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=BUNDLED, help="trace file (default: the bundled KTH cut of 5,000 jobs)")
    ap.add_argument("--cluster", help="which CSV of a tarball (GPU traces)")
    ap.add_argument("--nodes", type=int, help="nodes (required for GPU traces)")
    ap.add_argument("--cpus-per-node", type=int)
    ap.add_argument("--estimate", default="requested", help="requested, actual or KxActual")
    ap.add_argument(
        "--policies", default="fcfs,easy,sjf,conservative", help=f"comma-separated, from {', '.join(POLICIES)}"
    )
    ap.add_argument("--jobs", type=int, help="use only the first N jobs as the large size")
    ap.add_argument(
        "--profile", action="store_true", help="print the top functions of the large replay of each policy (cProfile)"
    )
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            print(f"bench_sim: unknown policy {p!r} (choose from {', '.join(POLICIES)})", file=sys.stderr)
            return 2
    if not os.path.exists(args.trace):
        print(f"bench_sim: no trace at {args.trace}", file=sys.stderr)
        return 1
    trace = read_trace(args.trace, None, args.cluster)
    large = trace.jobs[: args.jobs] if args.jobs else trace.jobs
    small = large[: max(1, len(large) // 10)]
    print(
        f"{os.path.basename(args.trace)}: the first {len(small):,} jobs, then {len(large):,}; "
        f"estimate {args.estimate}; CPU microseconds of Simulation.run per job"
    )
    print(
        f"{'policy':<13} {'small us/job':>13} {'large us/job':>13} {'ratio':>6}  "
        f"{'queue small/large':>17}  {'passes (large)':>15}  large: bsld, late vs first plan"
    )
    sys.stdout.flush()
    worst = 0.0
    for policy in policies:
        cpu_s, m_s, _ = replay(trace, small, policy, args, None)
        prof = cProfile.Profile() if args.profile else None
        cpu_l, m, passes = replay(trace, large, policy, args, prof)
        per_s, per_l = 1e6 * cpu_s / len(small), 1e6 * cpu_l / len(large)
        ratio = per_l / per_s if per_s > 0 else float("nan")
        worst = max(worst, ratio)
        queues = f"{_queue(m_s):,.1f} / {_queue(m):,.1f}"
        print(
            f"{policy:<13} {per_s:>13,.0f} {per_l:>13,.0f} {ratio:>6.2f}  {queues:>17}  {passes:>15,}  "
            f"{m['bounded_slowdown_mean']:.2f}, {m['late_vs_first_plan']:,}"
        )
        sys.stdout.flush()
        if prof is not None:
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    print(f"largest ratio: {worst:.2f} (goal: under 2 for a tenfold trace)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
