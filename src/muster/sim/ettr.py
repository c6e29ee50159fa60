"""Effective training time ratio (ETTR) of one frontier-scale training run under a replayed
failure mix: detection, spares or requeue, restart cost and checkpoints (docs/sim.md).

One synchronous training job holds ``nodes`` nodes for ``days`` of wall time; a pool of
``spares`` healthy nodes stands by. The failure mix is replayed, not sampled: each
category of the mix contributes exactly its count of interruptions (by default the Llama 3
paper's 419 unexpected interruptions of its 54-day, 16,384-GPU run), at times drawn
uniformly over the run (a Poisson process conditioned on its count) in a seeded order.
What one interruption costs depends on the *profile* (how a scheduler finds and handles it):

* **Detection** ``detect[symptom]``: the failure is visible that long after it happens (a
  crashed process at once, a node that stops answering after the node timeout, a hang after
  the hang detection time). ``silent`` faults (silent data corruption) are found by a
  person: ``manual`` seconds.
* **Who recovers.** Software faults are restarted in place by the training framework
  (torchrun ``--max-restarts``), on the same nodes, at ``inplace`` cost, in every profile.
  A hardware fault needs its node out of service; the profile recovers it automatically
  when its symptom is one it ``handles`` (muster: a GPU error, a silent node, a judged hang;
  Slurm by default: only a node that went DOWN), otherwise a person does after ``manual``
  seconds (the job ended FAILED and someone drains the node and resubmits).
* **Replacement or requeue.** ``replace``: a spare joins the running job in place of the
  failed node and the ranks restart (``restart`` seconds, no scheduling in between);
  ``requeue``: the job ends, is requeued and started again by the scheduler on healthy
  nodes (the pool's nodes are then simply idle nodes) at ``restart`` cost. Either way the
  failed node is repaired for ``repair`` seconds and then joins the pool. With the pool
  empty, the job waits for the next repaired node: that is not an automatic recovery.
* **Work.** The job writes a checkpoint after every ``interval`` seconds of training,
  stalling ``cost`` seconds each; an interruption loses the training since the last one.
  A failure during a recovery (nothing left to lose) only adds its own recovery.

ETTR = productive training time / wall time (``days``); productive time is training that a
later interruption did not throw away, checkpoint stalls excluded.

Assumptions stated: failures strike the job's nodes (the idle pool's own failures are not
modelled); repair time is the same for every hardware fault; detection and restart times
are constants. Pure: seeded ``random.Random``, no clock, no I/O.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "LLAMA3_DAYS",
    "LLAMA3_GPUS",
    "LLAMA3_MIX",
    "LLAMA3_NODES",
    "SYMPTOMS",
    "Category",
    "EttrResult",
    "Interruption",
    "Profile",
    "Run",
    "default_profiles",
    "simulate",
    "young_interval",
]

DAY = 86400.0
SYMPTOMS = ("crash", "node", "hang", "silent")


@dataclass(frozen=True, slots=True)
class Category:
    """One root cause of the mix: how many interruptions, whether a node must leave service,
    and how it shows (``crash``: the job's processes die; ``node``: the node stops answering;
    ``hang``: the collectives stall; ``silent``: nothing shows)."""

    name: str
    count: int
    hardware: bool
    symptom: str


# "The Llama 3 Herd of Models" (Meta, 2024), section 3.3.4, Table 5: root causes of the 419
# unexpected interruptions during a 54-day snapshot of Llama 3 405B pre-training on 16,384
# H100 GPUs (2,048 servers of 8); about 78 % attributed to confirmed or suspected hardware.
# The counts are the paper's; its percentage column does not match them (it prints 30.1 % for
# 148 faulty-GPU interruptions, which are 35.3 % of 419), so the counts are what we replay.
# Symptoms are our reading of each cause: GPU faults crash the job (Xid errors), network
# faults and NCCL watchdog timeouts stall collectives, host faults take the node down.
LLAMA3_MIX: tuple[Category, ...] = (
    Category("faulty GPU", 148, True, "crash"),
    Category("GPU HBM3 memory", 72, True, "crash"),
    Category("software bug", 54, False, "crash"),
    Category("network switch/cable", 35, True, "hang"),
    Category("host maintenance (unplanned)", 32, True, "node"),
    Category("GPU SRAM memory", 19, True, "crash"),
    Category("GPU system processor", 17, True, "crash"),
    Category("NIC", 7, True, "hang"),
    Category("NCCL watchdog timeouts", 7, False, "hang"),
    Category("silent data corruption", 6, True, "silent"),
    Category("GPU thermal interface + sensor", 6, True, "crash"),
    Category("SSD", 3, True, "node"),
    Category("power supply", 3, True, "node"),
    Category("server chassis", 2, True, "node"),
    Category("IO expansion board", 2, True, "node"),
    Category("dependency", 2, False, "crash"),
    Category("CPU", 2, True, "node"),
    Category("system memory", 2, True, "node"),
)
LLAMA3_DAYS = 54.0
LLAMA3_NODES = 2048
LLAMA3_GPUS = 16384


@dataclass(frozen=True, slots=True)
class Profile:
    """How one scheduler finds and handles an interruption (seconds)."""

    name: str
    mode: str  # "replace" (a spare joins the running job) or "requeue" (the job restarts through the queue)
    detect: Mapping[str, float]  # symptom -> seconds until the failure is visible ("silent": see ``manual``)
    handles: frozenset[str]  # symptoms of hardware faults it recovers without a person
    restart: float  # decision -> training again, on the replacement (replace) or after the requeue (requeue)
    inplace: float = 60.0  # a software fault: the framework restarts the ranks on the same nodes
    manual: float = 1800.0  # a person notices and acts (drains the node, resubmits)

    def __post_init__(self) -> None:
        if self.mode not in ("replace", "requeue"):
            raise ValueError(f"profile {self.name}: mode must be replace or requeue, not {self.mode!r}")
        for s in self.detect:
            if s not in SYMPTOMS:
                raise ValueError(f"profile {self.name}: unknown symptom {s!r}")
        for v in (*self.detect.values(), self.restart, self.inplace, self.manual):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"profile {self.name}: times must be finite and at least 0")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "detect_s": dict(self.detect),
            "handles": sorted(self.handles),
            "restart_s": self.restart,
            "inplace_restart_s": self.inplace,
            "manual_response_s": self.manual,
        }


def default_profiles(
    hang_detection: float = 120.0,
    replace_restart: float = 60.0,
    requeue_restart: float = 600.0,
    manual: float = 1800.0,
    inplace: float = 60.0,
) -> list[Profile]:
    """The three profiles ``muster sim ettr`` compares (docs/sim.md states the sources).

    * muster, replace + spares: a crash is seen within 10 s (the step exits; the agent's GPU
      health check drains the node), a silent node after 60 s, a hang after the hang detection
      time (``--hang-timeout`` or the automatic one: 3 median steps, at least 60 s); a spare
      replaces the node.
    * muster, requeue only: the same detection; the job is requeued and started again.
    * Slurm's defaults: a node is DOWN after SlurmdTimeout=300 s and its job requeued
      (JobRequeue=1); a crashed GPU leaves the node up and the job FAILED (no health check by
      default), and a hang lasts until PyTorch's NCCL watchdog aborts it (600 s), after which
      the job is FAILED too: a person drains the node and resubmits."""
    muster_detect = {"crash": 10.0, "node": 60.0, "hang": hang_detection, "silent": manual}
    handles = frozenset({"crash", "node", "hang"})
    return [
        Profile("muster replace+spares", "replace", muster_detect, handles, replace_restart, inplace, manual),
        Profile("muster requeue-only", "requeue", muster_detect, handles, requeue_restart, inplace, manual),
        Profile(
            "Slurm defaults",
            "requeue",
            {"crash": 10.0, "node": 300.0, "hang": 600.0, "silent": manual},
            frozenset({"node"}),
            requeue_restart,
            inplace,
            manual,
        ),
    ]


def young_interval(mtbf: float, cost: float) -> float:
    """Young's first-order optimum checkpoint interval, sqrt(2 x MTBF x cost) (CACM 1974)."""
    return math.sqrt(2.0 * mtbf * cost)


