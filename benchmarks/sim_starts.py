"""Every job's start time under each policy: a record to compare a change of the simulator
or the scheduler against.

    python benchmarks/sim_starts.py TRACE --policies fcfs,easy,sjf --out before.json
    ... change the code ...
    python benchmarks/sim_starts.py TRACE --policies fcfs,easy,sjf --compare before.json

The JSON maps each policy to the list of its jobs' starts (seconds from the trace's zero),
in job id order: ids number the replayed jobs in submission order, as the controller would. ``--compare``
replays again and lists the jobs whose start differs; it exits 1 when any does.
``tests/fixtures/kth-sp2-400.starts.json`` was written this way, from
``tests/fixtures/kth-sp2-400.swf``, and ``tests/unit/sim/test_pinned_starts.py`` checks it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from muster.sim.cluster import uniform_cluster
from muster.sim.engine import Estimate, Simulation, replayable
from muster.sim.policies import build_settings, job_order, sched_config
from muster.sim.traces import read_trace


def starts(
    path: str,
    policy: str,
    *,
    cluster: str | None = None,
    nodes: int | None = None,
    estimate: str = "requested",
    jobs: int | None = None,
) -> tuple[list[float], float]:
    """Every job's start in job id order (None: never started), and the CPU seconds."""
    trace = read_trace(path, None, cluster)
    machine = uniform_cluster(trace.unit, trace.header, nodes)
    est = Estimate.parse(estimate)
    kept, _ = replayable(trace.jobs[:jobs] if jobs else trace.jobs, trace.unit, machine, est)
    settings = build_settings(policy, max_time_limit=max(est.limit(j) for j in kept))
    sim = Simulation(
        kept, trace.unit, machine, sched_config(settings), estimate=est, label=policy, order=job_order(policy)
    )
    cpu0 = time.process_time()
    result = sim.run()
    cpu = time.process_time() - cpu0
    out: list[float | None] = [None] * len(kept)
    for o in result.outcomes:
        out[o.job_id - 1] = int(o.start) if o.start == int(o.start) else o.start
    return out, cpu  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--policies", default="fcfs,easy,sjf")
    ap.add_argument("--cluster", help="which CSV of a tarball (GPU traces)")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--estimate", default="requested")
    ap.add_argument("--jobs", type=int, help="the first K jobs only")
    out = ap.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="write the starts as JSON")
    out.add_argument("--compare", help="compare with starts written before")
    args = ap.parse_args(argv)
    record: dict[str, list[float]] = {}
    for policy in [p.strip() for p in args.policies.split(",") if p.strip()]:
        record[policy], cpu = starts(
            args.trace, policy, cluster=args.cluster, nodes=args.nodes, estimate=args.estimate, jobs=args.jobs
        )
        n = len(record[policy])
        print(f"{policy:<13} {n:>7,} jobs  {cpu:6.1f} s CPU  {1e6 * cpu / max(1, n):6.0f} us/job", file=sys.stderr)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:  # one line per policy
            f.write("{\n" + ",\n".join(f"{json.dumps(p)}: {json.dumps(v)}" for p, v in record.items()) + "\n}\n")
        return 0
    with open(args.compare, encoding="utf-8") as f:
        before = json.load(f)
    differ = 0
    for policy, now in record.items():
        old = before.get(policy)
        if old is None:
            print(f"{policy}: not in {args.compare}")
            differ += 1
            continue
        if len(old) != len(now):
            print(f"{policy}: {len(now)} jobs, {len(old)} before")
            differ += 1
            continue
        moved = [i for i, (a, b) in enumerate(zip(old, now, strict=True)) if a != b]
        differ += len(moved)
        print(
            f"{policy}: {len(moved)} of {len(now)} starts differ"
            + (f" (first: job {moved[0] + 1}: {old[moved[0]]} -> {now[moved[0]]})" if moved else "")
        )
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
