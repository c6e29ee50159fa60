"""``muster sim TRACE``: replay a workload trace through muster's scheduler.

Reads the trace, builds the cluster and one scheduler configuration per policy, replays,
then prints a table of metrics (and writes JSON and pictures when asked). Errors a user can
fix (unreadable trace, bad option) print ``muster sim: error: ...`` and exit 1 (2 for
command-line syntax, as argparse does).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from muster.core.config import ConfigError, parse_config
from muster.core.errors import MusterError
from muster.core.extras import require
from muster.core.topoconf import parse_topology, topology_path, wants_topology
from muster.sched.config import part_limits_mode
from muster.sched.topology import Topology
from muster.sim import failcli
from muster.sim.cluster import Cluster, ClusterError, cluster_from_config, uniform_cluster
from muster.sim.engine import Estimate, JobOutcome, Simulation, replayable
from muster.sim.failcli import duration
from muster.sim.failures import goodput_metrics, spares_metrics
from muster.sim.metrics import (
    compute,
    format_table,
    grid,
    offered_load,
    recorded_outcomes,
    size_class,
    topology_metrics,
)
from muster.sim.policies import POLICIES, build_settings, job_order, sched_config
from muster.sim.traces import FORMATS, Trace, read_trace

PROG = "muster sim"
RECORDED = "recorded"  # the schedule the trace itself recorded (SWF wait times)
MAX_JOB_TEST = 1_000_000  # bf_max_job_test's range in Slurm: 1 to 1,000,000


class UsageError(MusterError):
    """A command-line value that does not make sense."""


def parse_window(text: str, what: str = "--window") -> tuple[float, float]:
    """``START:END`` in trace seconds (``s``/``m``/``h``/``d`` suffixes; either end may be empty)."""
    start_text, sep, end_text = text.partition(":")
    if not sep:
        raise UsageError(f"{what}: expected START:END, got {text!r}")
    start = duration(start_text, what) if start_text.strip() else 0.0
    end = duration(end_text, what) if end_text.strip() else math.inf
    if end <= start:
        raise UsageError(f"{what}: the end ({end_text}) must come after the start ({start_text})")
    return start, end


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Replay a workload trace (SWF or a GPU job CSV) through muster's scheduler "
        "on a virtual clock and report utilisation, waits, bounded slowdown and JCT.",
    )
    p.add_argument("trace", metavar="TRACE", help="trace file: .swf[.gz], .csv, or a tarball of CSVs")
    t = p.add_argument_group("trace")
    t.add_argument("--format", choices=FORMATS, help="trace format (default: detected from the content)")
    t.add_argument("--cluster", metavar="NAME", help="which CSV of a tarball to read (e.g. cluster04)")
    t.add_argument("--jobs", type=int, metavar="K", help="replay only the first K jobs (after --window)")
    t.add_argument(
        "--window",
        metavar="START:END",
        help="replay only jobs submitted in [START, END) trace seconds; s/m/h/d suffixes",
    )
    t.add_argument(
        "--skip-bad-lines", action="store_true", help="skip malformed lines (each is reported) instead of failing"
    )
    c = p.add_argument_group("cluster (default: the SWF header's MaxNodes/MaxProcs)")
    c.add_argument("--nodes", type=int, metavar="N")
    c.add_argument("--cpus-per-node", type=int, metavar="C")
    c.add_argument("--gpus-per-node", type=int, metavar="G", help="default 8 for GPU traces")
    s = p.add_argument_group("scheduler")
    s.add_argument(
        "--conf", metavar="FILE", help="slurm.conf-syntax file: its scheduling keys (and nodes, unless --nodes)"
    )
    s.add_argument(
        "--topology",
        metavar="FILE",
        help="topology.conf (SwitchName= or BlockName= lines over the cluster's nodes: n1..nN, or those of "
        "--conf): place jobs by switches or blocks and report fragmentation (default: the topology.conf "
        "beside --conf when its TopologyPlugin names one)",
    )
    s.add_argument(
        "--policy",
        choices=POLICIES,
        help="fcfs, easy (default), backfill (Slurm's, depth bf_max_job_test), conservative, "
        "or sjf (shortest time limit first, with EASY backfilling)",
    )
    s.add_argument(
        "--compare",
        metavar="P1,P2,..",
        help=f"replay several policies and overlay them ({', '.join(POLICIES)}, {RECORDED})",
    )
    for name in ("age", "fairshare", "job-size", "partition", "qos"):
        s.add_argument(
            f"--priority-weight-{name}",
            type=int,
            metavar="W",
            help=f"PriorityWeight{name.title().replace('-', '')} (implies priority/multifactor)",
        )
    s.add_argument("--priority-max-age", metavar="TIME", help="PriorityMaxAge (Slurm time format)")
    s.add_argument("--priority-favor-small", action="store_true", help="PriorityFavorSmall=YES")
    s.add_argument(
        "--bf-max-job-test",
        type=int,
        metavar="N",
        help="backfill depth: how many blocked jobs get a planned start, 1 to 1,000,000 "
        "(bf_max_job_test; overrides the policy's: easy is 1)",
    )
    r = p.add_argument_group("replay")
    r.add_argument(
        "--estimate",
        default="requested",
        metavar="requested|actual|KxActual",
        help="runtime estimate backfill uses (the job's time limit); default requested",
    )
    r.add_argument(
        "--allow-overrun", action="store_true", help="let jobs run past their time limit (default: killed at the limit)"
    )
    failcli.add_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="FILE|-", help="write every figure as JSON (- for stdout)")
    o.add_argument("--plot", metavar="DIR", help="write PNG pictures into DIR (needs matplotlib)")
    o.add_argument(
        "--gantt-window",
        metavar="START:END",
        help="window of the Gantt picture in trace seconds (default: 2 days from the median submit)",
    )
    o.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )
    return p


# --- progress ---------------------------------------------------------------------------------


class ProgressBar:
    """``label [#####.....]  45%  12,345/28,481 jobs  day 123.4`` on one stderr line."""

    def __init__(self, label: str, stream: TextIO, width: int = 30) -> None:
        self.label = label
        self.stream = stream
        self.width = width
        self._last = -1

    def __call__(self, done: int, total: int, sim_time: float) -> None:
        permille = 1000 * done // total if total else 1000
        if permille == self._last:
            return
        self._last = permille
        filled = self.width * permille // 1000
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(
            f"\r{self.label:>12} [{bar}] {permille / 10:5.1f}%  {done:,}/{total:,} jobs  day {sim_time / 86400:,.1f}"
        )
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


# --- the command ------------------------------------------------------------------------------


def _knobs(args: argparse.Namespace) -> dict[str, str]:
    knobs: dict[str, str] = {}
    for name in ("age", "fairshare", "job_size", "partition", "qos"):
        value = getattr(args, f"priority_weight_{name}")
        if value is not None:
            if value < 0:
                raise UsageError(f"--priority-weight-{name.replace('_', '-')} must not be negative")
            key = "PriorityWeight" + {"job_size": "JobSize", "qos": "QOS", "fairshare": "Fairshare"}.get(
                name, name.title()
            )
            knobs[key] = str(value)
    if args.priority_max_age:
        knobs["PriorityMaxAge"] = args.priority_max_age
    if args.priority_favor_small:
        knobs["PriorityFavorSmall"] = "YES"
    return knobs


def _select(trace: Trace, args: argparse.Namespace) -> list[Any]:
    jobs = trace.jobs
    if args.window:
        start, end = parse_window(args.window)
        jobs = [j for j in jobs if start <= j.submit < end]
    if args.jobs is not None:
        if args.jobs <= 0:
            raise UsageError("--jobs must be a positive number")
        jobs = jobs[: args.jobs]
    if not jobs:
        raise UsageError("no job of the trace falls in the selected --window/--jobs")
    return jobs


def _topology(args: argparse.Namespace, conf: Any) -> tuple[str, str] | None:
    """(text, path) of the topology: --topology, else topology.conf beside --conf when its
    TopologyPlugin wants one (as the controller reads it), else None."""
    path = args.topology
    what = "--topology"
    if path is None and conf is not None and wants_topology(conf):
        path, what = topology_path(args.conf), f"--conf: TopologyPlugin={conf.get('TopologyPlugin')} needs"
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except OSError as e:
        raise UsageError(f"{what}: cannot read {path}: {e.strerror or e}") from None


def _cluster(trace: Trace, args: argparse.Namespace, conf: Any, topology: tuple[str, str] | None = None) -> Cluster:
    if conf is not None and conf.nodes and args.nodes is None:
        cluster = cluster_from_config(conf)
    else:
        cluster = uniform_cluster(trace.unit, trace.header, args.nodes, args.cpus_per_node, args.gpus_per_node)
    if topology is not None:  # the same parser and placement as the controller's
        names = [v.name for v in cluster.nodes]
        cluster.topology = Topology(parse_topology(topology[0], topology[1], names), names)
    return cluster


def _clean(value: Any) -> Any:
    """NaN and infinity are not JSON: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        estimate = Estimate.parse(args.estimate)
    except ValueError as e:
        raise UsageError(str(e)) from None
    labels = [p.strip() for p in args.compare.split(",") if p.strip()] if args.compare else []
    for label in labels:
        if label not in POLICIES and label != RECORDED:
            raise UsageError(f"--compare: unknown policy {label!r} (choose from {', '.join(POLICIES)}, {RECORDED})")
    if args.compare and args.policy:
        raise UsageError("give either --policy or --compare, not both")
    depth = args.bf_max_job_test
    if depth is not None and not 1 <= depth <= MAX_JOB_TEST:
        # Slurm accepts 1..1,000,000 for bf_max_job_test; the scheduler would silently
        # keep its default (500) for anything else.
        raise UsageError(
            f"--bf-max-job-test {depth}: must be between 1 and {MAX_JOB_TEST:,} (how many "
            "blocked jobs get a planned start; --policy fcfs plans none and backfills nothing)"
        )
    conf = None
    if args.conf:
        try:
            with open(args.conf, encoding="utf-8") as f:
                conf = parse_config(f.read(), args.conf)
        except OSError as e:
            raise UsageError(f"--conf: cannot read {args.conf}: {e.strerror or e}") from None
        for warning in conf.warnings:
            err.write(f"{PROG}: warning: {warning}\n")
        modes = [conf.settings.get("PreemptMode", "")] + [p.params.get("PreemptMode", "") for p in conf.partitions]
        if any("SUSPEND" in m.upper() for m in modes):  # it would end victims instead of freezing them
            raise UsageError(f"--conf: {args.conf}: PreemptMode=SUSPEND is not modelled by the simulator")
    if not labels:
        labels = [args.policy or ("easy" if conf is None else "conf")]
    topology = _topology(args, conf)
    failures = failcli.model_from(args)

    if args.plot:  # before a long replay, not after it
        require("matplotlib", "muster sim --plot")
    trace = read_trace(args.trace, args.format, args.cluster, args.skip_bad_lines)
    for line in trace.bad_lines[:20]:
        err.write(f"{PROG}: skipped malformed line: {line}\n")
    if len(trace.bad_lines) > 20:
        err.write(f"{PROG}: ... and {len(trace.bad_lines) - 20} more malformed lines\n")
    selected = _select(trace, args)
    try:
        cluster = _cluster(trace, args, conf, topology)
    except ClusterError as e:
        raise UsageError(str(e)) from None
    enforce = part_limits_mode(conf.get("EnforcePartLimits") if conf is not None else None)
    jobs, refused = replayable(selected, trace.unit, cluster, estimate, enforce)
    for why, count in refused.most_common():
        err.write(f"{PROG}: warning: {count:,} jobs not replayed, refused at submission: {why}\n")
    if not jobs:
        raise UsageError("no job of the trace can run on this cluster")
    capacity = cluster.capacity(trace.unit)
    if capacity <= 0:
        raise UsageError(f"the cluster has no {trace.unit} to run this trace on")
    if estimate.kind == "requested":
        unknown = sum(j.estimate is None for j in jobs)
        if unknown:
            err.write(
                f"{PROG}: note: {unknown:,} of {len(jobs):,} jobs have no requested time in the "
                "trace; their estimate is their actual run time\n"
            )
    epoch = float(trace.header_int("UnixStartTime") or 0)
    progress = args.progress if args.progress is not None else err.isatty()
    max_limit = max(estimate.limit(j) for j in jobs)

    report: dict[str, Any] = {
        "trace": {
            "name": trace.name,
            "format": trace.format,
            "unit": trace.unit,
            "records": trace.records,
            "skipped": dict(trace.skipped),
            "malformed_lines": len(trace.bad_lines),
            "selected": len(selected),
            "refused_at_submit": dict(refused),
            "replayed": len(jobs),
        },
        "cluster": cluster.describe(),
        "capacity": capacity,
        "offered_load": offered_load(jobs, capacity),
        "estimate": str(estimate),
        "allow_overrun": args.allow_overrun,
        "failures": failures.describe() if failures is not None else None,
        "runs": [],
    }
    if failures is not None and failures.spares:
        if failures.spares >= len(cluster.nodes):
            raise UsageError(f"--spares {failures.spares}: the machine has only {len(cluster.nodes)} nodes")
        if conf is not None and (conf.get("PreemptType") or "preempt/none").lower() != "preempt/none":
            raise UsageError("--spares with preemption is not modelled: give one or the other")
    if failures is not None and len(cluster.nodes) < 2:
        err.write(
            f"{PROG}: note: --failures on a one-node machine: each failure stops everything "
            "(give --nodes and --cpus-per-node for a machine of separate nodes)\n"
        )
    runs: list[tuple[str, list[JobOutcome]]] = []
    for label in labels:
        if label == RECORDED:
            outcomes = recorded_outcomes(jobs)
            if not outcomes:
                raise UsageError("--compare recorded: this trace records no wait times")
            entry: dict[str, Any] = {"label": label, "settings": None}
        else:
            settings = build_settings(
                None if label == "conf" else label,
                dict(conf.settings) if conf is not None else None,
                max_time_limit=max_limit,
                knobs=_knobs(args),
                bf_max_job_test=args.bf_max_job_test,
            )
            sim = Simulation(
                jobs,
                trace.unit,
                cluster,
                sched_config(settings),
                estimate=estimate,
                allow_overrun=args.allow_overrun,
                epoch=epoch,
                label=label,
                order=job_order(label),
                progress=ProgressBar(label, err) if progress else None,
                failures=failures,
            )
            result = sim.run()
            outcomes = result.outcomes
            entry = {
                "label": label,
                "settings": settings,
                "passes": result.passes,
                "skipped_passes": result.skipped_passes,
                "never_started": len(result.never_started),
                "preemptions": result.preemptions,
                "preempted_lost_hours": round(result.preempted_lost_hours, 3),
            }
            if result.preemptions:
                err.write(
                    f"{PROG}: {label}: {result.preemptions} runs preempted, "
                    f"{result.preempted_lost_hours:,.1f} {trace.unit}-hours of work lost\n"
                )
            if sim.node_failures is not None:
                finished = [sim.work[o.job_id - 1] for o in result.outcomes]
                entry["goodput"] = goodput_metrics(finished, sim.node_failures.counts, size_class)
                if args.spares is not None:  # the pool-sizing figures (only when --spares is given)
                    entry["goodput"].update(spares_metrics(finished, sim.replacements, sim.recoveries))
            if result.never_started:
                err.write(
                    f"{PROG}: warning: {label}: {len(result.never_started)} jobs never started "
                    f"(first: {', '.join(result.never_started[:5])}); left out of the metrics\n"
                )
            topo = cluster.topology
            cluster = _cluster(trace, args, conf)  # a fresh, idle machine for the next run
            cluster.topology = topo
        entry["metrics"] = compute(outcomes, capacity)
        if cluster.topology is not None and label != RECORDED:
            entry["metrics"].update(topology_metrics(outcomes, cluster.topology))
        report["runs"].append(entry)
        runs.append((label, outcomes))

    table_out = err if args.json == "-" else out
    table_out.write(
        f"{trace.name}: {len(jobs):,} jobs on {cluster.description} "
        f"({capacity:,} {trace.unit}); offered load {report['offered_load']:.3f}; "
        f"estimate {estimate}{'; overrun allowed' if args.allow_overrun else ''}\n\n"
    )
    table_out.write(format_table([(e["label"], e["metrics"]) for e in report["runs"]]) + "\n")
    with_goodput = [(e["label"], e["goodput"]) for e in report["runs"] if e.get("goodput")]
    if with_goodput:
        table_out.write("\n" + failcli.format_goodput(with_goodput, trace.unit, grid) + "\n")
    if failures is not None:
        sweep = failcli.sweep_from(args, failures)
        if sweep is not None:
            report["checkpoint_sweep"] = sweep
            table_out.write("\n" + failcli.format_sweep(sweep) + "\n")

    if args.json:
        text = json.dumps(_clean(report), indent=2) + "\n"
        if args.json == "-":
            out.write(text)
        else:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(text)
    if args.plot:
        from muster.sim.plots import write_plots

        window = parse_window(args.gantt_window, "--gantt-window") if args.gantt_window else None
        paths = write_plots(runs, capacity, args.plot, unit=trace.unit, gantt_window=window)
        table_out.write("\nwrote " + ", ".join(os.path.relpath(p) for p in paths) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(argv) if argv is not None else sys.argv[1:]
    if argv[:1] == ["ettr"]:  # `muster sim ettr`: one training run's ETTR under a failure mix
        from muster.sim.ettrcli import main as ettr_main

        return ettr_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return run(args, sys.stdout, sys.stderr)
    except (MusterError, ConfigError) as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    except OSError as e:
        where = f" {e.filename}" if e.filename else ""
        sys.stderr.write(f"{PROG}: error: cannot write{where}: {e.strerror or e}\n")
        return 1
    except ImportError as e:
        sys.stderr.write(f"{PROG}: error: {e.name or e} is needed for this ({e})\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return 130