@dataclass(frozen=True, slots=True)
class Run:
    """The run replayed: its size and length, the mix, the pool, checkpoints, repair."""

    nodes: int = LLAMA3_NODES
    gpus_per_node: int = 8
    days: float = LLAMA3_DAYS
    mix: tuple[Category, ...] = LLAMA3_MIX
    spares: int = 0
    interval: float = 0.0  # seconds of training between checkpoints; 0: Young's optimum for this run
    cost: float = 2.0  # seconds the job stalls per checkpoint (asynchronous, in-memory first)
    repair: float = DAY  # a failed node's time out of service before it joins the pool
    scale: float = 1.0  # interruptions per category = round(count x scale x nodes/2048 x days/54)
    seed: int = 1

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError("nodes must be at least 1")
        if self.gpus_per_node < 1:
            raise ValueError("GPUs per node must be at least 1")
        if self.spares < 0:
            raise ValueError("spares must be at least 0")
        for name, v in (("days", self.days), ("scale", self.scale)):
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be above 0")
        for name, v in (
            ("checkpoint interval", self.interval),
            ("checkpoint cost", self.cost),
            ("repair", self.repair),
        ):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be at least 0")
        if not self.mix or any(c.count < 0 or c.symptom not in SYMPTOMS for c in self.mix):
            raise ValueError("the failure mix needs categories with counts >= 0 and a known symptom")

    @property
    def horizon(self) -> float:
        return self.days * DAY

    def counts(self) -> list[tuple[Category, int]]:
        """Interruptions per category for this run: the mix scaled to its nodes and days."""
        factor = self.scale * (self.nodes / LLAMA3_NODES) * (self.days / LLAMA3_DAYS)
        return [(c, round(c.count * factor)) for c in self.mix]

    def total(self) -> int:
        return sum(n for _, n in self.counts())

    def mtbf(self) -> float:
        """The job's mean time between interruptions."""
        n = self.total()
        return self.horizon / n if n else math.inf

    def checkpoint_interval(self) -> float:
        """``interval``, or Young's optimum for this run's MTBF and checkpoint cost."""
        if self.interval > 0:
            return self.interval
        mtbf = self.mtbf()
        if not math.isfinite(mtbf) or self.cost <= 0:
            return self.horizon
        return young_interval(mtbf, self.cost)

    def describe(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "gpus": self.nodes * self.gpus_per_node,
            "days": self.days,
            "spares": self.spares,
            "interruptions": self.total(),
            "mix": [
                {"name": c.name, "count": n, "hardware": c.hardware, "symptom": c.symptom} for c, n in self.counts()
            ],
            "checkpoint_interval_s": self.checkpoint_interval(),
            "checkpoint_cost_s": self.cost,
            "repair_s": self.repair,
            "scale": self.scale,
            "seed": self.seed,
        }


