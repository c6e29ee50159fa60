"""How fast ``muster sim`` replays real traces: jobs simulated per second.

    python benchmarks/bench_sim.py             # KTH under EASY, then two ITP files on 512 GPUs
    python benchmarks/bench_sim.py --quick     # the first 5,000 jobs of each
    python benchmarks/bench_sim.py --profile   # and where the time goes (cProfile, top 15)

Traces come from ../shared/traces (see its README). KTH SP2 (28,481 jobs, 100 processors)
is replayed under EASY with the users' requested times as estimates, on the default
processor pool and on 100 single-CPU nodes (``--nodes 100 --cpus-per-node 1``). The
Microsoft ITP cluster04 file (15,802 jobs, offered load 0.97 at that size) and cluster07
(12,699 jobs, load 0.50) are replayed on 64 nodes x 8 GPUs = 512 GPUs under EASY with the
actual durations as estimates (the trace records no request).

Wall and CPU seconds are measured here, around ``Simulation.run`` (trace reading and
metrics excluded); the simulator itself never reads a clock. The machine is shared, so
CPU seconds are the steadier figure.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

from muster.sim.cluster import Cluster, uniform_cluster
from muster.sim.engine import Estimate, Simulation, replayable
from muster.sim.metrics import compute
from muster.sim.policies import build_settings, sched_config
from muster.sim.traces import Trace, read_trace

TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "traces")
KTH = os.path.join(TRACES, "KTH-SP2-1996-2.swf.gz")
ITP = os.path.join(TRACES, "microsoft-itp-2021-raw-traces.tar.gz")


def bench(name: str, trace: Trace, cluster: Cluster, estimate: str, limit: int | None,
          profile: bool, policy: str = "easy") -> None:
    est = Estimate.parse(estimate)
    jobs, refused = replayable(trace.jobs[:limit] if limit else trace.jobs, trace.unit, cluster, est)
    settings = build_settings(policy, max_time_limit=max(est.limit(j) for j in jobs))
    sim = Simulation(jobs, trace.unit, cluster, sched_config(settings), estimate=est, label=policy)
    prof = cProfile.Profile() if profile else None
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.enable()
    result = sim.run()
    if prof is not None:
        prof.disable()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    m = compute(result.outcomes, cluster.capacity(trace.unit))
    print(
        f"{name:<44} {len(jobs):>7,} jobs  {wall:7.1f} s wall  {cpu:7.1f} s CPU  "
        f"{len(jobs) / cpu:>8,.0f} jobs/s (CPU)  passes {result.passes:,} "
        f"(+{result.skipped_passes:,} skipped)"
    )
    print(
        f"{'':<44} wait mean {m['wait_mean']:,.0f} s, bsld {m['bounded_slowdown_mean']:.1f}, "
        f"utilisation {m['utilisation']:.3f}, backfilled {m['backfilled']:,}"
        + (f", {sum(refused.values())} refused" if refused else "")
    )
    sys.stdout.flush()
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the first 5,000 jobs of each trace")
    ap.add_argument("--profile", action="store_true", help="print the top functions of each run")
    ap.add_argument("--skip-nodes", action="store_true", help="skip KTH on 100 single-CPU nodes")
    args = ap.parse_args(argv)
    limit = 5000 if args.quick else None
    if not os.path.exists(KTH) or not os.path.exists(ITP):
        print(f"traces not found under {os.path.abspath(TRACES)}", file=sys.stderr)
        return 1
    kth = read_trace(KTH)
    bench("KTH SP2, EASY, requested, pool of 100 CPUs", kth, uniform_cluster("procs", kth.header),
          "requested", limit, args.profile)
    if not args.skip_nodes:
        bench("KTH SP2, EASY, requested, 100 nodes x 1 CPU", kth,
              uniform_cluster("procs", kth.header, 100, 1), "requested", limit, args.profile)
    for name in ("cluster04", "cluster07"):
        itp = read_trace(ITP, cluster=name)
        bench(f"ITP {name}, EASY, actual, 64 x 8 GPUs", itp, uniform_cluster("gpus", nodes=64),
              "actual", limit, args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
