"""``sacct --json`` and ``squeue --json`` in the layout of Slurm's data_parser v0.0.40
(the one Slurm 23.11 and 24.05 print), which clients such as torchx parse.

The layout in brief (docs/clients.md lists the fields):

* The document is ``{"meta": ..., "errors": [], "warnings": [], "jobs": [...]}``.
* A number that may be unset or unlimited is an object ``{"set": bool, "infinite": bool,
  "number": N}``; times are epochs, time limits minutes.
* States are lists of flags (``["RUNNING"]``); an exit code is ``{"status": [...],
  "return_code": <number>, "signal": {"id": <number>, "name": "KILL"}}`` where the status
  is ``SUCCESS``, ``ERROR`` (a non-zero exit) or ``SIGNALED``.

Only the standard library's cheap parts: the output goes through
``muster.protocol.wirejson`` so that the ``json`` package is never imported.
"""

from __future__ import annotations

from muster.protocol.wirejson import dumps

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

DATA_PARSER = "data_parser/v0.0.40"

# Signal names as Slurm prints them (without "SIG"); numbers are Linux's.
_SIGNALS = {
    1: "HUP",
    2: "INT",
    3: "QUIT",
    4: "ILL",
    6: "ABRT",
    7: "BUS",
    8: "FPE",
    9: "KILL",
    10: "USR1",
    11: "SEGV",
    12: "USR2",
    13: "PIPE",
    14: "ALRM",
    15: "TERM",
    17: "CHLD",
    18: "CONT",
    19: "STOP",
    20: "TSTP",
}


def number(value: object, infinite_when_none: bool = False) -> dict[str, Any]:
    """A v0.0.40 optional number: unset (or unlimited) when ``value`` is None."""
    if value is None or value == "":
        return {"set": infinite_when_none, "infinite": infinite_when_none, "number": 0}
    return {"set": True, "infinite": False, "number": int(value)}  # type: ignore[call-overload]


def epoch(value: object) -> dict[str, Any]:
    """A time: set when known, else unset with number 0."""
    return number(int(float(value)) if value else None)  # type: ignore[arg-type]


