"""``muster sim``'s failure options (``--failures`` and friends) and their report.

The model itself is ``sim.failures``; this module turns command-line values into a
``FailureModel`` (refusing what makes no sense) and formats goodput and the checkpoint sweep.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from typing import Any

from muster.core.errors import MusterError
from muster.sim.failures import CheckpointSweep, FailureModel, parse_causes, parse_rate

__all__ = ["add_arguments", "duration", "format_goodput", "format_sweep", "model_from", "sweep_from"]

_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str, what: str) -> float:
    """Seconds from ``90``, ``90s``, ``5m``, ``4h``, ``7d`` (``muster sim``'s durations)."""
    m = _DURATION_RE.match(text.strip().lower())
    if m is None:
        raise MusterError(f"{what}: {text!r} is not a duration (seconds, or with s/m/h/d)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    f = p.add_argument_group("failures (docs/sim.md: the model and its sources)")
    f.add_argument(
        "--failures",
        metavar="RATE",
        help="inject node failures: RATE per node-day (0.004, or 4/1000 for 4 per 1,000 node-days)",
    )
    f.add_argument("--repair-time", default="4h", metavar="TIME", help="a failed node's downtime (4h)")
    f.add_argument(
        "--checkpoint-interval",
        default="1h",
        metavar="TIME",
        help="work between a job's checkpoints (1h; 0: none)",
    )
    f.add_argument("--checkpoint-cost", default="60s", metavar="TIME", help="wall time per checkpoint (60s)")
    f.add_argument("--restart-overhead", default="5m", metavar="TIME", help="a restarted attempt's start-up cost (5m)")
    f.add_argument("--failure-causes", metavar="NAME=SHARE,..", help="cause mix to count, e.g. gpu=0.59,other=0.41")
    f.add_argument("--expedite", action="store_true", help="a job hit by a failure requeues at the front")
    f.add_argument("--seed", type=int, default=1, metavar="N", help="random seed of the failures (1)")
    f.add_argument(
        "--spares",
        type=int,
        metavar="N",
        help="hold N nodes out of scheduling as spares: a failed node under a running job is replaced by "
        "one in place instead of requeueing the job (0)",
    )
    f.add_argument(
        "--checkpoint-sweep",
        type=int,
        metavar="NODES",
        help="also find the goodput-best checkpoint interval for a job of NODES nodes (Monte Carlo, "
        "next to Young's and Daly's optimum)",
    )
    f.add_argument("--sweep-work", default="7d", metavar="TIME", help="the swept job's work (7d)")


def _seconds(text: str, option: str, zero_ok: bool = True) -> float:
    value = duration(text, option)
    if value < 0 or (value == 0 and not zero_ok):
        raise MusterError(f"{option}: must be {'at least 0' if zero_ok else 'above 0'}")
    return value


def model_from(args: argparse.Namespace) -> FailureModel | None:
    """The failure model the options ask for; None without ``--failures``."""
    if args.spares is not None and args.spares < 0:
        raise MusterError("--spares: must be at least 0")
    if args.failures is None:
        if args.spares:
            raise MusterError("--spares needs --failures (spares replace failed nodes)")
        if args.checkpoint_sweep is not None:
            raise MusterError("--checkpoint-sweep needs --failures (the failure rate it is swept for)")
        return None
    try:
        rate = parse_rate(args.failures)
        causes = parse_causes(args.failure_causes) if args.failure_causes else {"node": 1.0}
    except ValueError as e:
        raise MusterError(f"--failures: {e}") from None
    return FailureModel(
        rate=rate,
        repair=_seconds(args.repair_time, "--repair-time"),
        interval=_seconds(args.checkpoint_interval, "--checkpoint-interval"),
        cost=_seconds(args.checkpoint_cost, "--checkpoint-cost"),
        restart=_seconds(args.restart_overhead, "--restart-overhead"),
        expedite=args.expedite,
        causes=causes,
        seed=args.seed,
        spares=args.spares or 0,
    )


def sweep_from(args: argparse.Namespace, model: FailureModel) -> dict[str, Any] | None:
    if args.checkpoint_sweep is None:
        return None
    if args.checkpoint_sweep < 1:
        raise MusterError("--checkpoint-sweep: the job size must be at least 1 node")
    work = _seconds(args.sweep_work, "--sweep-work", zero_ok=False)
    return CheckpointSweep(model, args.checkpoint_sweep, work).sweep()


def _h(seconds: float) -> str:
    return f"{seconds / 3600:,.1f}"


def format_goodput(runs: Sequence[tuple[str, dict[str, Any]]], unit: str, grid: Callable[..., str]) -> str:
    """Goodput per run, then by job size (``unit``-hours: processor- or GPU-hours)."""
    rows = []
    for key, title in (
        ("node_failures", "node failures"),
        ("replacements", "replaced by a spare"),
        ("interrupted_jobs", "jobs interrupted"),
        ("restarts", "restarts"),
        ("allocated", f"allocated ({unit}-h)"),
        ("productive", f"productive ({unit}-h)"),
        ("lost", f"lost since checkpoint ({unit}-h)"),
        ("checkpoint_overhead", f"checkpoint overhead ({unit}-h)"),
        ("restart_overhead", f"restart overhead ({unit}-h)"),
        ("goodput", "goodput"),
        ("requeue_wait", f"queue wait after failures ({unit}-h)"),
        ("median_recovery_s", "median failure -> running (s)"),
        ("ettr", "ETTR (goodput, waits counted)"),
    ):
        if all(key not in g for _, g in runs):
            continue
        row = [title]
        for _, g in runs:
            v = g.get(key)
            if key in ("goodput", "ettr"):
                row.append(f"{100 * v:.2f}%" if isinstance(v, float) and v == v else "-")
            elif key in ("node_failures", "replacements", "interrupted_jobs", "restarts"):
                row.append("-" if v is None else f"{int(v):,}")
            elif key == "median_recovery_s":
                row.append(f"{v:,.0f}" if isinstance(v, float) and v == v else "-")
            else:
                row.append("-" if v is None else _h(float(v)))
        rows.append(row)
    out = [grid(["goodput", *[label for label, _ in runs]], rows)]
    sizes: list[str] = []
    for _, g in runs:
        for c in g.get("by_size", []):
            if c["size"] not in sizes:
                sizes.append(c["size"])
    rows = []
    for size in sorted(sizes, key=lambda s: int(s.split("-")[-1])):
        row = [size]
        for _, g in runs:
            c = next((c for c in g.get("by_size", []) if c["size"] == size), None)
            row.append("-" if c is None else f"{c['jobs']:,} / {c['restarts']:,} / {100 * c['goodput']:.2f}%")
        rows.append(row)
    out.append(grid(["size", *[f"{label}: jobs / restarts / goodput" for label, _ in runs]], rows))
    return "\n\n".join(out)


def format_sweep(s: dict[str, Any]) -> str:
    def line(name: str, interval: float, goodput: float) -> str:
        return f"  {name:<22} {interval / 60:10.1f} min   goodput {100 * goodput:6.2f}%"

    return "\n".join(
        [
            f"checkpoint interval for a {s['nodes']}-node job ({s['work_s'] / 86400:g} days of work, "
            f"job MTBF {s['job_mtbf_s'] / 3600:,.1f} h, checkpoint cost {s['checkpoint_cost_s']:g} s):",
            line("best (Monte Carlo)", s["best_interval_s"], s["best_goodput"]),
            line("Young sqrt(2*M*C)", s["young_interval_s"], s["young_goodput"]),
            line("Daly sqrt(2*M*C)-C", s["daly_interval_s"], s["daly_goodput"]),
            f"  {'no checkpoints':<22} {'':>10}       goodput {100 * s['no_checkpoint_goodput']:6.2f}%",
        ]
    )
