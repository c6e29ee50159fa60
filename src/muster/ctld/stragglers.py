"""Stragglers of running jobs in the controller: each node's pace from its ranks' step times, judged against its peers' (``core.stragglers``), kept and shown with the job, and acted on as its partition says.

* ``node_pace`` turns a progress report's ``ranks`` (each rank's latest step and rolling
  median step time, measured by the node agent) into the node's pace, which
  ``Training.progress`` keeps in ``Job.progress["pace"]`` (node -> ``[median, samples,
  rank]``).
* ``check`` (called by ``Training.check_hangs`` at every node check, for the jobs that
  report progress) judges a running job's nodes with ``core.stragglers.judge`` and keeps
  the verdict in the job's progress: ``straggler_watch`` (each node's state between
  judgements) and ``stragglers`` (node -> ``{"slower", "median", "peers", "since"}``: how
  much slower than the median of its peers, both medians in seconds per step, when
  flagged). A change of the flagged set is committed with the job (event ``straggler``)
  and logged; ``scontrol show job`` shows ``Stragglers=node3(+34%)``, squeue ``-O
  stragglers``, the REST job view ``stragglers``, and /metrics
  ``muster_job_straggler{job,node}``.
* The partition's ``Stragglers=`` (muster's key) says what happens: ``flag`` (the default:
  shown and counted), ``exclude`` (also added to the job's excluded nodes, so that its next
  attempt, after any requeue, runs elsewhere; the running attempt is left alone), ``off``
  (not judged), or ``swap``: excluded as with ``exclude`` and, once the job reports a
  checkpoint newer than the one it had when the node was flagged, replaced in the running
  allocation by a free node (``ctld.replacement``, as a failed node is: the job must have
  asked for ``--spare-nodes``; the job's steps on the node are stopped, the batch script
  goes on and its next srun runs on the new node; the job's ``replaced`` event says cause
  ``straggler``). ``StragglerWindow=`` (seconds, default 60) is how long a node must be
  slow at every judgement before it is flagged, and fast again before it is cleared.

A judgement is skipped while the job is judged hung or has a node not responding (the hang
and node checks' business), and for heterogeneous jobs' components alike: only the nodes
of the job's own allocation are compared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from muster.core.errors import StorageError
from muster.core.events import EventKind
from muster.core.job import Job
from muster.core.states import JobState
from muster.core.stragglers import Pace, Rules, Watch, flagged, judge
from muster.core.stragglers import node_pace as _node_pace
from muster.ctld.actions import Action
from muster.ctld.replacement import Replacements
from muster.ctld.state import ClusterState

__all__ = ["ACTIONS", "RULES", "action", "check", "node_pace", "rules"]

log = logging.getLogger("musterctld")

RULES = Rules()
ACTIONS = ("flag", "exclude", "swap", "off")
STRAGGLER = "straggler"  # the cause of a swap, as the job's ``replaced`` event says it


def node_pace(ranks: Any) -> list[Any] | None:
    """``[median, samples, rank]`` of a node from a report's ``ranks``; None: not yet known."""
    if not isinstance(ranks, dict):
        return None
    pace = _node_pace(ranks, RULES.min_samples)
    return None if pace is None else [round(pace.median, 4), pace.samples, pace.rank[:16]]


def action(ctl: ClusterState, job: Job) -> str:
    """The job's partition's ``Stragglers=`` (``flag``, ``exclude``, ``off``); ``flag``
    when unset."""
    conf = ctl.config.partition(job.partition)
    raw = (conf.params.get("Stragglers") if conf is not None else None) or "flag"
    return raw.strip().lower() if raw.strip().lower() in ACTIONS else "flag"


def rules(ctl: ClusterState, job: Job) -> Rules:
    """``RULES``, with the sustain window of the job's partition's ``StragglerWindow=``
    (seconds) where it says one."""
    conf = ctl.config.partition(job.partition)
    raw = conf.params.get("StragglerWindow") if conf is not None else None
    try:
        return RULES if raw is None else replace(RULES, sustain=float(int(raw)))
    except ValueError:
        return RULES  # refused when the configuration is read (core.config)


def _paces(job: Job) -> dict[str, Pace]:
    out: dict[str, Pace] = {}
    for node, v in ((job.progress or {}).get("pace") or {}).items():
        if node in job.nodes and isinstance(v, list) and len(v) == 3:
            try:
                out[node] = Pace(float(v[0]), int(v[1]), str(v[2]))
            except (TypeError, ValueError):
                continue
    return out


