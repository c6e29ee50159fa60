"""What the API sends to commands: jobs, nodes and partitions as JSON-able dicts.

Derived fields (compressed node lists, run time, TRES strings, resolved output paths) are
computed here once, so every command shows the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from muster.core.config import Config
from muster.core.errors import InvalidRequest
from muster.core.hostlist import compress
from muster.core.job import Job
from muster.core.outputs import PatternFields, resolve_paths
from muster.core.resources import format_tres
from muster.core.states import COMPLETING_SHORT, JobState
from muster.core.stragglers import text as straggler_text
from muster.ctld.nodes import NodeRuntime
from muster.protocol.messages import M, MessageError, read


def output_paths(job: Job) -> tuple[str, str]:
    """Where the job's stdout and stderr go (its batch host's name for ``%N``), as the
    agent will resolve them (``core.outputs``)."""
    fields = PatternFields(
        job_id=job.job_id,
        job_name=job.spec.name or "sbatch",
        user=job.user,
        node=job.batch_host or "",
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
    )
    return resolve_paths(fields, job.spec.workdir or "/", job.spec.stdout, job.spec.stderr)


# What squeue reads of a job (``cli.squeue``: columns, filters, sorting, array merging).
# ``?view=brief`` sends only these and the derived fields (no allocation details, no output
# paths): under half the bytes for a long queue. A test renders every squeue column from
# both views and compares.
BRIEF_FIELDS = (
    "job_id",
    "user",
    "uid",
    "group",
    "gid",
    "submit_time",
    "partition",
    "time_limit",
    "priority",
    "eligible_time",
    "start_time",
    "end_time",
    "exit_code",
    "exit_signal",
    "restart_count",
    "completing",
    "planned_start",
    "array_job_id",
    "array_task_id",
    "array_throttle",
    "het_job_id",
    "het_job_offset",
)
BRIEF_SPEC_KEYS = (
    "name",
    "dependency",
    "constraint",
    "exclusive",
    "comment",
    "nodelist",
    "reservation",
    "exclude",
    "nice",
    "workdir",
    "begin_time",
    "gpus_per_node",
    "gpu_type",
    "mem_per_cpu",
    "mem_per_node",
    "cpus_per_task",
    "stdin",
)
BRIEF_SHAPE_KEYS = ("cpus_per_node", "gpus_per_node", "gpu_type", "mem_per_node")


def job_wire(job: Job, now: float, brief: bool = False) -> dict[str, Any]:
    """A job as commands see it; ``brief``: what squeue needs (``BRIEF_FIELDS``), without
    empty values (squeue reads every field with a default; 0 is kept, but for an array
    throttle or a run time of 0, a pending job's: none)."""
    if brief:
        d = {name: getattr(job, name) for name in BRIEF_FIELDS}
        d["spec"] = {k: v for k in BRIEF_SPEC_KEYS if _sent(v := getattr(job.spec, k))}
        d["shape"] = {k: getattr(job.shape, k) for k in BRIEF_SHAPE_KEYS}
    else:
        d = job.to_dict()
        d["spec"].pop("environment", None)  # large, and private to the job's owner
        d["spec"].pop("script", None)
        d["stdout_path"], d["stderr_path"] = output_paths(job)
    d["state"], d["reason"] = str(job.display_state), str(job.reason)  # SUSPENDED: ctld.suspend
    planned = job.planned_nodes if job.state is JobState.PENDING else []
    if job.state is JobState.RUNNING or (job.start_time is not None and job.end_time is not None):
        run_time = job.run_seconds(now)  # less the time it spent suspended
    else:
        run_time = 0
    cpus = sum(a.cpus for a in job.alloc) or job.shape.total_cpus
    gpus = sum(len(a.gpu_ids) for a in job.alloc) or job.shape.total_gpus
    nodes = len(job.alloc) or job.shape.nodes
    d.update(
        nodelist=compress(job.nodes),
        sched_nodelist=compress(planned),
        num_nodes=nodes,
        num_cpus=cpus,
        num_tasks=job.shape.ntasks,
        num_gpus=gpus,
        state_code=COMPLETING_SHORT if job.completing else job.display_state.short,
        run_time=int(max(0, run_time)),
        tres=format_tres(cpus, sum(a.mem for a in job.alloc) or job.shape.total_mem, nodes, gpus),
        account=job.spec.account or job.user,
        qos=job.spec.qos or "normal",
        batch_host=job.batch_host,
        stragglers=straggler_text((job.progress or {}).get("stragglers") or {}),  # node3(+34%)
    )
    if brief:
        # 0 as every reader takes a missing one (a running job's run time: always sent)
        if not job.array_throttle:
            del d["array_throttle"]
        if not d["run_time"] and job.state is not JobState.RUNNING:
            del d["run_time"]
        return {k: v for k, v in d.items() if v is not None and v is not False and v != ""}
    return d


def _sent(value: Any) -> bool:
    return value is not None and value is not False and value != "" and value != []


def node_wire(node: NodeRuntime, jobs_here: list[int]) -> dict[str, Any]:
    return {
        "name": node.name,
        "addr": node.addr,
        "hostname": node.hostname or node.name,
        "port": node.port,
        "state": str(node.base_state()),
        "drain": node.drain,
        "responding": (node.responding and not node.silent) or not node.registered,
        "registered": node.registered,
        "reason": node.reason,
        "reason_time": node.reason_time,
        "reason_user": node.reason_user,
        "cpus": node.cpus,
        "cpus_alloc": node.cpus_alloc,
        "real_memory": node.real_memory,
        "mem_alloc": node.mem_alloc,
        "gpus": node.gpus,
        "gpu_type": node.gpu_type,
        "gpus_alloc": len(node.gpu_ids_alloc),
        "gres": node.gres,
        "features": list(node.features),
        "partitions": node.partitions,
        "boot_time": node.boot_time,
        "last_seen": node.last_seen,
        "agent_start_time": node.agent_start_time,
        "jobs": jobs_here,
        "weight": node.weight,
        "version": node.version,
        "config_hash": node.config_hash,
        "config_mismatch": node.config_mismatch,  # the controller's hash when they differ
        "containment": node.containment,
    }


def partition_wire(
    config: Config,
    name: str,
    nodes: dict[str, NodeRuntime],
    lists: Callable[[Config, str, Sequence[str]], tuple[list[str], str]] | None = None,
) -> dict[str, Any]:
    """``lists``: the partition's (node names, hostlist), if kept (``columns.PartitionCache``)."""
    p = config.partition(name)
    assert p is not None
    members = [nodes[n] for n in p.nodes if n in nodes]
    names, hostlist = lists(config, p.name, p.nodes) if lists is not None else (list(p.nodes), compress(p.nodes))
    return {
        "name": p.name,
        "nodes": names,
        "nodelist": hostlist,
        "default": p.default,
        "state": p.state.upper(),
        "max_time": p.max_time,
        "default_time": p.default_time,
        "max_nodes": p.max_nodes,
        "min_nodes": p.min_nodes,
        "priority_tier": p.priority_tier,
        "priority_job_factor": p.priority_job_factor,
        "allow_accounts": p.allow_accounts,
        "allow_groups": p.allow_groups,
        "deny_accounts": p.deny_accounts,
        "oversubscribe": p.oversubscribe,
        "grace_time": p.grace_time,
        "preempt_mode": config.partition_preempt_mode(p),
        "total_cpus": sum(n.cpus for n in members),
        "total_nodes": len(members),
        "total_gpus": sum(n.gpus for n in members),
        "total_mem": sum(n.real_memory for n in members),
    }


def message(model: type[M], body: M | Mapping[str, Any]) -> M:
    """An agent's message as its typed model (``protocol.messages``); one that does not fit
    is refused with a 400 naming the field (``InvalidRequest``), never read with defaults."""
    try:
        return read(model, body)
    except MessageError as exc:
        raise InvalidRequest(str(exc)) from None
