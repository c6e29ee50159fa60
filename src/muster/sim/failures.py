"""Failure-aware replay: nodes fail at random, jobs lose the work since their last
checkpoint, requeue and restart; what that costs is reported as goodput.

The model (docs/sim.md states it with its sources):

* **Failures.** Each node fails independently, as a Poisson process of ``rate`` failures
  per node-day while it is up (exponential times between failures). A failed node is out of
  service for ``repair`` seconds, then back. Each failure is given a cause drawn from an
  optional mix (e.g. ``gpu=0.59,network=0.12,other=0.29``): causes are counted, not modelled
  differently.
* **Work.** A trace job's run time is its useful work ``W``. It writes a checkpoint after
  every ``interval`` seconds of work, each costing ``cost`` seconds of wall time (none
  after the last piece of work); a restarted attempt first spends ``restart`` seconds
  (reloading the checkpoint, NCCL set-up). An attempt with ``R`` work left therefore runs
  ``restart + R + (ceil(R / interval) - 1) * cost``.
* **Interruption.** A failure of any of its nodes ends the attempt NODE_FAIL: the work done
  since its last checkpoint is lost, the job is requeued (same id, restart count + 1) with
  ``W`` minus what its checkpoints saved, and it waits for the scheduler again: on the
  nodes still up, behind the queue, or at its front with ``expedite`` (Slurm 25.11's
  ``--requeue=expedite``: first in the queue, its surviving nodes held for it for 300 s,
  through the same pass as the controller, ``sched.preempt``).
* **Goodput** of a job = useful work x size / (sum over its attempts of elapsed x size);
  the rest splits into restart overhead, checkpoint overhead and lost work. Queue waits
  are not counted (runtime goodput, as the published figures).

``CheckpointSweep`` answers the question for one job size without a scheduler: the
checkpoint interval that maximises goodput for a job of N nodes, by Monte Carlo, next to
Young's first-order optimum ``sqrt(2 x MTBF x cost)`` and Daly's ``sqrt(2 x MTBF x cost) -
cost``, with MTBF the job's (a node's over N).

Pure: the random stream comes from a seeded ``random.Random``; nothing reads a clock.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Attempt", "CheckpointSweep", "FailureModel", "JobWork", "goodput_metrics", "parse_rate", "spares_metrics"]

DAY = 86400.0


def parse_rate(text: str) -> float:
    """Failures per node-day: ``0.004``, or ``4/1000`` (4 per 1,000 node-days)."""
    t = text.strip()
    try:
        if "/" in t:
            num, den = t.split("/", 1)
            value = float(num) / float(den)
        else:
            value = float(t)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"invalid failure rate {text!r}: failures per node-day, e.g. 0.004 or 4/1000") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"invalid failure rate {text!r}: must be above 0")
    return value


def parse_causes(text: str) -> dict[str, float]:
    """``gpu=0.59,network=0.12,other=0.29`` -> shares normalised to sum 1."""
    out: dict[str, float] = {}
    for item in text.split(","):
        name, eq, share = item.strip().partition("=")
        try:
            value = float(share)
        except ValueError:
            value = -1.0
        if not eq or not name or not math.isfinite(value) or value <= 0:
            raise ValueError(f"invalid failure cause {item.strip()!r}: use NAME=SHARE, e.g. gpu=0.59")
        out[name] = out.get(name, 0.0) + value
    total = sum(out.values())
    return {k: v / total for k, v in out.items()}


@dataclass(slots=True)
class FailureModel:
    rate: float  # failures per node-day while up
    repair: float = 4 * 3600.0
    interval: float = 3600.0  # seconds of work between checkpoints; 0: no checkpoints
    cost: float = 60.0
    restart: float = 300.0
    expedite: bool = False
    causes: dict[str, float] = field(default_factory=lambda: {"node": 1.0})
    seed: int = 1
    # A pool of healthy nodes held out of scheduling: a failed node under a running job is
    # replaced by one of them in place (the job loses the work since its checkpoint and
    # restarts, without requeueing); the repaired node refills the pool. 0: requeue only.
    spares: int = 0

    def describe(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"spares": self.spares} if self.spares else {}
        return extra | {
            "rate_per_node_day": self.rate,
            "repair_s": self.repair,
            "checkpoint_interval_s": self.interval,
            "checkpoint_cost_s": self.cost,
            "restart_overhead_s": self.restart,
            "expedite": self.expedite,
            "causes": dict(self.causes),
            "seed": self.seed,
        }


@dataclass(slots=True)
class Attempt:
    """How one attempt of a job with ``left`` work would run, uninterrupted."""

    left: float
    restart: float  # the overhead it starts with (0 for a first attempt)
    interval: float
    cost: float

    @property
    def checkpoints(self) -> int:
        if self.interval <= 0 or self.left <= 0:
            return 0
        return max(0, math.ceil(self.left / self.interval) - 1)

    @property
    def wall(self) -> float:
        return self.restart + self.left + self.checkpoints * self.cost

    def cut(self, elapsed: float) -> tuple[float, float, float, float]:
        """Interrupted after ``elapsed`` seconds: (work saved by checkpoints, work lost,
        checkpoint overhead spent, restart overhead spent)."""
        restart = min(elapsed, self.restart)
        e = elapsed - restart
        if self.interval <= 0:
            return 0.0, min(e, self.left), 0.0, restart
        done = min(int(e // (self.interval + self.cost)), self.checkpoints)
        saved = done * self.interval
        lost = min(e - done * (self.interval + self.cost), self.left - saved)
        return saved, max(0.0, lost), done * self.cost, restart


@dataclass(slots=True)
class JobWork:
    """One job's account under failures (times in seconds of wall time, per unit of size)."""

    work: float
    size: int
    saved: float = 0.0  # work done and kept (checkpointed or finished)
    allocated: float = 0.0
    lost: float = 0.0
    checkpoint: float = 0.0
    restart: float = 0.0
    restarts: int = 0
    current: Attempt | None = None
    waited: float = 0.0  # queue waits after interruptions (requeued, until started again)
    failed_at: float | None = None  # when the job was requeued by a failure, until it starts

    def begin(self, model: FailureModel) -> float:
        """A new attempt starts: its uninterrupted wall time."""
        self.current = Attempt(
            self.work - self.saved, model.restart if self.restarts else 0.0, model.interval, model.cost
        )
        return self.current.wall

    def interrupt(self, elapsed: float) -> None:
        assert self.current is not None
        saved, lost, ckpt, restart = self.current.cut(elapsed)
        self.saved += saved
        self.lost += lost
        self.checkpoint += ckpt
        self.restart += restart
        self.allocated += elapsed
        self.restarts += 1
        self.current = None

    def finish(self, elapsed: float) -> None:
        """The attempt ended by itself after ``elapsed`` (its wall time, or its limit)."""
        assert self.current is not None
        a = self.current
        if elapsed >= a.wall:
            self.saved = self.work
            self.checkpoint += a.checkpoints * a.cost
            self.restart += a.restart
        else:  # killed at its time limit: what ran counts, nothing more will
            saved, lost, ckpt, restart = a.cut(elapsed)
            self.saved += saved + lost
            self.checkpoint += ckpt
            self.restart += restart
        self.allocated += elapsed
        self.current = None

    @property
    def goodput(self) -> float:
        return self.saved / self.allocated if self.allocated > 0 else math.nan


