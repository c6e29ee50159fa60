"""Goodput: how much of a job's allocated time advanced its work, across all its attempts.

A job reports its progress (``muster.progress``: "step N done", "checkpoint at step N
written"); the controller keeps the running attempt's latest report in ``Job.progress``
(keys ``first`` time of the first step, ``step``/``step_time``, ``ckpt``/``ckpt_step``/
``ckpt_time``) and ``close_attempt`` turns it into one summary per ended attempt in
``Job.attempts``. ``summary`` splits each attempt's elapsed time ``E`` into

* startup ``S``: from the attempt's start to its first reported step (restart overhead:
  scheduling on the nodes, loading the checkpoint, compiling...); all of ``E`` when the
  attempt never reported a step;
* lost ``L``: for an attempt that did not complete (node failure, hang, requeue, time-out,
  failure, cancel), the time since its last checkpoint (or since its first step when it
  wrote none): that work has to be done again. 0 for a completed or running attempt,
  except for the work it redid after in-allocation replacements of its nodes (each
  replacement records the time since the last checkpoint, ``replaced_lost``);
* productive ``P = E - S - L``.

and weights them by the attempt's GPUs (the GPU-time the site paid for; a job without GPUs
is weighted by 1, i.e. wall time). Goodput is ``sum(P*g) / sum(E*g)``. A job that never
reported progress has elapsed and GPU time only: every other figure is None, never a guess.

Pure: no clock, no I/O; ``now`` is a parameter.
"""

from __future__ import annotations

from typing import Any

__all__ = ["close_attempt", "summary", "weighted"]


def _gpus(job: Any) -> int:
    return sum(len(a.gpu_ids) for a in job.alloc)


def close_attempt(job: Any, now: float, outcome: str) -> None:
    """Append the summary of the attempt ending now (``outcome``: the state it ended in,
    e.g. COMPLETED, NODE_FAIL, REQUEUED, Hung). Does nothing for an attempt that never
    started or was closed already."""
    if job.start_time is None:
        return
    if job.attempts and job.attempts[-1].get("attempt") == job.restart_count:
        return
    p = job.progress or {}
    job.attempts.append(
        {
            "attempt": job.restart_count,
            "start": job.start_time,
            "end": now,
            "gpus": _gpus(job),
            "outcome": outcome,
            "first": p.get("first"),
            "step": p.get("step"),
            "step_time": p.get("step_time"),
            "ckpt_step": p.get("ckpt_step"),
            "ckpt_time": p.get("ckpt_time"),
            "replaced_lost": _replaced_lost(job.replacements, job.restart_count),
        }
    )


def _replaced_lost(replacements: list[dict[str, Any]], attempt: int) -> float:
    """Seconds of work an attempt lost to in-allocation replacements (``ctld.replacement``:
    each records the time since the last checkpoint when its node failed)."""
    return sum(float(r.get("lost") or 0) for r in replacements if r.get("attempt", 0) == attempt)


def _split(a: dict[str, Any], running: bool) -> dict[str, Any]:
    start, end = float(a["start"]), float(a["end"])
    elapsed = max(0.0, end - start)
    first = a.get("first")
    if first is None:
        return {"elapsed": elapsed, "startup": elapsed, "lost": 0.0, "lost_steps": None, "reported": False}
    first = min(max(float(first), start), end)
    startup = first - start
    lost = min(float(a.get("replaced_lost") or 0), max(0.0, end - first))  # redone after a replacement
    lost_steps = None
    if not running and a.get("outcome") != "COMPLETED":
        ckpt = a.get("ckpt_time")
        since = max(first, min(float(ckpt), end)) if ckpt is not None else first
        lost = min(end - first, lost + end - since)
        step = a.get("step")
        if step is not None:
            lost_steps = max(0, int(step) - int(a.get("ckpt_step") or 0))
    return {"elapsed": elapsed, "startup": startup, "lost": lost, "lost_steps": lost_steps, "reported": True}


def _attempts(job: dict[str, Any], now: float) -> list[dict[str, Any]]:
    """The job's ended attempts, and the running one (outcome RUNNING) up to ``now``."""
    attempts = list(job.get("attempts") or [])
    running = job.get("state") == "RUNNING" and job.get("start_time") is not None
    if running and not (attempts and attempts[-1].get("attempt") == job.get("restart_count")):
        p = job.get("progress") or {}
        gpus = sum(len(a.get("gpu_ids") or []) for a in job.get("alloc") or [])
        attempts.append(
            {
                "attempt": job.get("restart_count", 0),
                "start": job["start_time"],
                "end": max(now, float(job["start_time"])),
                "gpus": gpus,
                "outcome": "RUNNING",
                **{k: p.get(k) for k in ("first", "step", "step_time", "ckpt_step", "ckpt_time")},
                "replaced_lost": _replaced_lost(job.get("replacements") or [], job.get("restart_count", 0)),
            }
        )
    return attempts


def weighted(job: dict[str, Any], now: float) -> dict[str, Any]:
    """The job's time in GPU-seconds (a job without GPUs weighs as one GPU, i.e. wall
    time), summed over its attempts: ``allocated``, and when it reported progress
    (``reported``) how that splits into ``startup``, ``lost`` and ``productive``; the
    reports add these up by account, user and partition (sreport job goodput)."""
    out = {"allocated": 0.0, "startup": 0.0, "lost": 0.0, "productive": 0.0, "reported": False}
    for a in _attempts(job, now):
        part = _split(a, running=a.get("outcome") == "RUNNING")
        w = float(int(a.get("gpus") or 0) or 1)
        out["allocated"] += part["elapsed"] * w
        out["startup"] += part["startup"] * w
        out["lost"] += part["lost"] * w
        out["productive"] += (part["elapsed"] - part["startup"] - part["lost"]) * w
        out["reported"] = out["reported"] or part["reported"]
    return out


def summary(job: dict[str, Any], now: float) -> dict[str, Any]:
    """Goodput figures of a job (as a dict, the way the store and the wire hold it)."""
    attempts = _attempts(job, now)
    elapsed = gpu_time = startup = lost = productive = weight_all = weight_good = 0.0
    reported = False
    per_attempt = []
    for a in attempts:
        part = _split(a, running=a.get("outcome") == "RUNNING")
        g = int(a.get("gpus") or 0)
        w = float(g or 1)
        elapsed += part["elapsed"]
        gpu_time += part["elapsed"] * g
        startup += part["startup"]
        lost += part["lost"]
        good = part["elapsed"] - part["startup"] - part["lost"]
        productive += good
        weight_all += part["elapsed"] * w
        weight_good += good * w
        reported = reported or part["reported"]
        per_attempt.append(
            {
                "attempt": a.get("attempt"),
                "outcome": a.get("outcome"),
                "elapsed": part["elapsed"],
                "lost": part["lost"] if part["reported"] else None,
                "lost_steps": part["lost_steps"],
            }
        )
    out: dict[str, Any] = {
        "attempts": len(attempts),
        "elapsed_total": elapsed,
        "gpu_seconds": gpu_time,
        "startup": None,
        "lost": None,
        "productive": None,
        "goodput": None,
        "last_step": None,
        "last_ckpt": None,
        "lost_per_attempt": per_attempt,
    }
    if reported:
        out.update(
            {
                "startup": startup,
                "lost": lost,
                "productive": productive,
                "goodput": (weight_good / weight_all) if weight_all > 0 else None,
                "last_step": max((a["step"] for a in attempts if a.get("step") is not None), default=None),
                "last_ckpt": max((a["ckpt_step"] for a in attempts if a.get("ckpt_step") is not None), default=None),
            }
        )
    return out
