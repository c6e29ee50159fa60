"""What a replay is judged by, with every definition stated (docs/sim.md repeats them).

For the jobs replayed (each with submit, start and end; size in the trace's unit: processors
or GPUs; capacity in the same unit):

* wait = start - submit; reported as mean, median (mean of the two middle values for an even
  count), p95 (nearest rank: the ceil(0.95 n)-th smallest) and max.
* bounded slowdown = max(1, (wait + run) / max(run, tau)) with tau = 10 s and run = end -
  start (the time the job actually ran: shorter than its trace run time when it was killed
  at its limit); reported as the mean over jobs.
* JCT (job completion time) = end - submit; mean.
* utilisation = sum(run x size) / (capacity x (last end - first start)): the busy share of
  the machine between the first start and the last end (the denominator the Parallel
  Workloads Archive's README uses). ``utilisation_from_submit`` divides by (last end - first
  submit) instead, as some papers do.
* makespan = last end - first submit.
* offered load (a property of the trace and the machine, not of the policy) =
  sum(trace run time x size) / (capacity x (last submit - first submit)). On an initially
  idle machine where every job fits, utilisation <= offered load.
* backfilled = jobs whose start the scheduler marked as a backfill start; killed = jobs
  ended at their time limit.
* planned = jobs that some pass gave a planned start (a reservation in the plan);
  late = those that started more than a second after the *first* start planned for them
  (a promise broken), with the mean and largest slip (start - first planned start); and
  late vs earliest = those that started more than a second after the earliest start any
  pass planned for them (a plan that moved later at some point, even if it came back).

Jobs are also broken down by size class: powers of two (1, 2, 3-4, 5-8, 9-16, ...).

With a topology (``--topology``), fragmentation (``topology_metrics``): over the jobs
that ran on more than one node, the mean number of units (leaf switches, or base blocks)
each spans, and the share placed within one unit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from muster.sched.topology import Topology
from muster.sim.engine import JobOutcome
from muster.sim.traces import TraceJob

__all__ = [
    "TAU",
    "compute",
    "format_table",
    "grid",
    "offered_load",
    "percentile",
    "recorded_outcomes",
    "size_class",
    "topology_metrics",
]

TAU = 10.0
LATE = 1.0  # a start more than this after its first planned start broke the promise


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (``q`` in (0, 100])."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def _median(sorted_values: Sequence[float]) -> float:
    n = len(sorted_values)
    if n == 0:
        return math.nan
    mid = n // 2
    return sorted_values[mid] if n % 2 else (sorted_values[mid - 1] + sorted_values[mid]) / 2


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def bounded_slowdown(wait: float, run: float, tau: float = TAU) -> float:
    return max(1.0, (wait + run) / max(run, tau))


def size_class(size: int) -> str:
    """``1``, ``2``, ``3-4``, ``5-8``, ``9-16``, ...: the power-of-two bin of ``size``."""
    if size <= 2:
        return str(max(size, 1))
    hi = 1 << (size - 1).bit_length()
    return f"{hi // 2 + 1}-{hi}"


def _class_order(label: str) -> int:
    return int(label.split("-")[-1])


def compute(outcomes: Sequence[JobOutcome], capacity: int, tau: float = TAU) -> dict[str, Any]:
    """Every metric of the module docstring for one replay, as a JSON-able dict."""
    if not outcomes:
        return {"jobs": 0}
    waits = sorted(o.start - o.submit for o in outcomes)
    bslds = [bounded_slowdown(o.start - o.submit, o.end - o.start, tau) for o in outcomes]
    jcts = [o.end - o.submit for o in outcomes]
    first_submit = min(o.submit for o in outcomes)
    first_start = min(o.start for o in outcomes)
    last_end = max(o.end for o in outcomes)
    work = math.fsum((o.end - o.start) * o.size for o in outcomes)
    span = last_end - first_start
    span_submit = last_end - first_submit
    by_class: dict[str, list[JobOutcome]] = {}
    for o in outcomes:
        by_class.setdefault(size_class(o.size), []).append(o)
    classes = []
    for label in sorted(by_class, key=_class_order):
        group = by_class[label]
        w = sorted(o.start - o.submit for o in group)
        classes.append(
            {
                "size": label,
                "jobs": len(group),
                "wait_mean": _mean(w),
                "wait_median": _median(w),
                "bounded_slowdown_mean": _mean(
                    [bounded_slowdown(o.start - o.submit, o.end - o.start, tau) for o in group]
                ),
                "jct_mean": _mean([o.end - o.submit for o in group]),
                "backfilled": sum(o.backfilled for o in group),
            }
        )
    slips = [o.start - o.first_plan for o in outcomes if o.first_plan is not None]
    late = [x for x in slips if x > LATE]
    late_best = sum(o.start - o.earliest_plan > LATE for o in outcomes if o.earliest_plan is not None)
    return {
        "jobs": len(outcomes),
        "utilisation": work / (capacity * span) if span > 0 and capacity else math.nan,
        "utilisation_denominator": "capacity x (last end - first start)",
        "utilisation_from_submit": work / (capacity * span_submit) if span_submit > 0 and capacity else math.nan,
        "makespan": last_end - first_submit,
        "first_submit": first_submit,
        "first_start": first_start,
        "last_end": last_end,
        "wait_mean": _mean(waits),
        "wait_median": _median(waits),
        "wait_p95": percentile(waits, 95),
        "wait_max": waits[-1],
        "bounded_slowdown_mean": _mean(bslds),
        "bounded_slowdown_tau": tau,
        "jct_mean": _mean(jcts),
        "backfilled": sum(o.backfilled for o in outcomes),
        "killed_at_limit": sum(o.killed for o in outcomes),
        "planned": len(slips),
        "late_vs_first_plan": len(late),
        "slip_mean": _mean(late) if late else None,
        "slip_max": max(late) if late else None,
        "late_vs_earliest_plan": late_best,
        "by_size": classes,
    }


def topology_metrics(outcomes: Sequence[JobOutcome], topology: Topology) -> dict[str, Any]:
    """Fragmentation of the placements (module doc): multi-node jobs, units per such job
    (mean), share within one unit; ``topology_unit`` names the unit."""
    spans = [topology.units_of(list(o.nodes)) for o in outcomes if len(o.nodes) > 1]
    return {
        "topology_unit": "block" if topology.kind == "block" else "leaf switch",
        "multi_node_jobs": len(spans),
        "units_per_multi_node_job": _mean([float(n) for n in spans]) if spans else None,
        "multi_node_within_one_unit": sum(n == 1 for n in spans) / len(spans) if spans else None,
    }


def offered_load(jobs: Iterable[TraceJob], capacity: int) -> float:
    """sum(run x size) / (capacity x submit span); NaN for a single instant of submissions."""
    jobs = list(jobs)
    if not jobs or capacity <= 0:
        return math.nan
    span = max(j.submit for j in jobs) - min(j.submit for j in jobs)
    work = math.fsum(j.run * j.size for j in jobs)
    return work / (capacity * span) if span > 0 else math.nan


def recorded_outcomes(jobs: Sequence[TraceJob]) -> list[JobOutcome]:
    """The schedule the trace itself recorded (SWF wait times), for setting beside a replay.

    Jobs without a recorded wait are left out."""
    out = []
    for i, j in enumerate(jobs):
        if j.recorded_wait is None:
            continue
        start = j.submit + j.recorded_wait
        out.append(JobOutcome(i + 1, j.trace_id, j.size, j.submit, start, start + j.run, 0))
    return out


# --- the printed table ---------------------------------------------------------------------------

_ROWS = (
    ("jobs", "jobs", "{:,.0f}"),
    ("utilisation", "utilisation (first start..last end)", "{:.3f}"),
    ("utilisation_from_submit", "utilisation (first submit..last end)", "{:.3f}"),
    ("makespan", "makespan (s)", "{:,.0f}"),
    ("wait_mean", "wait mean (s)", "{:,.0f}"),
    ("wait_median", "wait median (s)", "{:,.0f}"),
    ("wait_p95", "wait p95 (s)", "{:,.0f}"),
    ("wait_max", "wait max (s)", "{:,.0f}"),
    ("bounded_slowdown_mean", "bounded slowdown mean (tau 10 s)", "{:,.2f}"),
    ("jct_mean", "JCT mean (s)", "{:,.0f}"),
    ("backfilled", "backfilled jobs", "{:,.0f}"),
    ("killed_at_limit", "killed at time limit", "{:,.0f}"),
    ("planned", "jobs given a planned start", "{:,.0f}"),
    ("late_vs_first_plan", "started after first planned start", "{:,.0f}"),
    ("slip_mean", "  mean slip of those (s)", "{:,.0f}"),
    ("slip_max", "  largest slip (s)", "{:,.0f}"),
    ("late_vs_earliest_plan", "started after earliest planned start", "{:,.0f}"),
)


def _fmt(spec: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return spec.format(value)


def grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for r in [header, *rows]:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_table(runs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """The metrics of one or several runs side by side, then wait and slowdown by size."""
    header = ["metric", *[label for label, _ in runs]]
    rows = [[title, *[_fmt(spec, m.get(key)) for _, m in runs]] for key, title, spec in _ROWS]
    unit = next((m["topology_unit"] for _, m in runs if m.get("topology_unit")), None)
    if unit is not None:
        for key, title, spec in (
            ("multi_node_jobs", "multi-node jobs", "{:,.0f}"),
            (
                "units_per_multi_node_job",
                f"  {unit}es per job (mean)" if unit.endswith("h") else f"  {unit}s per job (mean)",
                "{:.2f}",
            ),
            ("multi_node_within_one_unit", f"  share within one {unit}", "{:.3f}"),
        ):
            rows.append([title, *[_fmt(spec, m.get(key)) for _, m in runs]])
    out = [grid(header, rows)]
    labels = sorted({c["size"] for _, m in runs for c in m.get("by_size", [])}, key=_class_order)
    if labels:
        header = ["size", *[f"{label}: jobs / wait mean / bsld" for label, _ in runs]]
        rows = []
        for size in labels:
            row = [size]
            for _, m in runs:
                c = next((c for c in m.get("by_size", []) if c["size"] == size), None)
                row.append(
                    "-" if c is None else f"{c['jobs']:,} / {c['wait_mean']:,.0f} s / {c['bounded_slowdown_mean']:,.1f}"
                )
            rows.append(row)
        out.append(grid(header, rows))
    return "\n\n".join(out)
