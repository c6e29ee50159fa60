"""sreport's numbers: TRES-seconds each (account, user) used within a window, read from the
accounting records (``acct_jobs``), with the cluster's capacity and the time its nodes
were out of service (``node_events``) over the same window, and the goodput of the jobs
that ran in it by (account, user, partition).

Usage is billed as fair-share bills it (``ctld.tres.billing`` with the partition's
``TRESBillingWeights``); a job still running counts up to ``now``. Nothing is written.
"""

from __future__ import annotations

import json
from typing import Any

from muster.core import goodput
from muster.ctld import records
from muster.ctld.assoc import AssocDB
from muster.ctld.nodes import NodeRuntime
from muster.ctld.tres import alloc_tres, billing


def usage_report(
    store: Any,
    db: AssocDB,
    weights: dict[str, dict[str, float]],
    max_tres: bool,
    start: float,
    end: float,
    now: float,
    nodes: list[NodeRuntime],
    cluster: str,
) -> dict[str, Any]:
    """TRES-seconds used in [start, end] per (account, user), and the cluster's capacity.
    ``weights`` are each partition's TRESBillingWeights, ``max_tres`` PriorityFlags=MAX_TRES."""
    rows = store.db.execute(
        "SELECT data FROM acct_jobs WHERE start_time IS NOT NULL AND start_time < ? "
        "AND (end_time IS NULL OR end_time > ?)",
        (end, start),
    ).fetchall()
    by: dict[tuple[str, str], dict[str, float]] = {}
    total: dict[str, float] = {}
    good: dict[tuple[str, str, str], dict[str, float]] = {}
    for (raw,) in rows:
        d = json.loads(raw)
        _add_goodput(good, d, now)
        t0 = max(start, d.get("start_time") or start)
        stop = d.get("end_time")
        if stop is None:
            stop = now if d.get("state") == "RUNNING" or d.get("completing") else t0
        t1 = min(end, stop)
        if t1 <= t0:
            continue
        tres = alloc_tres(d)
        if not tres:
            continue
        counts: dict[str, float] = dict(tres)
        counts["billing"] = billing(tres, weights.get(d.get("partition", ""), {}), max_tres)
        key = (records.account_of(d), d.get("user", ""))
        per = by.setdefault(key, {})
        for name, n in counts.items():
            per[name] = per.get(name, 0.0) + n * (t1 - t0)
            total[name] = total.get(name, 0.0) + n * (t1 - t0)
    span = max(0.0, min(end, now) - start)
    capacity = {
        "cpu": sum(n.cpus for n in nodes) * span,
        "gres/gpu": sum(n.gpus for n in nodes) * span,
        "mem": sum(n.real_memory for n in nodes) * span,
        "node": len(nodes) * span,
        "billing": sum(n.cpus for n in nodes) * span,
    }
    return {
        "cluster": cluster,
        "start": start,
        "end": end,
        "allocated": total,
        "capacity": capacity,
        "down": _down(store, start, min(end, now), list(capacity)),
        "usage": [{"account": a, "user": u, "tres": t} for (a, u), t in sorted(by.items())],
        "goodput": [{"account": a, "user": u, "partition": p, **g} for (a, u, p), g in sorted(good.items())],
        "accounts": {
            a.account: {"parent": a.parent, "depth": len(db.chain(a)) - 1} for a in db.tree_order() if not a.is_user
        },
        "users": {u.name: {"default_account": u.default_account} for u in db.users.values()},
    }


def _add_goodput(good: dict[tuple[str, str, str], dict[str, float]], d: dict[str, Any], now: float) -> None:
    """Add a job that ran in the window, whole (all its attempts), to its (account, user,
    partition) row: GPU-seconds allocated, and for the jobs that reported progress their
    startup, lost and productive GPU-seconds (``core.goodput.weighted``)."""
    w = goodput.weighted(d, now)
    if w["allocated"] <= 0:
        return
    row = good.setdefault(
        (records.account_of(d), d.get("user", ""), d.get("partition", "")),
        {
            "jobs": 0,
            "allocated": 0.0,
            "reported_jobs": 0,
            "reported": 0.0,
            "startup": 0.0,
            "lost": 0.0,
            "productive": 0.0,
        },
    )
    row["jobs"] += 1
    row["allocated"] += w["allocated"]
    if w["reported"]:
        row["reported_jobs"] += 1
        row["reported"] += w["allocated"]
        for k in ("startup", "lost", "productive"):
            row[k] += w[k]


def _down(store: Any, start: float, end: float, names: list[str]) -> dict[str, float]:
    """TRES-seconds of nodes out of service within [start, end] (``node_events``)."""
    out = dict.fromkeys(names, 0.0)
    since: dict[str, tuple[float, dict[str, Any]]] = {}

    def add(t0: float, t1: float, sizes: dict[str, Any]) -> None:
        span = min(t1, end) - max(t0, start)
        if span > 0:
            for name in names:
                per = sizes.get("cpu" if name == "billing" else name, 0)
                out[name] += float(per) * span

    for node, when, down, _reason, sizes in store.node_events(until=end):
        if down:
            since.setdefault(node, (when, sizes))
        elif node in since:
            t0, was = since.pop(node)
            add(t0, when, was)
    for t0, sizes in since.values():
        add(t0, end, sizes)
    return out
