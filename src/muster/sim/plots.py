"""Pictures of replays, written as PNG files with matplotlib (imported only when drawing).

* ``utilisation.png``: busy share of the machine and queue length over time, time-averaged
  over equal bins, one line per run (``--compare`` overlays policies);
* ``wait_cdf.png``: the cumulative distribution of waits, one line per run;
* ``gantt-<run>.png``: the jobs running during a window (default: two days from the
  median submission, a stretch of steady state), one row per processor or GPU.

The series behind the pictures (``timeline``, ``binned``, ``lanes``) are plain functions, tested
without matplotlib.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Sequence
from typing import Any

from muster.core.extras import require
from muster.sim.engine import JobOutcome

__all__ = ["binned", "lanes", "timeline", "write_plots"]

DAY = 86400.0


def timeline(outcomes: Sequence[JobOutcome]) -> tuple[list[float], list[int], list[int]]:
    """Step functions from the outcomes: at each change time, busy units and queued jobs
    (each value holds until the next time)."""
    deltas: dict[float, list[int]] = {}
    for o in outcomes:
        deltas.setdefault(o.submit, [0, 0])[1] += 1
        d = deltas.setdefault(o.start, [0, 0])
        d[0] += o.size
        d[1] -= 1
        deltas.setdefault(o.end, [0, 0])[0] -= o.size
    times, busy, queued = [], [], []
    b = q = 0
    for t in sorted(deltas):
        b += deltas[t][0]
        q += deltas[t][1]
        times.append(t)
        busy.append(b)
        queued.append(q)
    return times, busy, queued


def binned(
    times: Sequence[float], values: Sequence[float], start: float, end: float, bins: int
) -> tuple[list[float], list[float]]:
    """Time-weighted mean of a step function over ``bins`` equal bins of [start, end).

    Returns the bins' centres and means. Before the first time the function is 0."""
    width = (end - start) / bins if bins > 0 else 0.0
    if width <= 0:
        return [], []
    area = [0.0] * bins
    n = len(times)
    for i in range(n):
        seg_start = max(times[i], start)
        seg_end = min(times[i + 1] if i + 1 < n else end, end)
        if seg_end <= seg_start or values[i] == 0:
            continue
        first = int((seg_start - start) // width)
        last = min(bins - 1, int((seg_end - start) // width))
        for k in range(first, last + 1):
            lo = max(seg_start, start + k * width)
            hi = min(seg_end, start + (k + 1) * width)
            if hi > lo:
                area[k] += values[i] * (hi - lo)
    centres = [start + (k + 0.5) * width for k in range(bins)]
    return centres, [a / width for a in area]


def _parse_window(window: tuple[float, float] | None, outcomes: Sequence[JobOutcome]) -> tuple[float, float]:
    if window is not None:
        return window
    submits = sorted(o.submit for o in outcomes)
    middle = submits[len(submits) // 2]
    return middle, middle + 2 * DAY


def write_plots(
    runs: Sequence[tuple[str, Sequence[JobOutcome]]],
    capacity: int,
    out_dir: str,
    *,
    unit: str = "procs",
    gantt_window: tuple[float, float] | None = None,
) -> list[str]:
    """Draw every picture for ``runs`` (label, outcomes) into ``out_dir``; return the paths."""
    require("matplotlib", "muster sim --plot").use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    runs = [(label, outs) for label, outs in runs if outs]
    if not runs:
        return []
    written = []
    start = min(min(o.submit for o in outs) for _, outs in runs)
    end = max(max(o.end for o in outs) for _, outs in runs)
    span = end - start
    scale, tunit = (DAY, "days") if span > 3 * DAY else (3600.0, "hours")
    bins = 400

    fig, (ax_u, ax_q) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    for label, outs in runs:
        times, busy, queued = timeline(outs)
        xs, util = binned(times, [b / capacity for b in busy], start, end, bins)
        _, queue = binned(times, queued, start, end, bins)
        xs = [(x - start) / scale for x in xs]
        ax_u.plot(xs, util, label=label, linewidth=1)
        ax_q.plot(xs, queue, label=label, linewidth=1)
    ax_u.set_ylabel(f"utilisation ({unit} busy / {capacity})")
    ax_u.set_ylim(0, 1.05)
    ax_q.set_ylabel("queued jobs (time mean)")
    ax_q.set_xlabel(f"time since first submission ({tunit}; {bins} bins of {span / bins / 3600:.1f} h)")
    ax_u.legend(loc="upper right")
    ax_u.set_title("Utilisation and queue length over time")
    fig.tight_layout()
    written.append(_save(fig, out_dir, "utilisation.png"))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, outs in runs:
        waits = sorted(o.start - o.submit for o in outs)
        n = len(waits)
        ax.step([max(w, 1.0) for w in waits], [(i + 1) / n for i in range(n)], where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("wait (s, log scale; waits under 1 s drawn at 1 s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("Wait time CDF")
    fig.tight_layout()
    written.append(_save(fig, out_dir, "wait_cdf.png"))
    plt.close(fig)

    for label, outs in runs:
        path = _gantt(plt, label, outs, gantt_window, capacity, unit, out_dir)
        if path:
            written.append(path)
    return written


def lanes(outcomes: Sequence[JobOutcome], capacity: int) -> dict[int, list[int]]:
    """A drawing of the machine as ``capacity`` unit rows (processors or GPUs): each job gets
    the lowest free rows when it starts (ends first at equal times). For display only: the
    scheduler's real placement is per node, and the rows a job gets need not be adjacent."""
    events = sorted([(o.end, 0, i) for i, o in enumerate(outcomes)] + [(o.start, 1, i) for i, o in enumerate(outcomes)])
    free = list(range(capacity))  # a heap: lowest row first
    out: dict[int, list[int]] = {}
    for _, kind, i in events:
        o = outcomes[i]
        if kind == 0:
            for r in out.get(o.job_id, ()):
                heapq.heappush(free, r)
        else:
            take = min(o.size, len(free))
            out[o.job_id] = [heapq.heappop(free) for _ in range(take)]
    return out


def _gantt(
    plt: Any,
    label: str,
    outs: Sequence[JobOutcome],
    window: tuple[float, float] | None,
    capacity: int,
    unit: str,
    out_dir: str,
) -> str | None:
    lo, hi = _parse_window(window, outs)
    rows = lanes(outs, capacity)
    shown = [o for o in outs if o.start < hi and o.end > lo and o.end > o.start]
    if not shown:
        return None
    bars: dict[int, list[tuple[float, float]]] = {}
    colours: dict[int, list[int]] = {}
    scale = 3600.0
    for o in shown:
        s, e = max(o.start, lo), min(o.end, hi)
        for r in rows.get(o.job_id, ()):
            bars.setdefault(r, []).append(((s - lo) / scale, (e - s) / scale))
            colours.setdefault(r, []).append(o.job_id)
    fig, ax = plt.subplots(figsize=(12, max(4.0, min(0.05 * capacity + 2, 14))))
    cmap = plt.get_cmap("tab20")
    for r, segs in bars.items():
        ax.broken_barh(segs, (r, 1), facecolors=[cmap(j % 20) for j in colours[r]], linewidth=0)
    ax.set_ylim(0, capacity)
    ax.set_xlim(0, (hi - lo) / scale)
    ax.set_xlabel(f"hours from t = {lo:,.0f} s (trace time)")
    ax.set_ylabel(f"{unit} (rows assigned for drawing)")
    ax.set_title(f"{label}: {len(shown)} jobs in the window (colour = job)")
    fig.tight_layout()
    path = _save(fig, out_dir, f"gantt-{_slug(label)}.png")
    plt.close(fig)
    return path


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text) or "run"


def _save(fig: Any, out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    return path
