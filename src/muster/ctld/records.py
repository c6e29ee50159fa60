"""Accounting records: one row per job attempt, what ``sacct`` and ``sreport`` read.

The store keeps them in ``acct_jobs`` (``job_id``, ``attempt``), written by ``project`` in
the same transaction as each job event, so a record is as durable as the job itself:

* every event upserts the row of the job's current attempt (``restart_count``) with the
  job as it now is (pending, running, ended);
* an event that requeues a job (``node_fail``, ``requeue``, ``launch_failed``) first closes
  the previous attempt's row if it was still running: ``NODE_FAIL``, ``PREEMPTED`` or ``REQUEUED`` at the
  event's time (a failed launch never ran, so its row is removed). The job object itself
  has already moved on to its next attempt by then, which is why the row is closed here.

``query`` selects records the way sacct does (time window, users, states...), and
``record_wire`` turns a stored job dict into the fields sacct prints, including the
``.batch`` step derived from the job and the steps the steps table holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from muster.core import goodput
from muster.core.hostlist import compress
from muster.core.steps import BATCH_STEP
from muster.ctld.tres import alloc_tres, billing, format_tres, req_tres

_REQUEUE_KINDS = frozenset({"node_fail", "requeue", "launch_failed", "hung", "preempted"})
_ENDED = frozenset(
    "COMPLETED CANCELLED FAILED TIMEOUT NODE_FAIL PREEMPTED OUT_OF_MEMORY BOOT_FAIL DEADLINE REQUEUED".split()
)

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS acct_jobs (
           job_id INTEGER NOT NULL,
           attempt INTEGER NOT NULL,
           user TEXT NOT NULL,
           state TEXT NOT NULL,
           submit_time REAL NOT NULL,
           start_time REAL,
           end_time REAL,
           data TEXT NOT NULL,
           PRIMARY KEY (job_id, attempt))""",
    "CREATE INDEX IF NOT EXISTS acct_jobs_end ON acct_jobs(end_time)",
    "CREATE INDEX IF NOT EXISTS acct_jobs_submit ON acct_jobs(submit_time)",
    # Associations, users, accounts and QOS (muster.ctld.assoc), one JSON row each.
    """CREATE TABLE IF NOT EXISTS acct_objects (
           kind TEXT NOT NULL,
           name TEXT NOT NULL,
           data TEXT NOT NULL,
           PRIMARY KEY (kind, name))""",
    # Records of jobs that existed before accounting did.
    "INSERT INTO acct_jobs(job_id, attempt, user, state, submit_time, start_time, end_time, data) "
    "SELECT job_id, 0, user, state, submit_time, NULL, end_time, data FROM jobs",
]


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


def project(db: Any, now: float, job: Any, kind: str, data: str | None = None) -> None:
    """Keep ``acct_jobs`` in step with one job event (called inside the store's transaction)."""
    attempt = job.restart_count
    if attempt > 0 and kind in _REQUEUE_KINDS:
        _close_attempt(db, now, job.job_id, attempt - 1, kind, getattr(job, "attempts", None) or [])
    if data is None:
        data = _dumps(job.to_dict())
    db.execute(
        "INSERT INTO acct_jobs(job_id, attempt, user, state, submit_time, start_time, end_time, data) "
        "VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(job_id, attempt) DO UPDATE SET state=excluded.state, "
        "start_time=excluded.start_time, end_time=excluded.end_time, data=excluded.data",
        (job.job_id, attempt, job.user, str(job.state), job.submit_time, job.start_time, job.end_time, data),
    )


def _close_attempt(db: Any, now: float, job_id: int, attempt: int, kind: str, summaries: list[dict[str, Any]]) -> None:
    row = db.execute("SELECT state, data FROM acct_jobs WHERE job_id=? AND attempt=?", (job_id, attempt)).fetchone()
    if row is None or row[0] != "RUNNING":
        return
    if kind == "launch_failed":
        db.execute("DELETE FROM acct_jobs WHERE job_id=? AND attempt=?", (job_id, attempt))
        return
    d = json.loads(row[1])
    d["state"] = {"node_fail": "NODE_FAIL", "preempted": "PREEMPTED"}.get(kind, "REQUEUED")
    if kind == "hung":  # its progress stopped (muster.ctld.training)
        d["reason"] = "Hung"
    d["end_time"] = now
    d["completing"] = False
    d["exit_code"] = 0
    d["exit_signal"] = 0
    if kind == "preempted":  # the job has moved on: its summary of this attempt says what was lost
        closed = [a for a in summaries if a.get("attempt") == attempt]
        d["lost_work"] = lost_work(closed[-1]) if closed else None
    db.execute(
        "UPDATE acct_jobs SET state=?, end_time=?, data=? WHERE job_id=? AND attempt=?",
        (d["state"], now, _dumps(d), job_id, attempt),
    )