def goodput_metrics(jobs: list[JobWork], failures: Counter[str], size_class: Any) -> dict[str, Any]:
    """Cluster figures (unit-seconds weighted by size) and goodput by job size."""

    def totals(group: list[JobWork]) -> dict[str, Any]:
        alloc = math.fsum(j.allocated * j.size for j in group)
        part = {k: math.fsum(getattr(j, k) * j.size for j in group) for k in ("saved", "lost", "checkpoint", "restart")}
        return {
            "jobs": len(group),
            "interrupted_jobs": sum(j.restarts > 0 for j in group),
            "restarts": sum(j.restarts for j in group),
            "allocated": alloc,
            "productive": part["saved"],
            "lost": part["lost"],
            "checkpoint_overhead": part["checkpoint"],
            "restart_overhead": part["restart"],
            "goodput": part["saved"] / alloc if alloc > 0 else math.nan,
        }

    by: dict[str, list[JobWork]] = {}
    for j in jobs:
        by.setdefault(size_class(j.size), []).append(j)
    out = totals(jobs)
    out["node_failures"] = sum(failures.values())
    out["failures_by_cause"] = dict(failures)
    out["by_size"] = [{"size": k, **totals(v)} for k, v in sorted(by.items(), key=lambda kv: int(kv[0].split("-")[-1]))]
    return out


