"""What the API sends to commands: jobs, nodes and partitions as JSON-able dicts.

Derived fields (compressed node lists, run time, TRES strings, resolved output paths) are
computed here once, so every command shows the same thing.
"""

from __future__ import annotations

from typing import Any

from muster.core.config import Config
from muster.core.hostlist import compress
from muster.core.job import Job
from muster.core.outputs import PatternFields, resolve_paths
from muster.core.resources import format_tres
from muster.core.states import COMPLETING_SHORT, JobState
from muster.ctld.nodes import NodeRuntime


def output_paths(job: Job) -> tuple[str, str]:
    """Where the job's stdout and stderr go (its batch host's name for ``%N``), as the
    agent will resolve them (``core.outputs``)."""
    fields = PatternFields(
        job_id=job.job_id, job_name=job.spec.name or "sbatch", user=job.user,
        node=job.batch_host or "", array_job_id=job.array_job_id, array_task_id=job.array_task_id,
    )
    return resolve_paths(fields, job.spec.workdir or "/", job.spec.stdout, job.spec.stderr)


def job_wire(job: Job, now: float) -> dict[str, Any]:
    d = job.to_dict()
    planned = job.planned_nodes if job.state is JobState.PENDING else []
    if job.state is JobState.RUNNING:
        run_time = now - (job.start_time or now)
    elif job.start_time is not None and job.end_time is not None:
        run_time = job.end_time - job.start_time
    else:
        run_time = 0
    stdout_path, stderr_path = output_paths(job)
    d.update(
        nodelist=compress(job.nodes),
        sched_nodelist=compress(planned),
        num_nodes=len(job.alloc) or job.shape.nodes,
        num_cpus=sum(a.cpus for a in job.alloc) or job.shape.total_cpus,
        num_tasks=job.shape.ntasks,
        num_gpus=sum(len(a.gpu_ids) for a in job.alloc) or job.shape.total_gpus,
        state_code=COMPLETING_SHORT if job.completing else job.state.short,
        run_time=int(max(0, run_time)),
        stdout_path=stdout_path,
        stderr_path=stderr_path,
        tres=format_tres(
            sum(a.cpus for a in job.alloc) or job.shape.total_cpus,
            sum(a.mem for a in job.alloc) or job.shape.total_mem,
            len(job.alloc) or job.shape.nodes,
            sum(len(a.gpu_ids) for a in job.alloc) or job.shape.total_gpus,
        ),
        account=job.spec.account or job.user,
        qos=job.spec.qos or "normal",
        batch_host=job.batch_host,
    )
    d["spec"].pop("environment", None)  # large, and private to the job's owner
    d["spec"].pop("script", None)
    return d


def node_wire(node: NodeRuntime, jobs_here: list[int]) -> dict[str, Any]:
    return {
        "name": node.name,
        "addr": node.addr,
        "port": node.port,
        "state": str(node.base_state()),
        "drain": node.drain,
        "responding": node.responding or not node.registered,
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
    }


def partition_wire(config: Config, name: str, nodes: dict[str, NodeRuntime]) -> dict[str, Any]:
    p = config.partition(name)
    assert p is not None
    members = [nodes[n] for n in p.nodes if n in nodes]
    return {
        "name": p.name,
        "nodes": list(p.nodes),
        "nodelist": compress(p.nodes),
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
        "total_cpus": sum(n.cpus for n in members),
        "total_nodes": len(members),
        "total_gpus": sum(n.gpus for n in members),
        "total_mem": sum(n.real_memory for n in members),
    }