def minutes(limit_seconds: object) -> dict[str, Any]:
    """A time limit kept in seconds, as minutes; no limit is infinite."""
    if limit_seconds is None or limit_seconds == "":
        return {"set": True, "infinite": True, "number": 0}
    return number(int(float(limit_seconds)) // 60)  # type: ignore[arg-type]


def exit_code(code: int, signal: int) -> dict[str, Any]:
    """A process's end: its return code and the signal that ended it, if one did."""
    if signal:
        status = ["SIGNALED"]
    elif code:
        status = ["ERROR"]
    else:
        status = ["SUCCESS"]
    return {
        "status": status,
        "return_code": number(code),
        "signal": {"id": number(signal if signal else None), "name": _SIGNALS.get(signal, "") if signal else ""},
    }


def parse_exit_text(text: object) -> tuple[int, int]:
    """sacct's ``code:signal`` (``"3:0"``) -> (3, 0); anything else is (0, 0)."""
    code, _, sig = str(text or "0:0").partition(":")
    try:
        return int(code or 0), int(sig or 0)
    except ValueError:
        return 0, 0


def meta(command: list[str]) -> dict[str, Any]:
    from muster import __version__

    return {
        "plugin": {"type": "", "name": "", "data_parser": DATA_PARSER, "accounting_storage": ""},
        "client": {"source": "", "user": "", "group": ""},
        "command": command,
        "slurm": {"version": {"major": "23", "minor": "11", "micro": "0"}, "release": "23.11.0", "cluster": ""},
        "muster": {"version": __version__},
    }


def document(command: list[str], jobs: list[dict[str, Any]], key: str = "jobs") -> str:
    """A v0.0.40 response: ``meta``, ``errors``, ``warnings`` and the items under ``key``."""
    return dumps({"meta": meta(command), "errors": [], "warnings": [], key: jobs})


# --- sacct -----------------------------------------------------------------------------------------


def _tres_list(text: object) -> list[dict[str, Any]]:
    """``cpu=2,mem=2000M,gres/gpu=4`` -> v0.0.40 TRES entries (``type``, ``name``, ``count``)."""
    out = []
    for item in str(text or "").split(","):
        key, _, value = item.partition("=")
        if not key or not value:
            continue
        kind, _, name = key.partition("/")
        count = value
        if kind == "mem":
            mult = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(value[-1:].upper(), 0)
            count = str(int(float(value[:-1]) * mult)) if mult else value
        try:
            n = int(count)
        except ValueError:
            continue
        out.append({"type": kind, "name": name, "id": 0, "count": n})
    return out


def _sacct_time(r: dict[str, Any]) -> dict[str, Any]:
    elapsed = int(r.get("elapsed") or 0)
    return {
        "elapsed": elapsed,
        "eligible": int(float(r.get("eligible") or 0)),
        "end": int(float(r.get("end") or 0)),
        "start": 0 if r.get("start_none") else int(float(r.get("start") or 0)),
        "submission": int(float(r.get("submit") or 0)),
        "suspended": 0,
        "limit": minutes(r.get("time_limit")),
        "system": {"seconds": int(float(r.get("system_cpu") or 0)), "microseconds": 0},
        "user": {"seconds": int(float(r.get("user_cpu") or 0)), "microseconds": 0},
        "total": {
            "seconds": int(float(r.get("user_cpu") or 0) + float(r.get("system_cpu") or 0)),
            "microseconds": 0,
        },
    }


def _sacct_step(s: dict[str, Any]) -> dict[str, Any]:
    code, sig = parse_exit_text(s.get("exit_code"))
    step_name = str(s.get("job_id_raw") or "").partition(".")[2]
    time_ = _sacct_time(s)
    del time_["limit"], time_["eligible"], time_["submission"]
    # v0.0.40 gives a step's start and end as number objects (a job's are plain numbers)
    time_["start"], time_["end"] = number(time_["start"] or None), number(time_["end"] or None)
    return {
        "step": {"id": str(s.get("job_id_raw") or ""), "name": str(s.get("name") or step_name)},
        "state": [str(s.get("state") or "UNKNOWN")],
        "exit_code": exit_code(code, sig),
        "time": time_,
        "nodes": {"count": int(s.get("nnodes") or 0), "range": str(s.get("nodelist") or "")},
        "tasks": {"count": int(s.get("ntasks") or 0)},
        "tres": {"allocated": _tres_list(s.get("alloc_tres")), "requested": {"max": [], "min": [], "average": []}},
    }


def sacct_job(r: dict[str, Any]) -> dict[str, Any]:
    """One accounting record (``ctld.records.record_wire``) in the v0.0.40 layout."""
    code, sig = parse_exit_text(r.get("exit_code"))
    dcode, dsig = parse_exit_text(r.get("derived_exit_code"))
    array_job, array_task = r.get("array_job_id"), r.get("array_task_id")
    state = str(r.get("state") or "UNKNOWN")
    return {
        "job_id": int(r.get("job_id") or 0),
        "name": str(r.get("name") or ""),
        "user": str(r.get("user") or ""),
        "group": str(r.get("group") or ""),
        "account": str(r.get("account") or ""),
        "partition": str(r.get("partition") or ""),
        "qos": str(r.get("qos") or ""),
        "cluster": str(r.get("cluster") or ""),
        "nodes": str(r.get("nodelist") or ""),
        "working_directory": str(r.get("workdir") or ""),
        "comment": {
            "job": str(r.get("comment") or ""),
            "system": str(r.get("system_comment") or ""),
            "administrator": "",
        },
        "constraints": str(r.get("constraints") or ""),
        "reservation": {"id": 0, "name": str(r.get("reservation") or "")},
        "priority": number(r.get("priority") if r.get("priority") != "" else None),
        "restart_cnt": int(r.get("restart_count") or 0),
        # muster's: failed nodes replaced in this attempt's allocation (docs/recovery.md)
        "replacements": [
            {k: e.get(k) for k in ("old", "new", "cause", "time", "detected")} for e in r.get("replacements") or []
        ],
        # A string, as Slurm <= 23.02 printed it: torchx (0.7, the release on PyPI) looks the
        # state up as ``SLURM_STATES[job["state"]["current"]]``; v0.0.40 makes it a list.
        "state": {"current": state, "reason": str(r.get("reason") or "None")},
        "exit_code": exit_code(code, sig),
        "derived_exit_code": exit_code(dcode, dsig),
        "time": _sacct_time(r),
        "array": {
            "job_id": int(array_job or 0),
            "task_id": number(array_task),
            "task": "",
            "limits": {"max": {"running": {"tasks": int(r.get("array_throttle") or 0)}}},
        },
        "het": {"job_id": int(r.get("het_job_id") or 0), "job_offset": number(r.get("het_job_offset"))},
        "allocation_nodes": int(r.get("nnodes") or 0),
        "required": {"CPUs": int(r.get("req_cpus") or 0), "memory_per_node": number(r.get("req_mem"))},
        "tres": {"allocated": _tres_list(r.get("alloc_tres")), "requested": _tres_list(r.get("req_tres"))},
        "steps": [_sacct_step(s) for s in r.get("steps") or []],
    }


def sacct_document(records: list[dict[str, Any]], command: list[str]) -> str:
    return document(command, [sacct_job(r) for r in records])


# --- squeue ----------------------------------------------------------------------------------------


def _allocated_nodes(j: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "nodename": str(a.get("node") or ""),
            "cpus_used": int(a.get("cpus") or 0),
            "memory_used": int(a.get("mem") or 0),
            "memory_allocated": int(a.get("mem") or 0),
        }
        for a in j.get("alloc") or []
        if isinstance(a, dict)
    ]