def spares_metrics(jobs: list[JobWork], replacements: int, recoveries: list[float]) -> dict[str, Any]:
    """What spares change (``--spares``): replacements, the queue waits of requeued jobs, the
    time from a failure to running again, and an ETTR that counts those waits."""
    waited = math.fsum(j.waited * j.size for j in jobs)
    alloc = math.fsum(j.allocated * j.size for j in jobs)
    saved = math.fsum(j.saved * j.size for j in jobs)
    ordered = sorted(recoveries)
    n = len(ordered)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2 if n else math.nan
    return {
        "replacements": replacements,
        "requeue_wait": waited,
        "median_recovery_s": median,
        "ettr": saved / (alloc + waited) if alloc + waited > 0 else math.nan,
    }


class CheckpointSweep:
    """Goodput of one job of ``nodes`` nodes and ``work`` seconds of work against the
    checkpoint interval, by Monte Carlo (``runs`` replays per interval)."""

    def __init__(self, model: FailureModel, nodes: int, work: float, runs: int = 200) -> None:
        self.model = model
        self.nodes = nodes
        self.work = work
        self.runs = runs
        self.mtbf = DAY / (model.rate * nodes)  # the job's: any of its nodes fails

    def young(self) -> float:
        return math.sqrt(2 * self.mtbf * self.model.cost)

    def daly(self) -> float:
        c = self.model.cost
        return max(c, math.sqrt(2 * self.mtbf * c) - c) if c < 2 * self.mtbf else self.mtbf

    def goodput(self, interval: float, seed: int | None = None) -> float:
        """Mean runtime goodput of the job at this checkpoint interval."""
        rng = random.Random(self.model.seed if seed is None else seed)
        m = self.model
        at = FailureModel(m.rate, m.repair, interval, m.cost, m.restart)
        lam = 1.0 / self.mtbf
        total = 0.0
        for _ in range(self.runs):
            job = JobWork(self.work, 1)
            for _attempt in range(100_000):
                wall = job.begin(at)
                t = rng.expovariate(lam)
                if t >= wall:
                    job.finish(wall)
                    break
                job.interrupt(t)
            total += job.goodput
        return total / self.runs

    def sweep(self, points: int = 25) -> dict[str, Any]:
        cost = max(self.model.cost, 1.0)
        lo, hi = cost, max(cost * 2, min(self.work, 20 * self.young()))
        grid = sorted({lo * (hi / lo) ** (k / (points - 1)) for k in range(points)} | {self.young(), self.daly()})
        results = [(tau, self.goodput(tau)) for tau in grid]
        best_tau, best = max(results, key=lambda r: r[1])
        return {
            "nodes": self.nodes,
            "work_s": self.work,
            "job_mtbf_s": self.mtbf,
            "checkpoint_cost_s": self.model.cost,
            "best_interval_s": best_tau,
            "best_goodput": best,
            "young_interval_s": self.young(),
            "young_goodput": self.goodput(self.young()),
            "daly_interval_s": self.daly(),
            "daly_goodput": self.goodput(self.daly()),
            "no_checkpoint_goodput": self.goodput(0.0),
            "curve": [{"interval_s": t, "goodput": g} for t, g in results],
        }


class NodeFailures:
    """The random stream of failures and causes for the nodes of one replay."""

    def __init__(self, model: FailureModel) -> None:
        self.model = model
        self.rng = random.Random(model.seed)
        self.per_second = model.rate / DAY
        self.counts: Counter[str] = Counter()
        self._causes = list(model.causes.items())

    def next_gap(self) -> float:
        return self.rng.expovariate(self.per_second)

    def cause(self) -> str:
        x = self.rng.random()
        for name, share in self._causes:
            x -= share
            if x < 0:
                self.counts[name] += 1
                return name
        name = self._causes[-1][0]
        self.counts[name] += 1
        return name