# --- selecting records --------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Query:
    """sacct's selection. Times are epochs; ``start``/``end`` None means unbounded; a list
    left None (or empty) selects on nothing."""

    job_ids: list[int] | None = None
    array_tasks: set[tuple[int, int]] | None = None
    users: list[str] | None = None
    accounts: list[str] | None = None
    partitions: list[str] | None = None
    states: list[str] | None = None
    qos: list[str] | None = None
    names: list[str] | None = None
    nodes: list[str] | None = None
    start: float | None = None
    end: float | None = None
    duplicates: bool = False


def _in(column: str, values: list[Any]) -> str:
    return f"{column} IN ({','.join('?' for _ in values)})"


def select(db: Any, q: Query, now: float) -> list[dict[str, Any]]:
    """Stored job dicts (one per attempt, ``attempt`` added) matching ``q``, ordered by job
    id then attempt; without ``duplicates`` only each job's latest matching attempt."""
    where: list[str] = []
    params: list[Any] = []
    wanted = set(q.job_ids or ()) | {a for a, _ in q.array_tasks or ()}
    if wanted:
        # An array's tasks have ids from the array's own id up; the exact match is below.
        where.append("job_id >= ?")
        params.append(min(wanted))
    if q.users:
        where.append(_in("user", q.users))
        params += list(q.users)
    if q.end is not None:
        where.append("submit_time <= ?")
        params.append(q.end)
    if q.start is not None and not q.states:
        where.append("(end_time IS NULL OR end_time >= ?)")
        params.append(q.start)
    sql = "SELECT attempt, data FROM acct_jobs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY job_id, attempt"
    out: list[dict[str, Any]] = []
    for attempt, raw in db.execute(sql, params).fetchall():
        d = json.loads(raw)
        d["attempt"] = attempt
        if _matches(d, q):
            out.append(d)
    if not q.duplicates:
        latest: dict[int, dict[str, Any]] = {}
        for d in out:
            latest[d["job_id"]] = d
        out = list(latest.values())
    return out


def account_of(d: dict[str, Any]) -> str:
    account: str = (d.get("spec") or {}).get("account") or d.get("user", "")
    return account


def qos_of(d: dict[str, Any]) -> str:
    qos: str = (d.get("spec") or {}).get("qos") or "normal"
    return qos


def _matches(d: dict[str, Any], q: Query) -> bool:
    spec = d.get("spec") or {}
    if q.job_ids or q.array_tasks:
        ids = q.job_ids or ()
        task = (d.get("array_job_id"), d.get("array_task_id"))
        if (
            d["job_id"] not in ids
            and task[0] not in ids
            and task not in (q.array_tasks or ())
            and d.get("het_job_id") not in ids  # a heterogeneous job: every component
        ):
            return False
    if q.accounts and account_of(d).lower() not in {a.lower() for a in q.accounts}:  # as Slurm's
        return False
    if q.partitions and d.get("partition") not in q.partitions:
        return False
    if q.qos and qos_of(d) not in q.qos:
        return False
    if q.names and spec.get("name") not in q.names:
        return False
    if q.nodes and not {a.get("node") for a in d.get("alloc") or []} & set(q.nodes):
        return False
    if q.states:
        return _in_state_during(d, q.states, q.start, q.end)
    return True


def _in_state_during(d: dict[str, Any], states: list[str], start: float | None, end: float | None) -> bool:
    """Slurm's ``-s``: the job was in one of ``states`` during [start, end]."""
    state = d.get("state", "")
    lo = start if start is not None else float("-inf")
    hi = end if end is not None else float("inf")
    t_submit = d.get("submit_time") or 0
    t_start = d.get("start_time")
    t_end = d.get("end_time")
    for s in states:
        if s == "PENDING":
            if t_submit <= hi and (t_start is None and t_end is None or (t_start or t_end or 0) >= lo):
                return True
        elif s == "RUNNING":
            if t_start is not None and t_start <= hi and (t_end is None or t_end >= lo):
                return True
        elif s == "SUSPENDED":  # suspended now since before the window ends, or earlier in a run that overlaps it
            since, ran = d.get("suspended_at"), t_start is not None and t_start <= hi and (t_end is None or t_end >= lo)
            if (since is not None and since <= hi) or (ran and d.get("suspended_secs")):
                return True
        elif s == "STOPPED" and state == "RUNNING" and d.get("stopped"):
            return True
        elif s == state and t_end is not None and lo <= t_end <= hi:
            return True
    return False