def squeue_job(j: dict[str, Any], state: str) -> dict[str, Any]:
    """One controller job (``JobWire``) in the v0.0.40 layout; ``state`` is its long state."""
    spec = j.get("spec") if isinstance(j.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    code, sig = int(j.get("exit_code") or 0), int(j.get("exit_signal") or 0)
    ended = state not in ("PENDING", "RUNNING", "SUSPENDED", "STOPPED", "COMPLETING", "CONFIGURING")
    array_job = j.get("array_job_id")
    planned = j.get("planned_nodes") or []
    alloc = _allocated_nodes(j)
    argv = spec.get("argv") or []
    return {
        "job_id": int(j.get("job_id") or 0),
        "name": str(spec.get("name") or ""),
        "user_name": str(j.get("user") or ""),
        "user_id": j.get("uid"),
        "group_name": str(j.get("group") or ""),
        "group_id": j.get("gid"),
        "account": str(j.get("account") or ""),
        "partition": str(j.get("partition") or ""),
        "qos": str(j.get("qos") or ""),
        "job_state": [state],
        "state_reason": str(j.get("reason") or "None"),
        "nodes": str(j.get("nodelist") or ""),
        "batch_host": str(j.get("batch_host") or ""),
        "node_count": number(j.get("num_nodes")),
        "cpus": number(j.get("num_cpus")),
        "tasks": number(j.get("num_tasks")),
        "priority": number(j.get("priority")),
        "submit_time": epoch(j.get("submit_time")),
        "eligible_time": epoch(j.get("eligible_time")),
        "start_time": epoch(j.get("start_time") or j.get("planned_start")),
        "end_time": epoch(j.get("end_time")),
        "time_limit": minutes(j.get("time_limit")),
        "array_job_id": number(array_job or 0),
        "array_task_id": number(j.get("array_task_id")),
        "array_max_tasks": number(j.get("array_throttle") or 0),
        "array_task_string": str(j.get("array_tasks_text") or ""),
        "het_job_id": number(j.get("het_job_id") or 0),
        "het_job_offset": number(j.get("het_job_offset")),
        "restart_cnt": int(j.get("restart_count") or 0),
        "exit_code": exit_code(code, sig) if ended else exit_code(0, 0),
        "command": " ".join(str(a) for a in argv) if argv else "",
        "current_working_directory": str(spec.get("workdir") or ""),
        "standard_output": str(j.get("stdout_path") or ""),
        "standard_error": str(j.get("stderr_path") or ""),
        "standard_input": str(spec.get("stdin") or "/dev/null"),
        "comment": str(spec.get("comment") or ""),
        "dependency": str(spec.get("dependency") or ""),
        "tres_alloc_str": str(j.get("tres") or ""),
        "job_resources": {
            "nodes": str(j.get("nodelist") or ""),
            "scheduled_nodes": ",".join(str(n) for n in planned),
            "allocated_cores": sum(a["cpus_used"] for a in alloc),
            "allocated_cpus": sum(a["cpus_used"] for a in alloc),
            "allocated_hosts": len(alloc),
            "allocated_nodes": alloc,
        },
    }


# --- nodes and partitions (scontrol show --json, sinfo --json, the REST API) ------------------

_NODE_BASE = {
    "IDLE": "IDLE",
    "MIXED": "MIXED",
    "MIX": "MIXED",
    "ALLOCATED": "ALLOCATED",
    "ALLOC": "ALLOCATED",
    "DOWN": "DOWN",
    "FUTURE": "FUTURE",
    "UNKNOWN": "UNKNOWN",
    "COMPLETING": "COMPLETING",
}


def node_state(n: dict[str, Any]) -> list[str]:
    """The node's base state and its flags (``["IDLE", "DRAIN"]``)."""
    base = _NODE_BASE.get(str(n.get("state") or "UNKNOWN").upper(), "UNKNOWN")
    flags = [base]
    if n.get("drain"):
        flags.append("DRAIN")
    if n.get("responding") is False:
        flags.append("NOT_RESPONDING")
    return flags


def node(n: dict[str, Any], cluster: str) -> dict[str, Any]:
    gpus = int(n.get("gpus") or 0)
    gtype = n.get("gpu_type")
    gres = f"gpu:{gtype + ':' if gtype else ''}{gpus}" if gpus else ""
    used = f"gpu:{gtype + ':' if gtype else ''}{int(n.get('gpus_alloc') or 0)}" if gpus else ""
    cpus = int(n.get("cpus") or 0)
    alloc = int(n.get("cpus_alloc") or 0)
    mem = int(n.get("real_memory") or 0)
    tres = f"cpu={cpus},mem={mem}M,billing={cpus}" + (f",gres/gpu={gpus}" if gpus else "")
    return {
        "name": str(n.get("name") or ""),
        "hostname": str(n.get("hostname") or n.get("name") or ""),
        "address": str(n.get("addr") or ""),
        "port": int(n.get("port") or 0),
        "cluster_name": cluster,
        "state": node_state(n),
        "cpus": cpus,
        "effective_cpus": cpus,
        "alloc_cpus": alloc,
        "alloc_idle_cpus": max(0, cpus - alloc),
        "real_memory": mem,
        "alloc_memory": int(n.get("mem_alloc") or 0),
        "free_mem": number(max(0, mem - int(n.get("mem_alloc") or 0))),
        "gres": gres,
        "gres_used": used,
        "gres_drained": "N/A",
        "features": [str(f) for f in n.get("features") or []],
        "active_features": [str(f) for f in n.get("features") or []],
        "partitions": [str(p) for p in n.get("partitions") or []],
        "reason": str(n.get("reason") or ""),
        "reason_changed_at": epoch(n.get("reason_time")),
        "reason_set_by_user": str(n.get("reason_user") or ""),
        "boot_time": epoch(n.get("boot_time")),
        "slurmd_start_time": epoch(n.get("agent_start_time")),
        "last_busy": epoch(n.get("last_seen")),
        "weight": int(n.get("weight") or 1),
        "version": str(n.get("version") or ""),
        "tres": tres,
        "tres_used": f"cpu={alloc},mem={int(n.get('mem_alloc') or 0)}M" if alloc else "",
        "sockets": 1,
        "cores": cpus,
        "threads": 1,
        "boards": 1,
    }


def partition(p: dict[str, Any], cluster: str) -> dict[str, Any]:
    state = str(p.get("state") or "UP").upper()
    return {
        "name": str(p.get("name") or ""),
        "cluster": cluster,
        "nodes": {
            "configured": str(p.get("nodelist") or ""),
            "total": int(p.get("total_nodes") or 0),
            "allowed_allocation": "",
        },
        "accounts": {
            "allowed": ",".join(p.get("allow_accounts") or []),
            "deny": ",".join(p.get("deny_accounts") or []),
        },
        "groups": {"allowed": ",".join(p.get("allow_groups") or [])},
        "cpus": {"total": int(p.get("total_cpus") or 0), "task_binding": 0},
        "tres": {
            "configured": f"cpu={int(p.get('total_cpus') or 0)},mem={int(p.get('total_mem') or 0)}M,"
            f"node={int(p.get('total_nodes') or 0)}"
            + (f",gres/gpu={int(p.get('total_gpus') or 0)}" if p.get("total_gpus") else ""),
        },
        "defaults": {"time": minutes(p.get("default_time"))},
        "maximums": {
            "time": minutes(p.get("max_time")),
            "nodes": number(p.get("max_nodes"), infinite_when_none=True),
        },
        "minimums": {"nodes": int(p.get("min_nodes") or 0)},
        "priority": {
            "job_factor": int(p.get("priority_job_factor") or 0),
            "tier": int(p.get("priority_tier") or 0),
        },
        "partition": {"state": [state if state in ("UP", "DOWN", "DRAIN", "INACTIVE") else "UNKNOWN"]},
        "default": bool(p.get("default")),
    }


def _span(values: list[int]) -> dict[str, Any]:
    return {"minimum": min(values, default=0), "maximum": max(values, default=0)}


def sinfo_entries(parts: list[dict[str, Any]], nodes: list[dict[str, Any]], cluster: str) -> list[dict[str, Any]]:
    """``sinfo --json``'s ``sinfo`` list: one entry per partition and node state (the rows
    plain sinfo prints), each with its nodes, CPU and memory figures and its partition."""
    by_name = {str(n.get("name")): n for n in nodes}
    out = []
    for p in parts:
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for name in p.get("nodes") or []:
            n = by_name.get(str(name))
            if n is not None:
                groups.setdefault(tuple(node_state(n)), []).append(n)
        for state, members in groups.items():
            cpus = [int(n.get("cpus") or 0) for n in members]
            alloc = [int(n.get("cpus_alloc") or 0) for n in members]
            mem = [int(n.get("real_memory") or 0) for n in members]
            free = [max(0, m - int(n.get("mem_alloc") or 0)) for m, n in zip(mem, members, strict=True)]
            down = state[0] in ("DOWN", "FUTURE", "UNKNOWN") or "DRAIN" in state
            first = node(members[0], cluster)
            reason = members[0]
            out.append(
                {
                    "port": int(members[0].get("port") or 0),
                    "node": {"state": list(state)},
                    "nodes": {
                        "allocated": sum(1 for a in alloc if a),
                        "idle": sum(1 for a in alloc if not a) if not down else 0,
                        "other": len(members) if down else 0,
                        "total": len(members),
                        "hostnames": [str(n.get("hostname") or n.get("name")) for n in members],
                        "addresses": [str(n.get("addr") or "") for n in members],
                        "nodes": [str(n.get("name")) for n in members],
                    },
                    "cpus": {
                        "allocated": sum(alloc),
                        "idle": 0 if down else sum(cpus) - sum(alloc),
                        "other": sum(cpus) if down else 0,
                        "total": sum(cpus),
                        "minimum": min(cpus, default=0),
                        "maximum": max(cpus, default=0),
                        "load": {"minimum": 0, "maximum": 0},
                        "per_node": {"max": number(None)},
                    },
                    "sockets": {"minimum": 1, "maximum": 1},
                    "cores": _span(cpus),
                    "threads": {"minimum": 1, "maximum": 1},
                    "disk": _span([int(n.get("tmp_disk") or 0) for n in members]),
                    "memory": {
                        **_span(mem),
                        "free": {"minimum": number(min(free, default=0)), "maximum": number(max(free, default=0))},
                        "allocated": sum(int(n.get("mem_alloc") or 0) for n in members),
                    },
                    "weight": _span([int(n.get("weight") or 1) for n in members]),
                    "features": {"total": ",".join(first["features"]), "active": ",".join(first["active_features"])},
                    "gres": {"total": first["gres"], "used": first["gres_used"]},
                    "cluster": cluster,
                    "comment": "",
                    "extra": "",
                    "reason": {
                        "description": str(reason.get("reason") or ""),
                        "time": epoch(reason.get("reason_time")),
                        "user": str(reason.get("reason_user") or ""),
                    },
                    "reservation": "",
                    "partition": partition(p, cluster),
                }
            )
    return out
