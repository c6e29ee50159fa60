"""Work lost to preemption on a trace replay: Slurm's priority-ordered victims against
muster's checkpoint-aware choice (issue 37 item 3), with the very scheduler the controller
runs (``sched.preempt``), on the simulator's virtual clock.

    python benchmarks/bench_preempt_loss.py                  # the bundled KTH cut (5,000 jobs)
    python benchmarks/bench_preempt_loss.py TRACE --jobs 2000 --high 0.2 --grace 600

The trace's jobs are split, by a hash of their id, into an urgent tier (``--high``, the
partition ``high``, PriorityTier 10) and scavenger work (``scav``, PriorityTier 1,
PreemptMode=REQUEUE, GraceTime ``--grace``): an urgent job that cannot start preempts
scavengers (``preempt/partition_prio``). Traces record no checkpoints, so each scavenger
is given a checkpoint period, again by a hash of its id: every 10, 20, 30, 60 or 120 minutes
from its start, or never (one in six), and reports each checkpoint as ``muster.progress``
would (``Job.progress["ckpt_time"]``); a requeued scavenger resumes from its last
checkpoint (it runs only what was not saved). Both replays see the same jobs, periods and tiers;
only ``PreemptParameters=victim_order`` differs:

* ``priority`` (Slurm's order): the lowest-priority victims first (multifactor priority:
  the youngest, smallest scavengers), whatever they lose;
* ``lost_work`` (muster's): the least work lost since the last checkpoint, in unit-hours
  (``sched.preempt.victim_cost``), then the smallest.

Work lost by a victim: from its last checkpoint (its start when it wrote none) to the end
of its grace time, times its size, in the trace's unit-hours (processor-hours of KTH, each
processor standing for a GPU; GPU-hours of a GPU trace). This measures the victim choice
alone; a third replay adds the handshake: a victim that checkpoints at all saves when told,
``SAVE`` (60) seconds later, loses nothing and is stopped then (its preemptor starts then,
not at the end of the grace); one that never checkpoints cannot answer. The replay is deterministic; the figures below
are reproducible to the digit.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import zlib

from muster.core.job import Job
from muster.sched.decisions import Preemption, Start
from muster.sched.snapshot import PartitionView
from muster.sim.cluster import Cluster, uniform_cluster
from muster.sim.engine import Estimate, Simulation, replayable
from muster.sim.metrics import compute
from muster.sim.policies import build_settings, sched_config
from muster.sim.traces import TraceJob, read_trace

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED = os.path.join(HERE, "traces", "kth-sp2-5000.swf.gz")
PERIODS = (600.0, 1200.0, 1800.0, 3600.0, 7200.0, math.inf)  # seconds between checkpoints
SAVE = 60  # seconds a victim takes to save a checkpoint when told (the handshake)


def _hash(job_id: int, salt: str) -> int:
    return zlib.crc32(f"{salt}:{job_id}".encode())


class CheckpointingReplay(Simulation):
    """The simulator with two tiers and jobs that checkpoint on a schedule of their own."""

    def __init__(
        self, jobs: list[TraceJob], unit: str, cluster: Cluster, high: float, handshake: bool, **kw: object
    ) -> None:
        self.high_share = high
        self.handshake = handshake
        self.answered: dict[int, float] = {}  # victim id -> when its checkpoint on demand is saved
        self.saved: dict[int, float] = {}  # job index -> seconds of its run its checkpoints kept
        super().__init__(jobs, unit, cluster, **kw)  # type: ignore[arg-type]

    def _make_job(self, index: int, tj: TraceJob) -> Job:
        job = super()._make_job(index, tj)
        if _hash(tj.trace_id, "tier") % 1000 < self.high_share * 1000:
            job.partition = "high"
            job.spec.partitions = ["high"]
        else:
            job.partition = "scav"
            job.spec.partitions = ["scav"]
        return job

    def _checkpoint(self, job: Job, now: float) -> None:
        """The last checkpoint the running ``job`` reported by ``now``."""
        if job.start_time is None or job.partition != "scav":
            return
        period = PERIODS[_hash(job.job_id, "period") % len(PERIODS)]
        if math.isinf(period):
            job.progress = None
            return
        done = math.floor((now - job.start_time) / period)
        last = job.start_time + done * period if done > 0 else None
        saved = self.answered.get(job.job_id)
        if saved is not None and saved <= now:  # the checkpoint it saved when told
            last = saved
        job.progress = {"ckpt_time": last} if last is not None else None

    def preempt(self, preemptions: list[Preemption], holds: dict[int, list[str]], now: float) -> None:
        """With the handshake, a victim that checkpoints (a finite period) saves when told,
        ``SAVE`` seconds later, and is stopped then instead of at the end of its grace."""
        if self.handshake:
            for p in preemptions:
                if math.isinf(PERIODS[_hash(p.job_id, "period") % len(PERIODS)]):
                    continue  # it never checkpoints: it cannot answer
                p.grace_time = min(p.grace_time, SAVE)
                self.answered[p.job_id] = now + p.grace_time
        super().preempt(preemptions, holds, now)

    def _pass(self, now: float) -> None:
        for job in self._running.values():
            self._checkpoint(job, now)
        super()._pass(now)

    def _preempted(self, index: int, now: float) -> int:
        job = self.jobs[index]
        self._checkpoint(job, now)  # what it saved by the end of its grace
        start, attempt = job.start_time, job.restart_count
        ckpt = (job.progress or {}).get("ckpt_time")
        done = super()._preempted(index, now)
        self.answered.pop(job.job_id, None)
        if job.restart_count > attempt and ckpt is not None and start is not None:
            self.saved[index] = self.saved.get(index, 0.0) + ckpt - start  # it resumes from there
        return done

    def start(self, starts: list[Start], now: float) -> None:
        """A requeued job resumes from its last checkpoint: it runs what was not saved."""
        swapped = {}
        for st in starts:
            index = st.job_id - 1
            if self.saved.get(index):
                tj = swapped[index] = self.trace_jobs[index]
                self.trace_jobs[index] = dataclasses.replace(tj, run=max(1.0, tj.run - self.saved[index]))
        try:
            super().start(starts, now)
        finally:
            for index, tj in swapped.items():
                self.trace_jobs[index] = tj


def replay(args: argparse.Namespace, order: str, handshake: bool) -> tuple[float, int, dict[str, float]]:
    """(unit-hours lost, runs preempted, metrics) of one replay with victim ``order``, and
    with or without the checkpoint handshake."""
    trace = read_trace(args.trace, None, None)
    jobs = trace.jobs[: args.jobs] if args.jobs else trace.jobs
    cluster = uniform_cluster(trace.unit, trace.header, args.nodes, args.cpus_per_node)
    names = tuple(v.name for v in cluster.nodes)
    cluster.partitions = {
        "scav": PartitionView(name="scav", nodes=names, is_default=True, preempt_mode="REQUEUE", grace_time=args.grace),
        "high": PartitionView(name="high", nodes=names, priority_tier=10),
    }
    cluster.default_partition = "scav"
    est = Estimate.parse(args.estimate)
    kept, _ = replayable(jobs, trace.unit, cluster, est)
    settings = build_settings("backfill", max_time_limit=max(est.limit(j) for j in kept))
    settings |= {
        "PriorityType": "priority/multifactor",  # Slurm's usual: by age and size
        "PriorityWeightAge": "1000",
        "PriorityWeightJobSize": "1000",
        "PreemptType": "preempt/partition_prio",
        "PreemptMode": "REQUEUE",
    }
    settings["PreemptParameters"] = f"victim_order={order}"
    config = sched_config(settings)
    assert config.preempt_victim_order == order
    sim = CheckpointingReplay(kept, trace.unit, cluster, args.high, handshake, config=config, estimate=est, label=order)
    result = sim.run()
    return result.preempted_lost_hours, result.preemptions, compute(result.outcomes, cluster.capacity(trace.unit))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=BUNDLED, help="trace file (default: the bundled KTH cut)")
    ap.add_argument("--jobs", type=int, help="replay only the first N jobs")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--cpus-per-node", type=int)
    ap.add_argument("--estimate", default="requested", help="requested, actual or KxActual")
    ap.add_argument("--high", type=float, default=0.2, help="share of jobs in the urgent tier (default 0.2)")
    ap.add_argument("--grace", type=int, default=300, help="the scavengers' GraceTime in seconds (default 300)")
    args = ap.parse_args(argv)
    if not 0 < args.high < 1:
        print("bench_preempt_loss: --high must be between 0 and 1", file=sys.stderr)
        return 2
    if not os.path.exists(args.trace):
        print(f"bench_preempt_loss: no trace at {args.trace}", file=sys.stderr)
        return 1
    print(
        f"{os.path.basename(args.trace)}{f' (first {args.jobs:,} jobs)' if args.jobs else ''}: "
        f"{args.high:.0%} urgent, scavengers GraceTime {args.grace} s, PreemptMode=REQUEUE"
    )
    print(f"{'victim order':<24} {'preempted':>9} {'lost unit-hours':>15} {'per preemption':>14} {'mean wait h':>11}")
    rows = {}
    runs = (
        ("priority", False, "priority (Slurm)"),
        ("lost_work", False, "lost work (muster)"),
        ("lost_work", True, "lost work + handshake"),
    )
    for order, handshake, label in runs:
        lost, count, m = replay(args, order, handshake)
        rows[label] = lost
        per = lost / count if count else 0.0
        print(f"{label:<24} {count:>9,} {lost:>15,.1f} {per:>14,.2f} {m['wait_mean'] / 3600:>11,.2f}")
        sys.stdout.flush()
    slurm = rows["priority (Slurm)"]
    for label in ("lost work (muster)", "lost work + handshake"):
        ratio = f"{slurm / rows[label]:.2f}x" if rows[label] > 0 else "(none lost)"
        print(f"lost work, Slurm's order / {label}: {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