# --- what sacct prints -------------------------------------------------------------------------


def exit_text(code: int, sig: int) -> str:
    return f"{code}:{sig}"


def _job_exit(d: dict[str, Any]) -> str:
    state = d.get("state")
    if state == "FAILED":
        return exit_text(int(d.get("exit_code", 0)), int(d.get("exit_signal", 0)))
    if state == "OUT_OF_MEMORY":
        return "0:125"
    return "0:0"


def _batch_state(d: dict[str, Any]) -> tuple[str, str]:
    """State and exit code of the batch step, derived from the job (Slurm's convention:
    a batch shell ended by a signal or by the job's cancellation shows CANCELLED)."""
    state = d.get("state")
    code, sig = int(d.get("exit_code", 0)), int(d.get("exit_signal", 0))
    if state == "RUNNING" and not d.get("completing"):
        return "RUNNING", "0:0"
    if state == "COMPLETED":
        return "COMPLETED", "0:0"
    if state == "FAILED":
        return ("CANCELLED", exit_text(0, sig)) if sig else ("FAILED", exit_text(code, 0))
    if state == "OUT_OF_MEMORY":
        return "OUT_OF_MEMORY", "0:125"
    # CANCELLED, TIMEOUT, NODE_FAIL, REQUEUED, still completing: the shell was killed.
    if sig or code:
        return "CANCELLED", exit_text(code if not sig else 0, sig)
    return "CANCELLED", "0:15"


def lost_work(summary: dict[str, Any]) -> float | None:
    """GPU-seconds of work a preempted attempt lost (sacct's ``LostWork``): from its last
    checkpoint (``muster.progress.checkpoint``; from its start when it saved none in this
    attempt) to its end, times its GPUs (a job without GPUs weighs as one, i.e. wall time).
    ``summary``: the attempt's ``core.goodput`` summary; None when it is incomplete."""
    try:
        start, end = float(summary["start"]), float(summary["end"])
    except (KeyError, TypeError, ValueError):
        return None
    ckpt = summary.get("ckpt_time")
    since = float(ckpt) if isinstance(ckpt, int | float) and start <= ckpt <= end else start
    return round(max(0.0, end - since) * max(1, int(summary.get("gpus") or 0)), 1)


def _row_lost_work(d: dict[str, Any]) -> float | None:
    """The work this row's attempt lost to preemption: None unless it was preempted."""
    if d.get("lost_work") is not None:  # a requeued attempt's row, closed by ``_close_attempt``
        return float(d["lost_work"])
    if d.get("state") != "PREEMPTED":
        return None
    attempt = d.get("attempt", d.get("restart_count", 0))
    mine = [a for a in d.get("attempts") or [] if a.get("attempt") == attempt and a.get("outcome") == "PREEMPTED"]
    return lost_work(mine[-1]) if mine else None


def _goodput(d: dict[str, Any], now: float) -> dict[str, Any]:
    """sacct's goodput fields (muster's own; see docs/training.md): None where the job
    reported nothing, never a guess."""
    g = goodput.summary(d, now)
    lost = [a["lost"] for a in g["lost_per_attempt"] if a["outcome"] not in ("COMPLETED", "RUNNING")]
    return {
        "gpu_seconds": int(g["gpu_seconds"]),
        "startup": g["startup"],
        "lost": g["lost"],
        "productive": g["productive"],
        "goodput": g["goodput"],
        "last_step": g["last_step"],
        "last_ckpt": g["last_ckpt"],
        "lost_per_attempt": ",".join("" if x is None else str(int(x)) for x in lost),
    }


