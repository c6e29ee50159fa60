"""Issue 37 item 2's figures: how well the straggler detector catches fail-slow nodes, and how rarely it accuses a healthy one.

Synthetic jobs (4 to 64 nodes, 4 ranks per node, a base step time of 0.3 to 30 s) run for
``--minutes`` each; every rank's step durations carry noise (log-normal, sigma 3 to 12 %
per job), rare spikes (1 % of steps 2 to 4 times longer: a garbage collection, a slow
read) and a small persistent difference between nodes (sigma 2 %). In ``--inject`` of the
jobs one node turns fail-slow at a random time after the first two minutes, by 10, 20, 30
or 50 %. The pipeline is muster's: each rank's rolling median over its last
``agent.progress.PACE_WINDOW`` step durations (the agent), a node's pace as its slowest
rank's median with at least ``min_samples`` durations (``core.stragglers.node_pace``), and
``core.stragglers.judge`` every ``--every`` seconds (the node check) with the default
``Rules``. Reported, per injected slowdown: caught (flagged after it began), caught within
5 minutes, missed, and the time to flag (median, p95, max); and false suspects: healthy
nodes flagged (and per 1,000 node-hours). A 10 % node is below the threshold: its
"caught" count is how often it is flagged anyway. Figures are printed, never asserted.

    python benchmarks/bench_stragglers.py [--jobs 200] [--minutes 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import numpy as np

from muster.agent.progress import PACE_WINDOW
from muster.core.stragglers import Pace, Rules, Watch, flagged, judge

RANKS = 4
SLOWDOWNS = (0.1, 0.2, 0.3, 0.5)


def _job(rng: random.Random, nrng: np.random.Generator, minutes: float, inject: float) -> dict:
    nodes = rng.choice((4, 8, 16, 32, 64))
    base = 10 ** rng.uniform(np.log10(0.3), np.log10(30.0))
    sigma = rng.uniform(0.03, 0.12)
    horizon = minutes * 60.0
    steps = int(horizon / base * 1.3) + PACE_WINDOW + 2
    node_factor = nrng.normal(1.0, 0.02, size=(nodes, 1, 1))
    dur = base * node_factor * nrng.lognormal(0.0, sigma, size=(nodes, RANKS, steps))
    spikes = nrng.random(size=dur.shape) < 0.01
    dur = np.where(spikes, dur * nrng.uniform(2.0, 4.0, size=dur.shape), dur)
    slow_node, slow_by, onset = None, 0.0, None
    if rng.random() < inject:
        slow_node, slow_by = rng.randrange(nodes), rng.choice(SLOWDOWNS)
        onset = rng.uniform(120.0, horizon - 360.0)
        ends = np.cumsum(dur[slow_node], axis=1)
        after = ends > onset  # steps that finish after the onset run slower
        dur[slow_node] = np.where(after, dur[slow_node] * (1.0 + slow_by), dur[slow_node])
    ends = np.cumsum(dur, axis=2)
    return {"nodes": nodes, "dur": dur, "ends": ends, "slow": slow_node, "by": slow_by, "onset": onset}


def _paces(job: dict, t: float, rules: Rules) -> dict[str, Pace]:
    """Each node's pace at ``t``, as the agent and the controller compute it."""
    dur, ends = job["dur"], job["ends"]
    out: dict[str, Pace] = {}
    for n in range(job["nodes"]):
        best: Pace | None = None
        for r in range(RANKS):
            done = int(np.searchsorted(ends[n, r], t, side="right"))
            # the first step has no duration at the agent (no previous step): done - 1 samples
            samples = min(PACE_WINDOW, max(0, done - 1))
            if samples < rules.min_samples:
                continue
            median = float(np.median(dur[n, r, done - samples : done]))
            if best is None or median > best.median:
                best = Pace(median, samples, str(r))
        if best is not None:
            out[f"n{n}"] = best
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=20.0, help="each job's simulated run")
    parser.add_argument("--inject", type=float, default=0.6, help="share of jobs with a fail-slow node")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between judgements")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slower", type=float, default=Rules().slower, help="flag at this fraction above the peers")
    parser.add_argument("--window", type=float, default=Rules().sustain, help="seconds slow before flagged")
    parser.add_argument("--mad-k", type=float, default=Rules().mad_k, help="scaled MADs of the peers above")
    args = parser.parse_args(argv)
    rules = Rules(slower=args.slower, clear=min(Rules().clear, args.slower), sustain=args.window, mad_k=args.mad_k)
    rng, nrng = random.Random(args.seed), np.random.default_rng(args.seed)
    caught: dict[float, list[float]] = {s: [] for s in SLOWDOWNS}
    missed: dict[float, int] = dict.fromkeys(SLOWDOWNS, 0)
    false_nodes = healthy_nodes = 0
    healthy_hours = 0.0
    started = time.perf_counter()
    for _ in range(args.jobs):
        job = _job(rng, nrng, args.minutes, args.inject)
        watches: dict[str, Watch] = {}
        first_flag: dict[str, float] = {}
        t = args.every
        while t <= args.minutes * 60.0:
            watches = judge(_paces(job, t, rules), watches, t, rules)
            for node in flagged(watches):
                first_flag.setdefault(node, t)
            t += args.every
        slow = None if job["slow"] is None else f"n{job['slow']}"
        false_nodes += sum(1 for node in first_flag if node != slow)
        healthy = job["nodes"] - (1 if slow is not None else 0)
        healthy_nodes += healthy
        healthy_hours += healthy * args.minutes / 60.0
        if slow is not None:
            when = first_flag.get(slow)
            if when is not None and when >= job["onset"]:
                caught[job["by"]].append(when - job["onset"])
            else:
                missed[job["by"]] += 1
    elapsed = time.perf_counter() - started
    print(
        f"{args.jobs} jobs x {args.minutes:.0f} min, {RANKS} ranks per node, judged every {args.every:.0f} s; "
        f"rules: >= {rules.slower:.0%} slower and > {rules.mad_k:g} MADs for {rules.sustain:.0f} s, "
        f"cleared below {rules.clear:.0%}; window {PACE_WINDOW} steps, min {rules.min_samples} samples, "
        f"min {rules.min_nodes} nodes"
    )
    print(
        f"{'slower by':>10} {'jobs':>5} {'caught':>7} {'<=5 min':>8} {'missed':>7} {'flag median s':>14} {'p95 s':>7} {'max s':>7}"
    )
    for s in SLOWDOWNS:
        got = sorted(caught[s])
        n = len(got) + missed[s]
        within = sum(1 for x in got if x <= 300.0)
        med = f"{statistics.median(got):.0f}" if got else "-"
        p95 = f"{got[min(len(got) - 1, int(0.95 * len(got)))]:.0f}" if got else "-"
        top = f"{got[-1]:.0f}" if got else "-"
        print(f"{s:>10.0%} {n:>5} {len(got):>7} {within:>8} {missed[s]:>7} {med:>14} {p95:>7} {top:>7}")
    rate = false_nodes / healthy_hours * 1000 if healthy_hours else 0.0
    # the controller's cost: one judgement of a 1,000-node job (at every node check)
    big = {f"n{i}": Pace(rng.gauss(1.0, 0.03), PACE_WINDOW) for i in range(1000)}
    big_watches = judge(big, {}, 0.0, rules)
    t0 = time.perf_counter()
    for i in range(20):
        big_watches = judge(big, big_watches, float(i), rules)
    per_judgement_ms = (time.perf_counter() - t0) / 20 * 1000
    print(
        f"false suspects: {false_nodes} of {healthy_nodes} healthy nodes "
        f"({rate:.2f} per 1,000 node-hours); {elapsed:.1f} s to run"
    )
    print(f"one judgement of a 1,000-node job: {per_judgement_ms:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
