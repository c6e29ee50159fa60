"""The controller's answers in the layout of Slurm's data_parser v0.0.40, for the REST API.

Jobs reuse the builders ``squeue --json`` and ``sacct --json`` print with
(``muster.slurm.slurmjson``: one layout, two front doors); nodes, partitions, reservations,
statistics, shares and the accounting objects are built here from the controller's wire
dicts (docs/api.md). Every builder is pure: a dict in, a dict out.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from muster.slurm.slurmjson import epoch, meta, minutes, node, number, partition, sacct_job, squeue_job
from muster.slurm.squeue_fields import long_state as job_long_state

__all__ = [
    "account",
    "assoc",
    "diag",
    "document",
    "epoch",
    "error_document",
    "job_info",
    "node",
    "partition",
    "qos",
    "reservation",
    "sacct_record",
    "shares",
    "user",
]


def document(command: list[str], cluster: str = "", user: str = "", **body: Any) -> dict[str, Any]:
    """A v0.0.40 response: ``body`` plus ``meta``, ``errors`` and ``warnings``."""
    m = meta(command)
    m["slurm"]["cluster"] = cluster
    m["client"]["user"] = user
    out: dict[str, Any] = dict(body)
    out["meta"] = m
    out.setdefault("errors", [])
    out.setdefault("warnings", [])
    return out


def error_document(
    command: list[str], description: str, error: str, number_: int, source: str, cluster: str = ""
) -> dict[str, Any]:
    """An answer that failed: its ``errors[]`` says why (Slurm's error number and text)."""
    return document(
        command,
        cluster,
        errors=[{"description": description, "error_number": number_, "error": error, "source": source}],
    )


def job_info(j: dict[str, Any]) -> dict[str, Any]:
    """A controller job (``JobWire``) as v0.0.40 ``job_info`` (squeue --json's builder plus
    the fields a REST client reads that squeue leaves out)."""
    out = squeue_job(j, job_long_state(j))
    spec = j.get("spec") if isinstance(j.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    gpus = int(spec.get("gpus_per_node") or 0)
    gtype = spec.get("gpu_type")
    out.update(
        batch_flag=not spec.get("interactive", False),
        hold=bool(j.get("hold")),
        nice=int(spec.get("nice") or 0),
        requeue=bool(spec.get("requeue")) if spec.get("requeue") is not None else True,
        cpus_per_task=number(spec.get("cpus_per_task") or 1),
        memory_per_node=number(spec.get("mem_per_node")),
        memory_per_cpu=number(spec.get("mem_per_cpu")),
        tres_per_node=(f"gres/gpu:{gtype + ':' if gtype else ''}{gpus}" if gpus else ""),
        required_nodes=",".join(spec.get("nodelist") or []),
        excluded_nodes=",".join(spec.get("exclude") or []),
        features=str(spec.get("constraint") or ""),
        resv_name=str(spec.get("reservation") or ""),
        time_minimum=minutes(spec.get("time_min")) if spec.get("time_min") else number(0),
        cluster=str(j.get("cluster") or ""),
        stragglers=_stragglers(j),
    )
    return out


def _stragglers(j: dict[str, Any]) -> list[dict[str, Any]]:
    """muster's: the job's nodes flagged slower than their peers (docs/training.md), each
    with how much slower (a fraction) and both median step times in seconds."""
    progress = j.get("progress") if isinstance(j.get("progress"), dict) else {}
    found = (progress or {}).get("stragglers")
    if not isinstance(found, dict):
        return []
    return [
        {
            "node": node,
            "slower": v.get("slower"),
            "median_step_seconds": v.get("median"),
            "peers_median_step_seconds": v.get("peers"),
            "flagged_time": number(v.get("since")),
        }
        for node, v in sorted(found.items())
        if isinstance(v, dict)
    ]


def sacct_record(r: dict[str, Any]) -> dict[str, Any]:
    """An accounting record as v0.0.40 ``job`` (sacct --json's builder; the state's
    ``current`` a list of flags as the schema has it)."""
    out = sacct_job(r)
    current = out["state"]["current"]
    out["state"]["current"] = [current] if isinstance(current, str) else current
    return out


def reservation(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": str(r.get("name") or ""),
        "node_list": str(r.get("nodelist") or ""),
        "node_count": int(r.get("node_cnt") or 0),
        "core_count": int(r.get("core_cnt") or 0),
        "start_time": epoch(r.get("start")),
        "end_time": epoch(r.get("end")),
        "users": ",".join(r.get("users") or []),
        "accounts": ",".join(r.get("accounts") or []),
        "flags": [str(f) for f in r.get("flags") or []],
        "partition": str(r.get("partition") or ""),
        "tres": f"cpu={int(r.get('core_cnt') or 0)}" + (f",gres/gpu={r['gpu_cnt']}" if r.get("gpu_cnt") else ""),
    }


def diag(jobs: list[dict[str, Any]], now: float, boot_time: float) -> dict[str, Any]:
    """What sdiag's header says, from the jobs in memory."""
    states = [str(j.get("state") or "") for j in jobs]
    return {
        "req_time": epoch(now),
        "req_time_start": epoch(boot_time),
        "jobs_submitted": len(jobs),
        "jobs_started": sum(1 for j in jobs if j.get("start_time")),
        "jobs_completed": states.count("COMPLETED"),
        "jobs_canceled": states.count("CANCELLED"),
        "jobs_failed": sum(states.count(s) for s in ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY")),
        "jobs_pending": states.count("PENDING"),
        "jobs_running": states.count("RUNNING"),
        "job_states_ts": epoch(now),
        "server_thread_count": 1,
        "agent_queue_size": 0,
    }


def _real(value: Any) -> float:
    """A float JSON can carry: NaN is 0, infinity the largest double (JSON has neither)."""
    x = float(value or 0.0)
    if math.isnan(x):
        return 0.0
    return max(-sys.float_info.max, min(sys.float_info.max, x))


def _float(value: Any) -> dict[str, Any]:
    if value is None:
        return {"set": False, "infinite": False, "number": 0.0}
    if math.isinf(float(value)):
        return {"set": True, "infinite": True, "number": 0.0}
    return {"set": True, "infinite": False, "number": _real(value)}


def shares(rows: list[dict[str, Any]], cluster: str) -> dict[str, Any]:
    out = []
    for i, r in enumerate(rows):
        is_user = bool(r.get("user"))
        out.append(
            {
                "id": i,
                "cluster": cluster,
                "name": str(r.get("user") or r.get("account") or ""),
                "parent": str(r.get("account") or "") if is_user else str(r.get("parent") or ""),
                "partition": "",
                "shares": number(r.get("raw_shares"), infinite_when_none=False),
                "shares_normalized": _float(r.get("norm_shares")),
                "usage": int(_real(r.get("raw_usage"))),
                "usage_normalized": _float(r.get("effective_usage")),
                "effective_usage": _real(r.get("effective_usage")),
                "fairshare": {"factor": _real(r.get("fairshare")), "level": _real(r.get("level_fs"))},
                "type": ["USER" if is_user else "ASSOCIATION"],
            }
        )
    return {"shares": out, "total_shares": sum(int(r.get("raw_shares") or 0) for r in rows)}


def account(a: dict[str, Any], assocs: list[dict[str, Any]], cluster: str) -> dict[str, Any]:
    return {
        "name": str(a.get("name") or ""),
        "description": str(a.get("description") or ""),
        "organization": str(a.get("organization") or ""),
        "coordinators": [],
        "flags": [],
        "associations": [_assoc_short(x, cluster) for x in assocs if x.get("account") == a.get("name")],
    }


def _assoc_short(a: dict[str, Any], cluster: str) -> dict[str, Any]:
    return {
        "account": str(a.get("account") or ""),
        "cluster": cluster,
        "partition": "",
        "user": str(a.get("user") or ""),
    }


def user(u: dict[str, Any], assocs: list[dict[str, Any]], cluster: str) -> dict[str, Any]:
    level = str(u.get("admin_level") or "None")
    return {
        "name": str(u.get("name") or ""),
        "administrator_level": [level if level in ("None", "Operator", "Administrator") else "Not Set"],
        "default": {"account": str(u.get("default_account") or ""), "wckey": ""},
        "associations": [_assoc_short(x, cluster) for x in assocs if x.get("user") == u.get("name")],
        "coordinators": [],
        "flags": [],
        "wckeys": [],
    }


def _tres_list(tres: dict[str, Any] | None) -> list[dict[str, Any]]:
    out = []
    for key, count in sorted((tres or {}).items()):
        kind, _, name = str(key).partition("/")
        out.append({"type": kind, "name": name, "id": 0, "count": int(count)})
    return out


def assoc(a: dict[str, Any], cluster: str) -> dict[str, Any]:
    limits = a.get("limits") or {}
    return {
        "account": str(a.get("account") or ""),
        "user": str(a.get("user") or ""),
        "cluster": cluster,
        "partition": "",
        "parent_account": str(a.get("parent") or ""),
        "shares_raw": int(a.get("shares") or 0),
        "qos": [str(q) for q in a.get("qos") or []],
        "default": {"qos": str(a.get("default_qos") or "")},
        "is_default": False,
        "flags": [],
        "max": {
            "jobs": {
                "active": number(limits.get("max_jobs"), infinite_when_none=True),
                "total": number(limits.get("max_submit_jobs"), infinite_when_none=True),
                "per": {"wall_clock": minutes(limits.get("max_wall"))},
            },
            "tres": {
                "total": _tres_list(limits.get("grp_tres")),
                "per": {"job": _tres_list(limits.get("max_tres_per_job"))},
            },
        },
    }


def qos(q: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": str(q.get("name") or ""),
        "description": str(q.get("description") or ""),
        "priority": number(q.get("priority") or 0),
        "flags": [str(f) for f in q.get("flags") or [] if f in _QOS_FLAGS],
        "usage_factor": _float(q.get("usage_factor")),
        "limits": {
            "max": {
                "wall_clock": {"per": {"job": minutes(q.get("max_wall"))}},
                "jobs": {
                    "active_jobs": {"per": {"user": number(q.get("max_jobs_per_user"), infinite_when_none=True)}},
                },
                "tres": {
                    "total": _tres_list(q.get("grp_tres")),
                    "per": {
                        "job": _tres_list(q.get("max_tres_per_job")),
                        "user": _tres_list(q.get("max_tres_per_user")),
                    },
                },
            }
        },
        "preempt": {"list": [], "mode": ["DISABLED"], "exempt_time": number(None)},
    }


_QOS_FLAGS = frozenset(
    "PARTITION_MINIMUM_NODE PARTITION_MAXIMUM_NODE PARTITION_TIME_LIMIT ENFORCE_USAGE_THRESHOLD NO_RESERVE "
    "REQUIRED_RESERVATION DENY_LIMIT OVERRIDE_PARTITION_QOS NO_DECAY USAGE_FACTOR_SAFE RELATIVE".split()
)