def record_wire(
    d: dict[str, Any],
    now: float,
    cluster: str,
    weights: dict[str, float] | None = None,
    steps: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    """One accounting record as sacct's fields need it (times are epochs or None)."""
    spec = d.get("spec") or {}
    state = d.get("state", "PENDING")
    alloc = d.get("alloc") or []
    started = bool(alloc) and d.get("start_time") is not None
    start, end = d.get("start_time"), d.get("end_time")
    held_cancel = False
    if not started and state in _ENDED and end is not None:
        # Never ran: Slurm shows Start=End, or "None" for a job cancelled while held.
        held_cancel = bool(d.get("hold")) or d.get("priority") == 0
        start = None if held_cancel else end
    # ``scontrol suspend`` (``ctld.suspend``): the time suspended, not counted as elapsed
    suspended_at = d.get("suspended_at") if state == "RUNNING" else None
    until = now if state == "RUNNING" else (end or now)
    suspended = float(d.get("suspended_secs") or 0) + (max(0.0, until - suspended_at) if suspended_at else 0.0)
    # shown as the job's own views show it (``Job.display_state``)
    shown = "STOPPED" if state == "RUNNING" and d.get("stopped") else None
    if suspended_at is not None:
        shown = "SUSPENDED"
    if state == "RUNNING" and not d.get("completing"):
        elapsed = max(0, now - (start or now) - suspended)
    elif start is not None and end is not None:
        elapsed = max(0, end - start - suspended)
    else:
        elapsed = 0
    req = req_tres(d)
    req["billing"] = int(round(billing(req, weights or {})))
    alloc_counts = alloc_tres(d)
    if alloc_counts:
        alloc_counts["billing"] = int(round(billing(alloc_counts, weights or {})))
    state_text = state
    if state == "CANCELLED" and d.get("cancelled_by") is not None:
        state_text = f"CANCELLED by {d['cancelled_by']}"
    job_id = int(d["job_id"])
    array_job, array_task = d.get("array_job_id"), d.get("array_task_id")
    job_id_text = f"{array_job}_{array_task}" if array_job and array_task is not None else str(job_id)
    het_job, het_offset = d.get("het_job_id"), d.get("het_job_offset")
    if het_job is not None and het_offset is not None:
        job_id_text = f"{het_job}+{het_offset}"  # a heterogeneous job's component
    nodes = [a.get("node") for a in alloc]
    rec: dict[str, Any] = {
        "job_id": job_id,
        "job_id_text": job_id_text,
        "job_id_raw": str(job_id),
        "array_job_id": array_job,
        "array_task_id": array_task,
        "array_throttle": d.get("array_throttle") or 0,
        "het_job_id": het_job,
        "het_job_offset": het_offset,
        "attempt": d.get("attempt", d.get("restart_count", 0)),
        "cluster": cluster,
        "name": spec.get("name", ""),
        "partition": d.get("partition", ""),
        "account": account_of(d),
        "user": d.get("user", ""),
        "uid": d.get("uid"),
        "group": d.get("group", ""),
        "gid": d.get("gid"),
        "qos": qos_of(d),
        "state": shown or state,
        "state_text": shown or state_text,
        "suspended": int(suspended),
        "exit_code": _job_exit(d),
        "derived_exit_code": "0:0",
        "submit": d.get("submit_time"),
        "eligible": d.get("eligible_time"),
        "start": start,
        "start_none": held_cancel,
        "end": end if state in _ENDED and not (state == "RUNNING") else None,
        "elapsed": int(elapsed),
        "time_limit": d.get("time_limit"),
        "nodelist": compress(nodes) if nodes else "None assigned",
        "nnodes": len(alloc) or req["node"],
        "ncpus": alloc_counts.get("cpu") or req["cpu"],
        "req_cpus": req["cpu"],
        "req_mem": req["mem"],
        "req_nodes": req["node"],
        "req_tres": format_tres(req),
        "alloc_tres": format_tres(alloc_counts) if alloc_counts else "",
        "alloc_gpus": alloc_counts.get("gres/gpu", 0),
        "restart_count": d.get("restart_count", 0),
        "priority": d.get("priority", 0),
        "reason": d.get("reason", "None"),
        "workdir": spec.get("workdir", ""),
        "constraints": spec.get("constraint") or "",
        "reservation": spec.get("reservation") or "",
        "comment": spec.get("comment") or "",
        "system_comment": d.get("system_comment") or "",
        # in-allocation replacements of this attempt's failed nodes (``ctld.replacement``)
        "replacements": [
            r for r in d.get("replacements") or [] if r.get("attempt", 0) == d.get("attempt", d.get("restart_count", 0))
        ],
        "ntasks": None,
        "steps": [],
    }
    rec.update(_goodput(d, now))
    rec["lost_work"] = _row_lost_work(d)
    steps = list(steps)
    recorded_batch = any(s.get("step_id") == BATCH_STEP for s in steps)
    if started and spec.get("script") is not None and not recorded_batch:
        first = alloc[0]
        b_state, b_exit = _batch_state(d)
        if suspended_at is not None and b_state == "RUNNING":
            b_state = "SUSPENDED"
        b_counts = {
            "cpu": int(first.get("cpus", 0)),
            "mem": int(first.get("mem", 0)),
            "node": 1,
            "gres/gpu": len(first.get("gpu_ids") or []),
        }
        batch = _step(
            rec, "batch", "batch", b_state, b_exit, start, rec["end"], elapsed, [first.get("node")], b_counts, 1
        )
        usage = d.get("usage") or {}
        if usage:  # what the script used, as its agent measured it (getrusage)
            batch["max_rss_kb"] = int(usage.get("max_rss_kb", 0))
            batch["user_cpu"] = float(usage.get("user_cpu", 0.0))
            batch["system_cpu"] = float(usage.get("system_cpu", 0.0))
        rec["steps"].append(batch)
    for s in steps:
        rec["steps"].append(_step_from_table(rec, s, now))
    # The allocation's CPU time is its steps' (Slurm's TotalCPU on the job line).
    measured = [s for s in rec["steps"] if "user_cpu" in s]
    if measured:
        rec["user_cpu"] = sum(s["user_cpu"] for s in measured)
        rec["system_cpu"] = sum(s["system_cpu"] for s in measured)
    return rec


def _step(
    rec: dict[str, Any],
    step_id: str,
    name: str,
    state: str,
    exit_code: str,
    start: float | None,
    end: float | None,
    elapsed: float,
    nodes: list[str],
    counts: dict[str, int],
    ntasks: int,
) -> dict[str, Any]:
    return {
        **{
            k: rec[k]
            for k in ("cluster", "account", "user", "uid", "group", "gid", "attempt", "submit", "eligible", "workdir")
        },
        "job_id": rec["job_id"],
        "job_id_text": f"{rec['job_id_text']}.{step_id}",
        "job_id_raw": f"{rec['job_id_raw']}.{step_id}",
        "name": name,
        "partition": "",
        "qos": "",
        "state": state,
        "state_text": state,
        "exit_code": exit_code,
        "derived_exit_code": "",
        "start": start,
        "start_none": False,
        "end": end,
        "elapsed": int(elapsed),
        "time_limit": None,
        "nodelist": compress(nodes) if nodes else "",
        "nnodes": len(nodes),
        "ncpus": counts.get("cpu", 0),
        "req_cpus": counts.get("cpu", 0),
        "req_mem": counts.get("mem", 0),
        "req_nodes": len(nodes),
        "req_tres": "",
        "alloc_tres": format_tres(counts),
        "alloc_gpus": counts.get("gres/gpu", 0),
        "restart_count": rec["restart_count"],
        "priority": "",
        "reason": "",
        "constraints": "",
        "reservation": "",
        "comment": "",
        "ntasks": ntasks,
        "is_step": True,
    }


def _step_from_table(rec: dict[str, Any], s: dict[str, Any], now: float) -> dict[str, Any]:
    """A step row (``srun`` inside the job) as the steps table keeps it."""
    start, end = s.get("start_time"), s.get("end_time")
    state = str(s.get("state") or ("RUNNING" if end is None else "COMPLETED"))
    elapsed = (end if end is not None else now) - start if start is not None else 0
    nodes = list(s.get("nodes") or [])
    counts = {
        "cpu": int(s.get("cpus") or s.get("ncpus") or len(nodes) or 0),
        "mem": int(s.get("mem") or 0),
        "node": len(nodes),
        "gres/gpu": int(s.get("gpus") or 0),
    }
    code = int(s.get("exit_code") or 0)
    sig = int(s.get("signal") or s.get("exit_signal") or 0)
    step_id = "batch" if s.get("step_id") == BATCH_STEP else str(s.get("step_id"))
    row = _step(
        rec,
        step_id,
        str(s.get("name") or ""),
        state,
        exit_text(code, sig),
        start,
        end,
        elapsed,
        nodes,
        counts,
        int(s.get("ntasks") or 1),
    )
    usage = s.get("usage") or {}
    if usage:  # what its tasks used, as srun reported it
        row["max_rss_kb"] = int(usage.get("max_rss_kb", 0))
        row["max_rss_node"] = str(usage.get("max_rss_node") or "")
        row["max_rss_task"] = int(usage.get("max_rss_task", 0))
        row["ave_rss_kb"] = float(usage.get("ave_rss_kb", 0))
        row["user_cpu"] = float(usage.get("user_cpu", 0.0))
        row["system_cpu"] = float(usage.get("system_cpu", 0.0))
    return row