@dataclass(frozen=True, slots=True)
class Interruption:
    """One replayed interruption and what it cost."""

    at: float  # seconds into the run
    category: str
    lost: float  # training thrown away (since the last checkpoint)
    down: float  # failure -> training again (detection, waiting for a node, restart)
    automatic: bool  # recovered without a person, and without waiting for a repair


@dataclass(slots=True)
class EttrResult:
    profile: str
    horizon: float
    productive: float = 0.0
    lost: float = 0.0
    checkpoint: float = 0.0
    down: float = 0.0  # wall time the job was not training (detection, waiting, restart)
    waited_for_node: int = 0  # interruptions that found the pool empty
    interruptions: list[Interruption] = field(default_factory=list)

    @property
    def ettr(self) -> float:
        return self.productive / self.horizon

    @property
    def automatic_share(self) -> float:
        n = len(self.interruptions)
        return sum(i.automatic for i in self.interruptions) / n if n else math.nan

    @property
    def median_down(self) -> float:
        return statistics.median(i.down for i in self.interruptions) if self.interruptions else math.nan

    def by_category(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for i in self.interruptions:
            c = out.setdefault(i.category, {"count": 0, "automatic": 0, "down": 0.0, "lost": 0.0})
            c["count"] += 1
            c["automatic"] += i.automatic
            c["down"] += i.down
            c["lost"] += i.lost
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "ettr": self.ettr,
            "interruptions": len(self.interruptions),
            "recovered_automatically": self.automatic_share,
            "median_failure_to_training_s": self.median_down,
            "waited_for_a_node": self.waited_for_node,
            "productive_s": self.productive,
            "lost_s": self.lost,
            "checkpoint_stall_s": self.checkpoint,
            "down_s": self.down,
            "by_category": self.by_category(),
        }