def check(
    ctl: ClusterState,
    job: Job,
    now: float,
    avoid: Callable[[Job, list[str]], None],
    replacements: Replacements | None = None,
) -> list[Action]:
    """Judge ``job``'s nodes now; keep the verdict; commit and act on a change (see the
    module docstring). ``avoid``: adds nodes to the job's excluded nodes (``Training.avoid``);
    ``replacements``: swaps a node in a running job (``Stragglers=swap``). Returns the
    actions of a swap."""
    p = job.progress
    if job.state is not JobState.RUNNING or not p or not p.get("pace") or p.get("hang_judged"):
        return []
    if any(not ctl.nodes[n].responding for n in job.nodes if n in ctl.nodes):
        return []
    what = action(ctl, job)
    if what == "off":
        return []
    old = {n: Watch.from_list(v) for n, v in (p.get("straggler_watch") or {}).items()}
    new = judge(_paces(job), old, now, rules(ctl, job))
    before, after = set(flagged(old)), flagged(new)
    p = dict(p)
    p["straggler_watch"] = {n: w.to_list() for n, w in new.items()}
    shown = {
        n: {"slower": round(w.slower, 3), "median": round(w.median, 4), "peers": round(w.peers, 4), "since": w.flagged}
        for n, w in after.items()
    }
    if shown:
        p["stragglers"] = shown
    else:
        p.pop("stragglers", None)
    # Stragglers=swap: node -> the checkpoint step when it was flagged; swapped after a newer one
    swaps = {n: at for n, at in (p.get("straggler_swap") or {}).items() if n in after}
    if swaps:
        p["straggler_swap"] = swaps
    else:
        p.pop("straggler_swap", None)
    if set(after) == before:
        job.progress = p  # the evidence moves: kept in memory, committed with the progress
        return _swap(job, now, replacements) if swaps and what == "swap" else []
    added = sorted(set(after) - before)
    ckpt = p.get("ckpt_step")
    try:
        with ctl.atomic(job):
            job.progress = p
            excluded = []
            if what in ("exclude", "swap") and added:
                avoid(job, added)
                excluded = [n for n in added if n in job.spec.exclude]
            if what == "swap" and added:
                p["straggler_swap"] = {**swaps, **dict.fromkeys(added, ckpt if isinstance(ckpt, int) else -1)}
            ctl.record(
                now,
                [(job, EventKind.STRAGGLER, {"stragglers": shown, "added": added, "excluded": excluded})],
            )
    except StorageError:
        return []  # memory is the store's again: judged anew at the next check
    if added:
        log.warning(
            "job %s: straggler(s) %s: median step %s; %s",
            job.job_id,
            ",".join(f"{n}(+{round(after[n].slower * 100)}%)" for n in added),
            ", ".join(f"{n} {after[n].median:.3f} s vs peers {after[n].peers:.3f} s" for n in added),
            {"exclude": "excluded from its next attempt", "swap": "swapped at its next checkpoint"}.get(
                what, "flagged"
            ),
        )
    for node in sorted(before - set(after)):
        log.info("job %s: %s is no straggler any more", job.job_id, node)
    return []


def _swap(job: Job, now: float, replacements: Replacements | None) -> list[Action]:
    """``Stragglers=swap``: the flagged nodes of ``job`` whose job wrote a checkpoint since
    they were flagged are replaced in its allocation (``ctld.replacement``, cause
    ``straggler``: the job asked for ``--spare-nodes``); one that cannot be (no spare left,
    its batch host, no free node) stays flagged and excluded from the next attempt."""
    p = job.progress or {}
    ckpt = p.get("ckpt_step")
    pending = dict(p.get("straggler_swap") or {})
    due = [n for n, at in sorted(pending.items()) if isinstance(ckpt, int) and ckpt > at and n in job.nodes]
    actions: list[Action] = []
    for node in due:
        pending.pop(node, None)
        job.progress = {**(job.progress or {}), "straggler_swap": pending}  # tried once
        found = (p.get("stragglers") or {}).get(node) or {}
        why = f"straggler: {round(float(found.get('slower') or 0.0) * 100)}% slower than its peers"
        swapped = replacements.job_lost_node(job, node, STRAGGLER, why, now) if replacements is not None else None
        if swapped is None:
            log.warning("job %s: straggler %s not swapped at checkpoint %s", job.job_id, node, ckpt)
            continue
        log.warning("job %s: straggler %s swapped at checkpoint %s", job.job_id, node, ckpt)
        actions += swapped
    return actions
