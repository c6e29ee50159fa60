"""``muster sim ettr``: the effective training time ratio of a frontier-scale run under the
Llama 3 failure mix, for muster (replace + spares, requeue only) and Slurm's defaults.

The model is ``sim.ettr``; this module reads the options (refusing what makes no sense),
runs the three profiles on the same replayed interruptions, and prints the figures (and a
pool-sizing table with ``--pool-sizing``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from muster.core.errors import MusterError
from muster.sim.ettr import LLAMA3_DAYS, LLAMA3_NODES, EttrResult, Run, default_profiles, pool_sizing, simulate
from muster.sim.failcli import duration
from muster.sim.metrics import grid

__all__ = ["build_parser", "main", "run"]

PROG = "muster sim ettr"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Replay a failure mix (by default the Llama 3 paper's 419 interruptions in 54 days on "
        "2,048 nodes of 8 GPUs) against one training run and print its effective training time ratio "
        "for muster (replace + spares, requeue only) and Slurm's default timings.",
    )
    r = p.add_argument_group("the run")
    r.add_argument("--nodes", type=int, default=LLAMA3_NODES, metavar="N", help="nodes of the job (2048)")
    r.add_argument("--gpus-per-node", type=int, default=8, metavar="G", help="GPUs per node (8)")
    r.add_argument("--days", type=float, default=LLAMA3_DAYS, metavar="D", help="wall time of the run (54)")
    r.add_argument(
        "--failure-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="interruptions per category = the Llama 3 count x X, scaled to --nodes and --days (1)",
    )
    r.add_argument("--spares", type=int, default=32, metavar="N", help="healthy nodes standing by (32)")
    r.add_argument("--repair-time", default="1d", metavar="TIME", help="a failed node's time out of service (1d)")
    r.add_argument(
        "--checkpoint-interval",
        default="auto",
        metavar="TIME|auto",
        help="training between checkpoints (auto: Young's optimum for the run's MTBF)",
    )
    r.add_argument("--checkpoint-cost", default="2s", metavar="TIME", help="the job's stall per checkpoint (2s)")
    r.add_argument("--seed", type=int, default=1, metavar="N", help="random seed of the failure times (1)")
    t = p.add_argument_group("timings (docs/sim.md: their sources)")
    t.add_argument("--hang-detection", default="2m", metavar="TIME", help="muster's hang detection time (2m)")
    t.add_argument("--replace-restart", default="60s", metavar="TIME", help="a spare joins, ranks restart (60s)")
    t.add_argument("--requeue-restart", default="10m", metavar="TIME", help="the job requeued and restarted (10m)")
    t.add_argument(
        "--inplace-restart", default="60s", metavar="TIME", help="a software fault: ranks restart in place (60s)"
    )
    t.add_argument("--manual-response", default="30m", metavar="TIME", help="a person notices and acts (30m)")
    o = p.add_argument_group("output")
    o.add_argument(
        "--pool-sizing",
        metavar="N1,N2,..",
        help="also print ETTR with each of these pool sizes (replace + spares and requeue only)",
    )
    o.add_argument("--json", metavar="FILE|-", help="write every figure as JSON (- for stdout)")
    return p


def _seconds(text: str, option: str) -> float:
    value = duration(text, option)
    if not math.isfinite(value) or value < 0:
        raise MusterError(f"{option}: must be at least 0")
    return value


def _sizes(text: str) -> list[int]:
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit():
            raise MusterError(f"--pool-sizing: {item!r} is not a pool size (whole numbers, e.g. 0,8,16,32)")
        out.append(int(item))
    return out


def run_from(args: argparse.Namespace) -> Run:
    interval = 0.0 if args.checkpoint_interval.strip().lower() == "auto" else None
    if interval is None:
        interval = _seconds(args.checkpoint_interval, "--checkpoint-interval")
        if interval == 0:
            raise MusterError("--checkpoint-interval: must be above 0 (or auto)")
    try:
        return Run(
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            days=args.days,
            spares=args.spares,
            interval=interval,
            cost=_seconds(args.checkpoint_cost, "--checkpoint-cost"),
            repair=_seconds(args.repair_time, "--repair-time"),
            scale=args.failure_scale,
            seed=args.seed,
        )
    except ValueError as e:
        raise MusterError(str(e)) from None


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.2f}%"


def _dur(s: float) -> str:
    if s != s:
        return "-"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:,.1f} h"


def format_results(results: Sequence[EttrResult]) -> str:
    keys: list[tuple[str, Callable[[EttrResult], str]]] = [
        ("ETTR", lambda r: _pct(r.ettr)),
        ("interruptions", lambda r: f"{len(r.interruptions):,}"),
        ("recovered automatically", lambda r: _pct(r.automatic_share)),
        ("median failure -> training", lambda r: _dur(r.median_down)),
        ("waited for a repaired node", lambda r: f"{r.waited_for_node:,}"),
        ("lost since checkpoint (h)", lambda r: f"{r.lost / 3600:,.1f}"),
        ("checkpoint stalls (h)", lambda r: f"{r.checkpoint / 3600:,.1f}"),
        ("not training (h)", lambda r: f"{r.down / 3600:,.1f}"),
    ]
    return grid(["", *[r.profile for r in results]], [[k, *[f(r) for r in results]] for k, f in keys])


def format_mix(run: Run) -> str:
    rows = [[c.name, f"{n:,}", "hardware" if c.hardware else "software", c.symptom] for c, n in run.counts()]
    return grid(["cause (Llama 3, Table 5)", "count", "kind", "shows as"], rows)


def _clean(value: Any) -> Any:
    """NaN is not JSON: written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def run(args: argparse.Namespace, out: TextIO) -> int:
    the_run = run_from(args)
    profiles = default_profiles(
        hang_detection=_seconds(args.hang_detection, "--hang-detection"),
        replace_restart=_seconds(args.replace_restart, "--replace-restart"),
        requeue_restart=_seconds(args.requeue_restart, "--requeue-restart"),
        manual=_seconds(args.manual_response, "--manual-response"),
        inplace=_seconds(args.inplace_restart, "--inplace-restart"),
    )
    sizes = _sizes(args.pool_sizing) if args.pool_sizing else []
    results = [simulate(the_run, p) for p in profiles]
    report: dict[str, Any] = {
        "run": the_run.describe(),
        "profiles": [p.describe() for p in profiles],
        "results": [r.describe() for r in results],
    }
    text = out if args.json != "-" else sys.stderr
    text.write(
        f"{the_run.nodes:,} nodes x {the_run.gpus_per_node} GPUs, {the_run.days:g} days, "
        f"{the_run.total():,} interruptions (job MTBF {the_run.mtbf() / 3600:.2f} h), {the_run.spares} spares, "
        f"checkpoint every {the_run.checkpoint_interval() / 60:.1f} min ({the_run.cost:g} s stall), "
        f"repair {the_run.repair / 3600:g} h, seed {the_run.seed}\n\n"
    )
    text.write(format_mix(the_run) + "\n\n" + format_results(results) + "\n")
    if sizes:
        rows = []
        sizing: list[dict[str, Any]] = []
        table = {p.name: pool_sizing(the_run, p, sizes) for p in profiles[:2]}
        for k, n in enumerate(sizes):
            cells = [str(n)]
            entry: dict[str, Any] = {"spares": n}
            for name, got in table.items():
                r = got[k][1]
                cells += [_pct(r.ettr), _pct(r.automatic_share)]
                entry[name] = {"ettr": r.ettr, "recovered_automatically": r.automatic_share}
            rows.append(cells)
            sizing.append(entry)
        header = ["spares"]
        for name in table:
            header += [f"{name}: ETTR", "automatic"]
        text.write("\n" + grid(header, rows) + "\n")
        report["pool_sizing"] = sizing
    if args.json:
        doc = json.dumps(_clean(report), indent=2) + "\n"
        if args.json == "-":
            out.write(doc)
        else:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(doc)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    try:
        return run(args, sys.stdout)
    except MusterError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    except OSError as e:
        where = f" {e.filename}" if e.filename else ""
        sys.stderr.write(f"{PROG}: error: cannot write{where}: {e.strerror or e}\n")
        return 1
