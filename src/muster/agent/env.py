"""The batch script's environment, as a pure function of the job and the node.

``batch_environment(job, ctx)`` starts from what ``sbatch`` captured (``spec.environment``)
and lays Slurm's batch variables over it, so that a variable left over from the submitting
shell (say, a ``SLURM_JOB_ID`` from an enclosing allocation) never leaks into the job. The
names and formats follow what Slurm 22.05 gives a batch script (see
``shared/reference/slurm-22.05/env_sbatch_batchscript.txt``):

* job: ``SLURM_JOB_ID``/``SLURM_JOBID``, ``SLURM_JOB_NAME``, ``SLURM_JOB_USER``/``UID``/``GID``,
  ``SLURM_JOB_PARTITION``, ``SLURM_JOB_ACCOUNT`` (when known), ``SLURM_JOB_QOS``,
  ``SLURM_SUBMIT_DIR``, ``SLURM_SUBMIT_HOST``, ``SLURM_CLUSTER_NAME``, ``SLURM_CONF``,
  ``SLURM_PRIO_PROCESS``, ``SLURM_JOB_START_TIME``/``SLURM_JOB_END_TIME`` (epoch seconds),
  ``SLURM_RESTART_COUNT`` (only after a requeue, as Slurm), array and reservation variables
  and ``SLURM_OPEN_MODE`` (``a``/``t``, with ``--open-mode``) when they apply, ``ENVIRONMENT=BATCH`` and, muster's own, ``MUSTER_JOB_ID``;
* layout: ``SLURM_JOB_NODELIST``/``SLURM_NODELIST`` (compressed hostlist),
  ``SLURM_JOB_NUM_NODES``/``SLURM_NNODES``, ``SLURM_NTASKS``/``SLURM_NPROCS``,
  ``SLURM_TASKS_PER_NODE`` and ``SLURM_JOB_CPUS_PER_NODE`` in Slurm's run-length form
  (``2(x2),1``), ``SLURM_NTASKS_PER_NODE``/``SLURM_CPUS_PER_TASK`` when asked for,
  ``SLURM_CPUS_ON_NODE``, one of ``SLURM_MEM_PER_NODE``/``_PER_CPU``/``_PER_GPU``;
* this process: ``SLURMD_NODENAME``, ``SLURM_NODEID``, ``SLURM_PROCID=0``,
  ``SLURM_LOCALID=0``, ``SLURM_GTIDS=0``, ``SLURM_TOPOLOGY_ADDR``; ``SLURM_TASK_PID`` is
  only known in the child and is added by the launcher;
* GPUs (only when this node gave the job some): ``SLURM_JOB_GPUS``, ``SLURM_GPUS_ON_NODE``,
  ``CUDA_VISIBLE_DEVICES``, ``GPU_DEVICE_ORDINAL``, ``ROCR_VISIBLE_DEVICES``,
  ``ZE_AFFINITY_MASK``, all the allocated indices joined by commas.

The job is the controller's wire form (``Job.to_dict()``), read tolerantly: optional extras
the controller may add are ``account``, ``qos``, ``submit_dir``, ``array_job_id``,
``array_task_id``, ``array_task_count``, ``array_task_min``, ``array_task_max``,
``array_task_step``, and for a heterogeneous job's leader ``het_components`` (every
component's wire form): then ``SLURM_HET_SIZE`` and each component's job variables with a
``_HET_GROUP_<k>`` suffix (``SLURM_JOB_NODELIST_HET_GROUP_1``...) are added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from muster.core.counts import format_counts
from muster.core.hostlist import compress

__all__ = [
    "GPU_VARS",
    "EnvContext",
    "batch_environment",
    "format_counts",
    "tasks_per_node",
    "visible_devices",
    "working_cluster",
]

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# What CUDA, ROCm and oneAPI programs read to see only their GPUs (batch scripts and tasks)
GPU_VARS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")


@dataclass(frozen=True, slots=True)
class EnvContext:
    """What the node knows that the job does not say."""

    node: str
    cluster: str
    conf_path: str
    ctld_addr: str = "127.0.0.1"
    ctld_port: int = 6817
    def_mem_per_cpu: int = 0
    user_home: str | None = None
    user_shell: str | None = None
    # SLURM_TOPOLOGY_ADDR and _PATTERN (core.topoconf.topology_addr); "" for the node alone
    topology_addr: str = ""
    topology_pattern: str = "node"


def working_cluster(ctx: EnvContext) -> str:
    """``SLURM_WORKING_CLUSTER``: the cluster, its controller's address and port, and the
    fixed ``9728:109`` (protocol version and plugin id) that Slurm 22.05 writes."""
    return f"{ctx.cluster}:{ctx.ctld_addr}:{ctx.ctld_port}:9728:109"


def visible_devices(ids: Sequence[int]) -> dict[str, str]:
    """Each of ``GPU_VARS`` naming the GPU indices ``ids``, joined by commas."""
    joined = ",".join(str(i) for i in ids)
    return {name: joined for name in GPU_VARS}


def tasks_per_node(ntasks: int, cpus: Sequence[int], cpus_per_task: int, ntasks_per_node: int | None) -> list[int]:
    """Block distribution: one task per node first, then fill nodes in order up to their
    capacity (``ntasks_per_node`` or the CPUs they gave divided by ``cpus_per_task``), then
    spread what is left round-robin (an overcommitted request)."""
    n = len(cpus)
    if n == 0:
        return []
    counts = [1 if i < ntasks else 0 for i in range(n)]
    left = max(0, ntasks - n)
    cpt = max(1, cpus_per_task)
    for i in range(n):
        if not left:
            break
        cap = ntasks_per_node if ntasks_per_node else max(1, cpus[i] // cpt)
        extra = max(0, min(left, cap - counts[i]))
        counts[i] += extra
        left -= extra
    i = 0
    while left:
        counts[i % n] += 1
        left -= 1
        i += 1
    return counts


def batch_environment(job: Mapping[str, Any], ctx: EnvContext) -> dict[str, str]:
    spec: Mapping[str, Any] = job.get("spec") or {}
    shape: Mapping[str, Any] = job.get("shape") or {}
    alloc: list[Mapping[str, Any]] = list(job.get("alloc") or [])
    env: dict[str, str] = {str(k): str(v) for k, v in (spec.get("environment") or {}).items()}

    # A job submitted with --export=NONE still needs a usable login-like environment.
    user = str(job.get("user") or "")
    env.setdefault("PATH", _DEFAULT_PATH)
    if user:
        env.setdefault("USER", user)
        env.setdefault("LOGNAME", user)
    if ctx.user_home:
        env.setdefault("HOME", ctx.user_home)
    if ctx.user_shell:
        env.setdefault("SHELL", ctx.user_shell)

    job_id = str(job["job_id"])
    nodes = [str(a["node"]) for a in alloc] or [ctx.node]
    node_index = nodes.index(ctx.node) if ctx.node in nodes else 0
    here: Mapping[str, Any] = alloc[node_index] if alloc else {}
    cpus = [int(a.get("cpus", 0)) for a in alloc] or [int(shape.get("cpus_per_node", 1))]
    cpus_per_task = int(spec.get("cpus_per_task") or 1)
    ntasks_per_node = spec.get("ntasks_per_node")
    ntasks = int(shape.get("ntasks") or spec.get("ntasks") or len(nodes))
    nodelist = compress(nodes)

    slurm: dict[str, str] = {
        "ENVIRONMENT": "BATCH",
        "MUSTER_JOB_ID": job_id,
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_JOB_NAME": str(spec.get("name") or "sbatch"),
        "SLURM_JOB_USER": user,
        "SLURM_JOB_UID": str(job.get("uid", "")),
        "SLURM_JOB_GID": str(job.get("gid", "")),
        "SLURM_JOB_PARTITION": str(job.get("partition") or ""),
        "SLURM_JOB_QOS": str(job.get("qos") or spec.get("qos") or "normal"),
        "SLURM_SUBMIT_DIR": str(job.get("submit_dir") or spec.get("workdir") or "/"),
        "SLURM_SUBMIT_HOST": str(job.get("submit_host") or "localhost"),
        "SLURM_CLUSTER_NAME": ctx.cluster,
        "SLURM_WORKING_CLUSTER": working_cluster(ctx),
        "SLURM_CONF": ctx.conf_path,
        "SLURM_PRIO_PROCESS": env.get("SLURM_PRIO_PROCESS", "0"),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_NODE_ALIASES": "(null)",
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_TASKS_PER_NODE": format_counts(tasks_per_node(ntasks, cpus, cpus_per_task, ntasks_per_node)),
        "SLURM_JOB_CPUS_PER_NODE": format_counts(cpus),
        "SLURM_CPUS_ON_NODE": str(here.get("cpus", cpus[node_index])),
        "SLURMD_NODENAME": ctx.node,
        "SLURM_TOPOLOGY_ADDR": ctx.topology_addr or ctx.node,
        "SLURM_TOPOLOGY_ADDR_PATTERN": ctx.topology_pattern,
        "SLURM_NODEID": str(node_index),
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_GTIDS": "0",
    }
    account = job.get("account") or spec.get("account")
    if account:
        slurm["SLURM_JOB_ACCOUNT"] = str(account)
    if ntasks_per_node:
        slurm["SLURM_NTASKS_PER_NODE"] = str(ntasks_per_node)
    if cpus_per_task != 1:
        slurm["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    slurm.update(_memory(spec, here, ctx.def_mem_per_cpu))
    slurm.update(_times(job))
    slurm.update(_gpus(spec, here))
    slurm.update(_array(job))
    restarts = int(job.get("restart_count") or 0)
    if restarts > 0:
        slurm["SLURM_RESTART_COUNT"] = str(restarts)
    if spec.get("reservation"):
        slurm["SLURM_JOB_RESERVATION"] = str(spec["reservation"])
    open_mode = OPEN_MODES.get(str(spec.get("open_mode")))
    if open_mode:  # as sbatch --open-mode sets it: the script's sruns open their files alike
        slurm["SLURM_OPEN_MODE"] = open_mode
    slurm.update(_het(job, ctx))
    env.update(slurm)
    return env


# ``--open-mode`` as Slurm's batch environment says it (``SLURM_OPEN_MODE``, which srun reads).
OPEN_MODES = {"append": "a", "truncate": "t"}


# What a heterogeneous job's batch script is told of each component k, as
# ``<NAME>_HET_GROUP_<k>``; the names without a suffix describe component 0.
HET_KEYS = (
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_QOS",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_TASKS_PER_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_CPUS_PER_TASK",
    "SLURM_MEM_PER_NODE",
    "SLURM_MEM_PER_CPU",
    "SLURM_MEM_PER_GPU",
    "SLURM_GPUS",
    "SLURM_GPUS_PER_TASK",
    "SLURM_JOB_GPUS",
    "SLURM_JOB_START_TIME",
    "SLURM_JOB_END_TIME",
    "SLURM_JOB_RESERVATION",
)


def _het(job: Mapping[str, Any], ctx: EnvContext) -> dict[str, str]:
    """``SLURM_HET_SIZE`` and every component's variables with its ``_HET_GROUP_<k>``
    suffix (from ``het_components``, which the controller adds to a het job's leader);
    a component's GPU variables are those of its first node."""
    components = job.get("het_components")
    if not components:
        return {}
    out = {"SLURM_HET_SIZE": str(len(components))}
    for comp in components:
        suffix = f"_HET_GROUP_{int(comp.get('het_job_offset') or 0)}"
        alloc = comp.get("alloc") or []
        node = str(alloc[0]["node"]) if alloc else ctx.node
        bare = dict(comp)
        bare["het_components"] = None
        bare["spec"] = {**(comp.get("spec") or {}), "environment": {}}
        values = batch_environment(bare, replace(ctx, node=node))
        for key in HET_KEYS:
            if key in values:
                out[key + suffix] = values[key]
    return out


def _memory(spec: Mapping[str, Any], here: Mapping[str, Any], def_mem_per_cpu: int) -> dict[str, str]:
    # Exactly one of these, naming how the job asked (Slurm's rule).
    if spec.get("mem_per_node") is not None:
        return {"SLURM_MEM_PER_NODE": str(spec["mem_per_node"])}
    if spec.get("mem_per_cpu") is not None:
        return {"SLURM_MEM_PER_CPU": str(spec["mem_per_cpu"])}
    if spec.get("mem_per_gpu") is not None:
        return {"SLURM_MEM_PER_GPU": str(spec["mem_per_gpu"])}
    if def_mem_per_cpu > 0:
        return {"SLURM_MEM_PER_CPU": str(def_mem_per_cpu)}
    if int(here.get("mem") or 0) > 0:
        return {"SLURM_MEM_PER_NODE": str(here["mem"])}
    return {}


def _times(job: Mapping[str, Any]) -> dict[str, str]:
    start = job.get("start_time")
    if start is None:
        return {}
    out = {"SLURM_JOB_START_TIME": str(int(start))}
    limit = job.get("time_limit")
    if limit is not None:
        out["SLURM_JOB_END_TIME"] = str(int(start) + int(limit))
    return out


def _gpus(spec: Mapping[str, Any], here: Mapping[str, Any]) -> dict[str, str]:
    ids = [int(i) for i in here.get("gpu_ids") or []]
    out: dict[str, str] = {}
    if spec.get("gpus") is not None:
        out["SLURM_GPUS"] = str(spec["gpus"])
    if spec.get("gpus_per_task") is not None:
        out["SLURM_GPUS_PER_TASK"] = str(spec["gpus_per_task"])
    if not ids:
        return out
    out["SLURM_JOB_GPUS"] = ",".join(str(i) for i in ids)
    out["SLURM_GPUS_ON_NODE"] = str(len(ids))
    out.update(visible_devices(ids))
    return out


def _array(job: Mapping[str, Any]) -> dict[str, str]:
    if job.get("array_task_id") is None:
        return {}
    out = {
        "SLURM_ARRAY_JOB_ID": str(job.get("array_job_id") or job["job_id"]),
        "SLURM_ARRAY_TASK_ID": str(job["array_task_id"]),
    }
    for key in ("count", "min", "max", "step"):
        value = job.get(f"array_task_{key}")
        if value is not None:
            out[f"SLURM_ARRAY_TASK_{key.upper()}"] = str(value)
    return out
