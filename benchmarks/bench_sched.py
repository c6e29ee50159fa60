"""Time one scheduling pass (priority + placement + backfill) on synthetic GPU clusters.

    python benchmarks/bench_sched.py            # the 3 x 3 grid and a depth sweep
    python benchmarks/bench_sched.py --quick    # the small corners only

Clusters of nodes with 8 GPUs, 128 CPUs and 1 TB, about 90% of their GPUs busy with a
mix of running jobs (1, 2, 4 and 8 GPUs, and 2-16 node jobs of 8 GPUs) whose time limits
run out at spread-out times, and a queue with the same mix of shapes, a few partitions,
nice values and dependencies. The clock is read here, never inside ``muster.sched``.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time

from muster.core.job import Job, JobSpec, NodeAlloc, Shape
from muster.core.states import JobState
from muster.sched import SchedConfig, schedule
from muster.sched.snapshot import NodeView, PartitionView, Snapshot

GPUS, CPUS, MEM = 8, 128, 1_000_000
LIMITS = [1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 48 * 3600]
NOW = 1_000_000.0


def _shape(rng: random.Random) -> tuple[int, int]:
    """(nodes, gpus per node) from a mix typical of a training cluster."""
    r = rng.random()
    if r < 0.35:
        return 1, 1
    if r < 0.45:
        return 1, 2
    if r < 0.60:
        return 1, 4
    if r < 0.82:
        return 1, 8
    return rng.choice([2, 2, 4, 4, 8, 16]), 8


def build(n_nodes: int, n_pending: int, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    nodes = [
        NodeView(
            name=f"gpu{i + 1:05d}",
            index=i,
            cpus=CPUS,
            mem=MEM,
            gpus=GPUS,
            gpu_type="h100",
            features=("ib",) if i % 4 else ("ib", "nvlink"),
            free_cpus=CPUS,
            free_mem=MEM,
            free_gpu_ids=list(range(GPUS)),
        )
        for i in range(n_nodes)
    ]
    debug = tuple(n.name for n in nodes[: max(2, n_nodes // 20)])
    partitions = {
        "gpu": PartitionView("gpu", tuple(n.name for n in nodes), is_default=True),
        "debug": PartitionView("debug", debug, max_time=3600, priority_job_factor=2),
    }
    running: list[Job] = []
    target = int(0.9 * n_nodes * GPUS)
    used = 0
    job_id = 1
    cursor = 0
    attempts = 0
    while used < target and attempts < 20 * n_nodes:
        attempts += 1
        n, g = _shape(rng)
        cpus, mem = 8 * g, 60_000 * g
        chosen = []
        for k in range(n_nodes):
            v = nodes[(cursor + k) % n_nodes]
            if len(v.free_gpu_ids) >= g and v.free_cpus >= cpus:
                chosen.append(v)
                if len(chosen) == n:
                    break
        if len(chosen) < n:
            continue
        cursor = (chosen[-1].index + 1) % n_nodes
        limit = rng.choice(LIMITS)
        start = NOW - rng.uniform(0, limit * 0.95)
        alloc = []
        for v in chosen:
            ids, v.free_gpu_ids = v.free_gpu_ids[:g], v.free_gpu_ids[g:]
            v.free_cpus -= cpus
            v.free_mem -= mem
            v.running_jobs += 1
            alloc.append(NodeAlloc(v.name, cpus, mem, ids))
        running.append(
            _job(
                job_id,
                n,
                g,
                limit,
                start - 60,
                "gpu",
                JobState.RUNNING,
                start=start,
                alloc=alloc,
                user=f"u{rng.randrange(50)}",
            )
        )
        used += n * g
        job_id += 1
    pending = []
    for _ in range(n_pending):
        n, g = _shape(rng)
        part = "debug" if (n == 1 and rng.random() < 0.1) else "gpu"
        limit = rng.choice(LIMITS[:2]) if part == "debug" else rng.choice(LIMITS)
        j = _job(
            job_id,
            n,
            g,
            limit,
            NOW - rng.uniform(0, 3 * 86400),
            part,
            JobState.PENDING,
            user=f"u{rng.randrange(50)}",
        )
        j.spec.nice = rng.choice([0, 0, 0, 0, 100])
        if rng.random() < 0.05:
            j.spec.dependency = f"afterok:{rng.randrange(1, job_id)}"
        if rng.random() < 0.02:
            j.spec.constraint = "nvlink"
        pending.append(j)
        job_id += 1
    return Snapshot(
        nodes=nodes,
        partitions=partitions,
        pending=pending,
        running=running,
        fairshare={f"u{i}": rng.random() for i in range(50)},
    )


def _job(
    job_id: int,
    n: int,
    g: int,
    limit: int,
    submit: float,
    part: str,
    state: JobState,
    start: float | None = None,
    alloc: list[NodeAlloc] | None = None,
    user: str = "u0",
) -> Job:
    spec = JobSpec(partitions=[part], min_nodes=n, gpus_per_node=g, time_limit=limit, gpu_type="h100")
    shape = Shape(nodes=n, cpus_per_node=8 * g, mem_per_node=60_000 * g, gpus_per_node=g, gpu_type="h100")
    return Job(
        job_id=job_id,
        spec=spec,
        shape=shape,
        user=user,
        uid=1000,
        group=user,
        gid=1000,
        submit_time=submit,
        partition=part,
        time_limit=limit,
        state=state,
        start_time=start,
        alloc=alloc or [],
    )


def timed(snap: Snapshot, config: SchedConfig, repeat: int) -> tuple[float, float, dict[str, float], str]:
    """Median wall and CPU seconds of ``repeat`` passes (CPU time is what the pass costs
    on a busy machine), the last pass's phase times and a summary of what it did."""
    walls, cpus = [], []
    phases: dict[str, float] = {}
    summary = ""
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        d = schedule(snap, NOW, config, timer=time.process_time)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        phases = d.stats.phase_seconds
        s = d.stats
        summary = f"examined={s.examined} started={s.started} (backfilled {s.backfilled}) planned={s.planned}"
    return statistics.median(walls), statistics.median(cpus), phases, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--freeze",
        action="store_true",
        help="gc.freeze() the snapshot first, as a controller holding a large queue may do",
    )
    args = ap.parse_args(argv)
    grid = (
        [(100, 1000), (1000, 10_000)]
        if args.quick
        else [(n, p) for p in (1000, 10_000, 100_000) for n in (100, 1000, 4000)]
    )
    config = SchedConfig(priority_type="priority/multifactor")  # the fair-share pass a site runs
    print(f"one pass, default config (bf_max_job_test={config.bf_max_job_test}), median of {args.repeat}")
    print(f"{'nodes':>6} {'pending':>8} {'running':>8} {'wall s':>7} {'cpu s':>7}  phases (cpu)")
    for nodes, pending in grid:
        snap = build(nodes, pending)
        if args.freeze:
            gc.collect()
            gc.freeze()
        wall, cpu, phases, summary = timed(snap, config, args.repeat)
        ph = " ".join(f"{k.split('.')[1]}={v * 1000:.0f}ms" for k, v in phases.items())
        print(f"{nodes:>6} {pending:>8} {len(snap.running):>8} {wall:7.3f} {cpu:7.3f}  {ph}  [{summary}]")
        sys.stdout.flush()
    print("\ndepth sweep on 1,000 nodes, 10,000 pending (cost per examined depth)")
    snap = build(1000, 10_000)
    for depth in (100, 500, 1000, 2000, 5000, 10_000):
        wall, cpu, _, summary = timed(
            snap, SchedConfig(priority_type="priority/multifactor", bf_max_job_test=depth), args.repeat
        )
        print(f"  bf_max_job_test={depth:>6}: wall {wall:6.3f} s, cpu {cpu:6.3f} s  [{summary}]")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