def _schedule(run: Run) -> list[tuple[float, Category]]:
    """The interruptions, in time order: each category's count, at uniform times (seeded)."""
    rng = random.Random(run.seed)
    labels = [c for c, n in run.counts() for _ in range(n)]
    rng.shuffle(labels)
    times = sorted(rng.uniform(0.0, run.horizon) for _ in labels)
    return list(zip(times, labels, strict=True))


def _training(span: float, interval: float, cost: float) -> tuple[float, float, float]:
    """``span`` seconds of training from a fresh start: (saved by checkpoints, done since the
    last checkpoint, checkpoint stall)."""
    if span <= 0:
        return 0.0, 0.0, 0.0
    period = interval + cost
    done = int(span // period)
    rest = span - done * period
    work = min(rest, interval)
    return done * interval, work, done * cost + (rest - work)


def simulate(run: Run, profile: Profile) -> EttrResult:
    """Replay ``run``'s interruptions under ``profile``; the same seed gives the same
    interruptions (times and causes) to every profile."""
    horizon = run.horizon
    interval = run.checkpoint_interval()
    result = EttrResult(profile.name, horizon)
    pool = run.spares
    repaired: list[float] = []  # heap: times at which nodes under repair join the pool
    resume = 0.0  # when the job (re)starts training

    def take_node(at: float) -> tuple[float, bool]:
        """A healthy node for the job from ``at``: (when, whether it had to wait for a repair).
        The failed node is already under repair, so there is always one to wait for."""
        nonlocal pool
        while repaired and repaired[0] <= at:
            heapq.heappop(repaired)
            pool += 1
        if pool > 0:
            pool -= 1
            return at, False
        return heapq.heappop(repaired), True

    for at, cat in _schedule(run):
        if at >= horizon:
            break
        if at >= resume:  # it struck a training job: the work since the last checkpoint is lost
            saved, lost, stall = _training(at - resume, interval, run.cost)
            result.productive += saved
            result.lost += lost
            result.checkpoint += stall
            start = at
        else:  # it struck during a recovery: only its own recovery is added
            lost = 0.0
            start = resume
        detect = profile.detect.get(cat.symptom, profile.manual) if cat.symptom != "silent" else profile.manual
        visible = start + detect
        automatic = cat.symptom != "silent"
        if not cat.hardware:
            back = visible + profile.inplace
        else:
            if cat.symptom not in profile.handles:
                automatic = False
                visible += profile.manual if cat.symptom != "silent" else 0.0
            heapq.heappush(repaired, visible + run.repair)  # out of service once it is found
            ready, waited = take_node(visible)
            if waited:
                automatic = False
                result.waited_for_node += 1
            back = ready + profile.restart
        resume = max(resume, back)
        result.interruptions.append(Interruption(at, cat.name, lost, back - at, automatic))
    if resume < horizon:
        saved, work, stall = _training(horizon - resume, interval, run.cost)
        result.productive += saved + work  # the run goes on: work since its last checkpoint is not lost
        result.checkpoint += stall
    result.down = horizon - result.productive - result.lost - result.checkpoint
    return result


def compare(run: Run, profiles: Sequence[Profile]) -> list[EttrResult]:
    return [simulate(run, p) for p in profiles]


def pool_sizing(run: Run, profile: Profile, spares: Sequence[int]) -> list[tuple[int, EttrResult]]:
    """ETTR of ``run`` under ``profile`` for each pool size."""
    return [(n, simulate(replace(run, spares=n), profile)) for n in spares]


def category_table(results: Sequence[EttrResult]) -> Counter[str]:
    """Interruptions per category (the same for every profile of one run)."""
    return Counter(i.category for i in results[0].interruptions) if results else Counter()
