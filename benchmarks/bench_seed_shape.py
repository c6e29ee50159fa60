"""Issue 40's seed shape: a mixed AI queue drained by the controller, at three sizes.

The controller runs in-process (no sockets, no agents: their cost is measured by
``bench_scale.py``) on a manual clock, with its store on tmpfs, so what is measured is the
controller's own work per start and per end: scheduling passes, starts committed, ends
applied (in groups, as ``ctld.commits`` commits an agent's reports), submissions.

The queue, per size (nodes of 8 GPUs, one partition):

* arrays of 1,000 one-GPU evaluation tasks (about 70% of the jobs), 1-10 min each;
* single-node 8-GPU fine-tunes, each ``sbatch`` alone (about 30%), 10-60 min each, one in
  five ``--dependency=afterok`` on the fine-tune before it;
* a few training runs of 256-1,024 nodes (a quarter of the cluster at most), 1-2 h, one of
  them in a reservation of its size made by an administrator first, and one evaluation
  array ``afterok`` on each run.

Then the drain: the clock jumps to the next end, the ends due are applied, one more
evaluation job is submitted (timed: submit latency while the queue drains), and a pass
runs (timed: the cycle), until the queue is empty or ``--drain`` wall seconds are spent.
It prints, per size: the submit rate and latency (p50/p99) while the queue fills, the
controller's memory per 10,000 jobs (RSS growth while it fills), the first pass (starts
and seconds), then, over the drain after it: starts per wall second, cycle p50/p99/max,
end handling per job and submit latency p99; and a growth table across the sizes.

Each size runs in a process of its own (its RSS is its own). ``--profile FILE`` writes a
cProfile of the largest size's drain (``python -m pstats FILE``) and prints its top
functions.

    nice -n 10 python benchmarks/bench_seed_shape.py [--sizes 1024:10000,2048:50000,4096:100000]
                                                    [--drain 60] [--profile drain.prof]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ARRAY = 1000  # tasks per evaluation array
MB = 1024 * 1024


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def one(
    nodes: int,
    jobs: int,
    drain_s: float,
    speed: float,
    profile: str | None,
    seed: int = 40,
    step: float = 0.0,
    max_cycles: int = 0,
) -> dict[str, Any]:
    """Fill and drain one size; the figures as a dict."""
    import gc

    from muster.core.clock import ManualClock
    from muster.core.config import parse_config
    from muster.core.job import JobSpec
    from muster.core.states import JobState
    from muster.ctld.controller import Controller, Identity
    from muster.ctld.loop import run_pass
    from muster.ctld.store import Store
    from muster.sched.config import SchedConfig

    rng = random.Random(seed)
    conf = (
        # multifactor, as ``muster up`` writes it (an absent PriorityType is basic, as in Slurm)
        "ClusterName=b\nSlurmdTimeout=100000\nPriorityType=priority/multifactor\n"
        f"MaxArraySize={ARRAY + 1}\nMaxJobCount={2 * jobs + 10000}\n"
        f"NodeName=n[1-{nodes}] CPUs=64 RealMemory=512000 Gres=gpu:8\n"
        "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    )
    tmp = tempfile.mkdtemp(prefix="bench-seed-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    out: dict[str, Any] = {"nodes": nodes, "jobs": jobs}
    try:
        clock = ManualClock(1_000_000.0)
        ctl = Controller(parse_config(conf, "b.conf"), Store(os.path.join(tmp, "m.db")), clock)
        ctl.load()
        for name in ctl.nodes:
            ctl.agents.register({"node": name, "gpus": 8, "running": []})
        user = Identity(1001, 1001, "alice", "alice", "h", admin=False)
        admin = Identity(0, 0, "root", "root", "h", admin=True)
        config = SchedConfig.from_settings(dict(ctl.config.settings))
        runtime: dict[int, float] = {}  # job id -> how long it runs (virtual seconds)

        def submit(spec: JobSpec, run: tuple[float, float]) -> tuple[int, int, float]:
            t0 = time.perf_counter()
            job = ctl.queue.submit(spec, user)
            dt = time.perf_counter() - t0
            first, last = job.job_id, ctl.next_job_id
            for i in range(first, last):
                runtime[i] = rng.uniform(*run)
            return first, last - first, dt

        def eval_spec(dep: str | None = None, tasks: int = ARRAY) -> JobSpec:
            return JobSpec(
                script="#!/bin/sh\ntrue\n",
                workdir="/tmp",
                gpus_per_node=1,
                cpus_per_task=4,
                mem_per_node=32000,
                time_limit=15,
                array=f"0-{tasks - 1}" if tasks > 1 else None,
                dependency=dep,
                name="eval",
            )

        gc.collect()
        rss0 = rss_mb()
        lat: list[float] = []
        t_fill = time.perf_counter()
        # the training runs first (a few, 256..1,024 nodes, at most a quarter of the cluster)
        runs = max(2, jobs // 25000)
        sizes = [min(nodes // 4, rng.choice((256, 512, 1024))) for _ in range(runs)]
        resv = ctl.resv.create(
            admin,
            {
                "name": "train",
                "start_time": clock.now(),
                "duration": 4 * 3600,
                "users": ["alice"],
                "node_cnt": sizes[0],
            },
        )
        out["reservation_nodes"] = len(resv.nodes)
        training = []
        for i, size in enumerate(sizes):
            spec = JobSpec(
                script="#!/bin/sh\ntrue\n",
                workdir="/tmp",
                min_nodes=size,
                max_nodes=size,
                gpus_per_node=8,
                exclusive=True,
                time_limit=180,
                reservation="train" if i == 0 else None,
                name="train",
            )
            first, _n, dt = submit(spec, (3600, 7200))
            lat.append(dt)
            training.append(first)
        left = jobs - runs
        fine = int(left * 0.3)
        arrays = (left - fine) // ARRAY
        fine = left - arrays * ARRAY
        # interleave: an evaluation array after every ~fine/arrays fine-tunes
        every = max(1, fine // max(1, arrays))
        prev_fine: int | None = None
        made_arrays = 0
        for i in range(fine):
            dep = f"afterok:{prev_fine}" if prev_fine is not None and rng.random() < 0.2 else None
            spec = JobSpec(
                script="#!/bin/sh\ntrue\n",
                workdir="/tmp",
                gpus_per_node=8,
                cpus_per_task=64,
                mem_per_node=400000,
                time_limit=90,
                dependency=dep,
                name="finetune",
            )
            prev_fine, _n, dt = submit(spec, (600, 3600))
            lat.append(dt)
            if i % every == every - 1 and made_arrays < arrays:
                dep = f"afterok:{training[made_arrays]}" if made_arrays < len(training) else None
                _f, _n, dt = submit(eval_spec(dep), (60, 600))
                lat.append(dt)
                made_arrays += 1
        while made_arrays < arrays:
            _f, _n, dt = submit(eval_spec(), (60, 600))
            lat.append(dt)
            made_arrays += 1
        fill_s = time.perf_counter() - t_fill
        gc.collect()
        out["queued"] = len(ctl.jobs)
        out["fill_s"] = fill_s
        out["fill_jobs_per_s"] = len(ctl.jobs) / fill_s
        out["fill_submit_p50_ms"] = pct(lat, 50) * 1000
        out["fill_submit_p99_ms"] = pct(lat, 99) * 1000
        out["rss_mb"] = rss_mb()
        out["mb_per_10k"] = (rss_mb() - rss0) / len(ctl.jobs) * 10000

        ends: list[tuple[float, int]] = []  # (end time, job id)

        def started(pass_result: Any) -> int:
            n = 0
            for s in pass_result.decisions.starts:
                ctl.launches.launch_done(s.job_id)
                heapq.heappush(ends, (clock.now() + runtime.get(s.job_id, 300.0), s.job_id))
                n += 1
            return n

        # the first pass: the burst onto an empty cluster
        t0 = time.perf_counter()
        first = run_pass(ctl, config, clock.now())
        out["first_pass_s"] = time.perf_counter() - t0
        out["first_pass_starts"] = started(first)

        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        cycles: list[float] = []
        cycles_cpu: list[float] = []
        end_s: list[float] = []
        ended = 0
        dlat: list[float] = []
        starts = 0
        t_drain, t_virtual, cpu0 = time.perf_counter(), clock.now(), time.process_time()
        while time.perf_counter() - t_drain < drain_s and not (max_cycles and len(cycles) >= max_cycles):
            if not ends:
                break
            # the clock runs ``speed`` times faster than the wall: the ends due by then
            # (at least one) are applied together, as an agent's reports arrive; with
            # ``step``, it moves that many virtual seconds per cycle instead, whatever a
            # cycle costs, so that two builds deciding alike run the very same cycles
            if step:
                clock.set(max(clock.now() + step, ends[0][0]))
            else:
                clock.set(max(clock.now(), ends[0][0], t_virtual + (time.perf_counter() - t_drain) * speed))
            batch = []
            while ends and ends[0][0] <= clock.now():
                batch.append(heapq.heappop(ends)[1])
            t0 = time.perf_counter()
            with ctl.store.group():
                for job_id in batch:
                    ctl.launches.job_done({"job_id": job_id, "exit_code": 0, "end_time": clock.now()})
            end_s.append(time.perf_counter() - t0)
            ended += len(batch)
            _f, _n, dt = submit(eval_spec(tasks=1), (60, 600))
            dlat.append(dt)
            t0, c0 = time.perf_counter(), time.process_time()
            result = run_pass(ctl, config, clock.now())
            cycles.append(time.perf_counter() - t0)
            cycles_cpu.append(time.process_time() - c0)
            starts += started(result)
        wall, cpu = time.perf_counter() - t_drain, time.process_time() - cpu0
        if prof is not None:
            prof.disable()
            prof.dump_stats(profile)  # type: ignore[arg-type]
        pending = sum(1 for j in ctl.jobs.values() if j.state is JobState.PENDING)
        out.update(
            drain_wall_s=wall,
            drain_cycles=len(cycles),
            drain_starts=starts,
            drain_ends=ended,
            starts_per_s=starts / wall if wall else 0.0,
            drain_cpu_s=cpu,
            starts_per_cpu_s=starts / cpu if cpu else 0.0,
            cycle_p50_ms=pct(cycles, 50) * 1000,
            cycle_p99_ms=pct(cycles, 99) * 1000,
            cycle_max_ms=max(cycles, default=0.0) * 1000,
            cycle_cpu_p50_ms=pct(cycles_cpu, 50) * 1000,
            cycle_cpu_p99_ms=pct(cycles_cpu, 99) * 1000,
            end_ms_per_job=sum(end_s) / max(1, ended) * 1000,
            drain_submit_p99_ms=pct(dlat, 99) * 1000,
            virtual_s=clock.now() - 1_000_000.0,
            pending_left=pending,
            rss_end_mb=rss_mb(),
        )
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1024:10000,2048:50000,4096:100000", help="NODES:JOBS,... (three sizes)")
    ap.add_argument("--drain", type=float, default=60.0, help="wall seconds of drain per size (default 60)")
    ap.add_argument("--speed", type=float, default=300.0, help="virtual seconds per wall second (default 300)")
    ap.add_argument("--profile", help="cProfile the largest size's drain into this file")
    ap.add_argument(
        "--step",
        type=float,
        default=0.0,
        help="virtual seconds per cycle instead of --speed: the same cycles whatever they cost (compare builds)",
    )
    ap.add_argument("--cycles", type=int, default=0, help="stop the drain after this many cycles (0: --drain only)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # NODES:JOBS, in a child: print its JSON
    args = ap.parse_args(argv)
    if args.one:
        n, j = (int(x) for x in args.one.split(":"))
        print(json.dumps(one(n, j, args.drain, args.speed, args.profile, step=args.step, max_cycles=args.cycles)))
        return 0
    sizes = [tuple(int(x) for x in s.split(":")) for s in args.sizes.split(",") if s]
    results = []
    for i, (n, j) in enumerate(sizes):
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--one",
            f"{n}:{j}",
            "--drain",
            str(args.drain),
            "--speed",
            str(args.speed),
            "--step",
            str(args.step),
            "--cycles",
            str(args.cycles),
        ]
        if args.profile and i == len(sizes) - 1:
            cmd += ["--profile", args.profile]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{n} nodes, {j} jobs: failed:\n{p.stderr[-3000:]}", file=sys.stderr)
            return 1
        r = json.loads(p.stdout.strip().splitlines()[-1])
        results.append(r)
        print(
            f"{n} nodes, {r['queued']} jobs queued in {r['fill_s']:.1f} s ({r['fill_jobs_per_s']:.0f} jobs/s, "
            f"submit p50 {r['fill_submit_p50_ms']:.2f} ms p99 {r['fill_submit_p99_ms']:.2f} ms; "
            f"reservation of {r['reservation_nodes']} nodes); controller {r['rss_mb']:.0f} MB, "
            f"{r['mb_per_10k']:.1f} MB per 10k jobs; first pass {r['first_pass_starts']} starts in "
            f"{r['first_pass_s'] * 1000:.0f} ms; drain {r['drain_wall_s']:.0f} s wall ({r['virtual_s'] / 3600:.1f} h "
            f"virtual): {r['drain_starts']} starts, {r['drain_ends']} ends in {r['drain_cycles']} cycles: "
            f"{r['starts_per_s']:.0f} starts/s ({r['starts_per_cpu_s']:.0f} per CPU second); cycle p50 {r['cycle_p50_ms']:.0f} ms p99 {r['cycle_p99_ms']:.0f} ms "
            f"max {r['cycle_max_ms']:.0f} ms (CPU p50 {r['cycle_cpu_p50_ms']:.0f} ms p99 {r['cycle_cpu_p99_ms']:.0f} ms); end {r['end_ms_per_job']:.2f} ms/job; submit p99 while draining "
            f"{r['drain_submit_p99_ms']:.2f} ms; {r['pending_left']} pending left",
            flush=True,
        )
    print("\ngrowth:")
    cols = [
        ("starts/s", "starts_per_s", "{:.0f}"),
        ("starts/CPU s", "starts_per_cpu_s", "{:.0f}"),
        ("cycle p50 ms", "cycle_p50_ms", "{:.0f}"),
        ("cycle p99 ms", "cycle_p99_ms", "{:.0f}"),
        ("cycle CPU p50", "cycle_cpu_p50_ms", "{:.0f}"),
        ("cycle CPU p99", "cycle_cpu_p99_ms", "{:.0f}"),
        ("1st pass ms", "first_pass_s", "{:.0f}"),
        ("end ms/job", "end_ms_per_job", "{:.2f}"),
        ("submit p99 ms", "drain_submit_p99_ms", "{:.2f}"),
        ("MB/10k jobs", "mb_per_10k", "{:.1f}"),
    ]
    print(f"{'nodes:jobs':>14}" + "".join(f"{c[0]:>15}" for c in cols))
    for r in results:
        row = []
        for _label, key, fmt in cols:
            v = r[key] * (1000 if key == "first_pass_s" else 1)
            row.append(f"{fmt.format(v):>15}")
        print(f"{str(r['nodes']) + ':' + str(r['queued']):>14}" + "".join(row))
    if args.profile:
        import pstats

        print(f"\nprofile of the last size's drain ({args.profile}), top 25 by cumulative time:")
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
