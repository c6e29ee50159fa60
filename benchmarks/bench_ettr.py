"""ETTR of a frontier-scale training run under the Llama 3 failure mix, and the size of the
spare pool, on the model of ``muster sim ettr`` and on a real trace (``muster sim --spares``).

    python benchmarks/bench_ettr.py                        # the bundled KTH cut for the trace part
    python benchmarks/bench_ettr.py --trace ITP.tar.gz --cluster cluster04 --nodes 64 --estimate actual

Parts (every figure is printed; docs/sim.md "ETTR" quotes them):

1. The run: 2,048 nodes x 8 GPUs, 54 days, the Llama 3 paper's 419 unexpected interruptions
   (Table 5's counts by cause), 32 spares, checkpoints at Young's interval with a 2 s stall;
   ETTR, share recovered automatically and median failure -> training again for muster
   (replace + spares), muster (requeue only) and Slurm's default timings. Over seeds 1..10
   too (mean and worst), since one seed is one draw of the failure times.
2. What the figure depends on: restart cost, hang detection, checkpoint interval, repair time.
3. Pool sizing on the model: ETTR and automatic recoveries with 0..64 spares.
4. Pool sizing on a real trace: the trace replayed through the production scheduler with
   node failures at the Llama 3 rate (419 / (54 x 2,048) per node-day unless ``--rate``),
   on ``--nodes`` nodes plus 0, 2, 4, 8 spares (the spares are extra nodes, so every size
   schedules on the same machine): goodput, ETTR with the queue waits after failures
   counted, replacements and mean wait.

Nothing here is timed: the figures are the model's (seeded, deterministic).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace

from muster.sim.cluster import uniform_cluster
from muster.sim.engine import Estimate, Simulation, replayable
from muster.sim.ettr import LLAMA3_DAYS, LLAMA3_MIX, LLAMA3_NODES, Run, default_profiles, simulate
from muster.sim.failures import FailureModel, goodput_metrics, spares_metrics
from muster.sim.metrics import compute, size_class
from muster.sim.policies import build_settings, job_order, sched_config
from muster.sim.traces import read_trace

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED = os.path.join(HERE, "traces", "kth-sp2-5000.swf.gz")
LLAMA3_RATE = sum(c.count for c in LLAMA3_MIX) / (LLAMA3_DAYS * LLAMA3_NODES)  # per node-day


def pct(x: float) -> str:
    return f"{100 * x:6.2f}%"


def part1(spares: int) -> None:
    run = Run(spares=spares)
    print(
        f"1. {run.nodes:,} nodes x {run.gpus_per_node} GPUs, {run.days:g} days, {run.total()} interruptions "
        f"(MTBF {run.mtbf() / 3600:.2f} h), {spares} spares, checkpoint every "
        f"{run.checkpoint_interval() / 60:.1f} min (2 s stall), repair 24 h"
    )
    print(f"   {'profile':<24} {'ETTR':>8} {'automatic':>10} {'median down':>12}   seeds 1..10: mean / worst ETTR")
    for p in default_profiles():
        r = simulate(run, p)
        many = [simulate(replace(run, seed=s), p).ettr for s in range(1, 11)]
        print(
            f"   {p.name:<24} {pct(r.ettr)} {pct(r.automatic_share):>10} {r.median_down:>10.0f} s   "
            f"{pct(statistics.fmean(many))} / {pct(min(many))}"
        )


def part2(spares: int) -> None:
    print("\n2. muster replace+spares, one knob at a time (others at their defaults)")
    run = Run(spares=spares)
    cases: list[tuple[str, Run, dict[str, float]]] = [
        ("defaults", run, {}),
        ("replace restart 120 s", run, {"replace_restart": 120.0}),
        ("replace restart 300 s", run, {"replace_restart": 300.0}),
        ("hang detection 60 s", run, {"hang_detection": 60.0}),
        ("hang detection 600 s", run, {"hang_detection": 600.0}),
        ("checkpoint every 10 min", replace(run, interval=600.0), {}),
        ("checkpoint every 30 min", replace(run, interval=1800.0), {}),
        ("checkpoint stall 10 s (Young)", replace(run, cost=10.0), {}),
        ("repair 3 days", replace(run, repair=3 * 86400.0), {}),
        ("twice the failures", replace(run, scale=2.0), {}),
    ]
    for name, r, kw in cases:
        p = default_profiles(**kw)[0]
        got = simulate(r, p)
        print(
            f"   {name:<32} ETTR {pct(got.ettr)}  median down {got.median_down:5.0f} s  automatic {pct(got.automatic_share)}"
        )


def part3() -> None:
    print("\n3. pool sizing on the model (ETTR / automatic)")
    profiles = default_profiles()[:2]
    print(f"   {'spares':>6}  " + "  ".join(f"{p.name:>30}" for p in profiles))
    for n in (0, 4, 8, 12, 16, 24, 32, 48, 64):
        cells = []
        for p in profiles:
            r = simulate(Run(spares=n), p)
            cells.append(f"{pct(r.ettr)} / {pct(r.automatic_share)}".rjust(30))
        print(f"   {n:>6}  " + "  ".join(cells))


def part4(args: argparse.Namespace) -> None:
    trace = read_trace(args.trace, None, args.cluster)
    jobs = trace.jobs[: args.jobs] if args.jobs else trace.jobs
    rate = args.rate or LLAMA3_RATE
    est = Estimate.parse(args.estimate)
    print(
        f"\n4. pool sizing on {os.path.basename(args.trace)}{' ' + args.cluster if args.cluster else ''}: "
        f"{len(jobs):,} jobs, {args.nodes} nodes + spares, {rate * 1000:.2f} failures per 1,000 node-days, "
        f"repair {args.repair / 3600:g} h, checkpoints 1 h / 60 s, restart 5 min, EASY"
    )
    print(
        f"   {'spares':>6} {'failures':>9} {'replaced':>9} {'requeues':>9} {'goodput':>8} "
        f"{'ETTR (waits counted)':>21} {'mean wait (s)':>14}"
    )
    for n in args.spares:
        cluster = uniform_cluster(trace.unit, trace.header, args.nodes + n, args.cpus_per_node, args.gpus_per_node)
        kept, _ = replayable(jobs, trace.unit, cluster, est)
        model = FailureModel(rate=rate, repair=args.repair, spares=n, seed=args.seed)
        settings = build_settings("easy", max_time_limit=max(est.limit(j) for j in kept))
        sim = Simulation(
            kept, trace.unit, cluster, sched_config(settings), estimate=est, order=job_order("easy"), failures=model
        )
        result = sim.run()
        finished = [sim.work[o.job_id - 1] for o in result.outcomes]
        assert sim.node_failures is not None
        g = goodput_metrics(finished, sim.node_failures.counts, size_class)
        g.update(spares_metrics(finished, sim.replacements, sim.recoveries))
        m = compute(result.outcomes, cluster.capacity(trace.unit))
        requeues = sum(o.restarts for o in result.outcomes)
        print(
            f"   {n:>6} {g['node_failures']:>9,} {g['replacements']:>9,} {requeues:>9,} {pct(g['goodput']):>8} "
            f"{pct(g['ettr']):>21} {m['wait_mean']:>14,.0f}"
        )
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-spares", type=int, default=32, help="spares of parts 1 and 2 (32)")
    ap.add_argument("--trace", default=BUNDLED, help="trace of part 4 (default: the bundled KTH cut)")
    ap.add_argument("--cluster", help="which CSV of a tarball (GPU traces)")
    ap.add_argument("--nodes", type=int, default=100, help="nodes of part 4 before spares (100)")
    ap.add_argument("--cpus-per-node", type=int, default=None)
    ap.add_argument("--gpus-per-node", type=int, default=None)
    ap.add_argument("--estimate", default="requested")
    ap.add_argument("--jobs", type=int, help="only the first N jobs of the trace")
    ap.add_argument("--rate", type=float, help="failures per node-day (default: the Llama 3 run's)")
    ap.add_argument("--repair", type=float, default=86400.0, help="repair time in seconds (1 day)")
    ap.add_argument("--spares", type=lambda t: [int(x) for x in t.split(",")], default=[0, 2, 4, 8])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip-trace", action="store_true", help="parts 1-3 only")
    args = ap.parse_args(argv)
    if args.cpus_per_node is None and args.trace == BUNDLED:
        args.cpus_per_node = 1
    part1(args.model_spares)
    part2(args.model_spares)
    part3()
    if not args.skip_trace:
        if not os.path.exists(args.trace):
            print(f"bench_ettr: no trace at {args.trace}", file=sys.stderr)
            return 1
        part4(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
