"""The environment of one task of a job step, as a pure function of the step's grant.

``task_environment(base, grant, node, local, ctx, launch)`` starts from the environment
srun sent (its own, as ``srun --export=ALL`` would: inside a batch job that already holds
the batch script's variables) and lays the step's and the task's variables over it. Names
and formats follow what Slurm 22.05 gives srun's tasks
(``shared/reference/slurm-22.05/env_srun_*.txt``):

* job: ``SLURM_JOB_ID``/``SLURM_JOBID``, ``SLURM_JOB_NAME``, ``SLURM_JOB_USER``/``UID``/``GID``,
  ``SLURM_JOB_PARTITION``, ``SLURM_JOB_ACCOUNT``, ``SLURM_JOB_QOS``, ``SLURM_JOB_NODELIST``,
  ``SLURM_JOB_NUM_NODES``, ``SLURM_JOB_CPUS_PER_NODE``, ``SLURM_SUBMIT_DIR``/``HOST``,
  ``SLURM_CLUSTER_NAME``, ``SLURM_WORKING_CLUSTER``, ``SLURM_CONF``, ``SLURM_PRIO_PROCESS``,
  ``SLURM_UMASK``, ``SLURM_RESTART_COUNT`` (after a requeue) and array variables;
* step (``SLURM_NODELIST``, ``SLURM_NNODES``, ``SLURM_NTASKS`` and ``SLURM_TASKS_PER_NODE``
  describe the *step*, as srun sets them): ``SLURM_STEP_ID``/``SLURM_STEPID``,
  ``SLURM_STEP_NODELIST``, ``SLURM_STEP_NUM_NODES``, ``SLURM_STEP_NUM_TASKS``,
  ``SLURM_STEP_TASKS_PER_NODE``, ``SLURM_NPROCS``, ``SLURM_NTASKS_PER_NODE`` and
  ``SLURM_CPUS_PER_TASK`` when asked, ``SLURM_DISTRIBUTION`` for cyclic,
  ``SLURM_SRUN_COMM_HOST``/``PORT``, ``SLURM_STEP_LAUNCHER_PORT``, ``SLURM_LAUNCH_NODE_IPADDR``;
* node and task: ``SLURMD_NODENAME``, ``SLURM_NODEID`` (index in the step),
  ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_GTIDS``, ``SLURM_CPUS_ON_NODE``,
  ``SLURM_TOPOLOGY_ADDR``/``_PATTERN``; ``SLURM_TASK_PID`` is set in the child itself;
* ``srun -E/--preserve-env`` (``launch["preserve_env"]``): the allocation's
  ``SLURM_NNODES``/``SLURM_JOB_NUM_NODES``/``SLURM_NTASKS``/``SLURM_NPROCS`` stay as srun saw them;
* GPUs, when the task sees some: ``CUDA_VISIBLE_DEVICES``, ``GPU_DEVICE_ORDINAL``,
  ``ROCR_VISIBLE_DEVICES``, ``ZE_AFFINITY_MASK`` (the task's binding, see ``core.steps``),
  ``SLURM_STEP_GPUS`` (the same), ``SLURM_GPUS_ON_NODE`` (the step's GPUs on the node),
  ``SLURMD_TRES_BIND`` with ``--gpu-bind`` (``gpu:<its value>``) or ``--gpus-per-task``
  (``gpu:per_task:N``). The indices are the node's physical ones, as Slurm without
  ``ConstrainDevices`` sets them (muster confines devices by cgroup but does not renumber);
* beyond Slurm, what ``torch.distributed`` reads (unless ``launch["torch_env"]`` is false):
  ``MASTER_ADDR`` (the step's first node's address), ``MASTER_PORT``
  (``core.steps.master_port``), ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``LOCAL_WORLD_SIZE``, ``NODE_RANK``. A ``MASTER_ADDR``/``MASTER_PORT`` the user exported
  is kept; the ranks never are (inherited ones would be wrong);
* a het step's part (``launch["het"]``, see ``cli.hetstep``): ``SLURM_PROCID`` and
  ``SLURM_GTIDS`` run across the step's components, ``SLURM_NTASKS``/``SLURM_NPROCS`` count
  all of them, ``SLURM_HET_SIZE``; the PyTorch variables stay the component's own;
* ``MUSTER_JOB_ID`` and ``MUSTER_STEP_ID``; an inherited ``MUSTER_JOB_TAG`` (the batch
  script's process tag) is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.agent.env import EnvContext, format_counts, visible_devices, working_cluster
from muster.core.hostlist import compress

__all__ = ["task_environment"]


def task_environment(
    base: Mapping[str, str],
    grant: Mapping[str, Any],
    node: str,
    local: int,
    ctx: EnvContext,
    launch: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The environment of local task ``local`` of the step on ``node``."""
    launch = launch or {}
    job: Mapping[str, Any] = grant["job"]
    step: Mapping[str, Any] = grant["step"]
    env = {str(k): str(v) for k, v in base.items()}
    # The batch script's processes carry this tag (inherited by the srun in it); the step's
    # tasks are the step runner's to signal and stop, not the batch script's supervisor's.
    env.pop("MUSTER_JOB_TAG", None)

    job_id = str(grant["job_id"])
    step_id = str(grant["step_id"])
    nodes: list[str] = list(step["nodes"])
    index = nodes.index(node)
    tasks_here: list[int] = list(step["tasks"][index])
    task = tasks_here[local]
    counts = [len(t) for t in step["tasks"]]
    ntasks = sum(counts)
    nodelist = compress(nodes)
    step_cpus = int(step["cpus"][index]) if step.get("cpus") else 0
    job_nodes = list(job.get("nodes") or nodes)
    job_cpus = [int(c) for c in job.get("cpus") or []]
    cpus_here = step_cpus or (job_cpus[job_nodes.index(node)] if node in job_nodes and job_cpus else 1)
    launch_host = str(launch.get("launch_host") or "127.0.0.1")
    srun_port = str(launch.get("srun_port") or 0)

    out: dict[str, str] = {
        "MUSTER_JOB_ID": job_id,
        "MUSTER_STEP_ID": step_id,
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_JOB_NAME": str(job.get("name") or "srun"),
        "SLURM_JOB_USER": str(grant.get("user") or ""),
        "SLURM_JOB_UID": str(grant.get("uid", "")),
        "SLURM_JOB_GID": str(grant.get("gid", "")),
        "SLURM_JOB_PARTITION": str(job.get("partition") or ""),
        "SLURM_JOB_ACCOUNT": str(job.get("account") or grant.get("user") or ""),
        "SLURM_JOB_QOS": str(job.get("qos") or "normal"),
        "SLURM_JOB_NODELIST": compress(job_nodes),
        "SLURM_JOB_NUM_NODES": str(len(job_nodes)),
        "SLURM_JOB_CPUS_PER_NODE": format_counts(job_cpus) if job_cpus else str(cpus_here),
        "SLURM_SUBMIT_DIR": str(job.get("workdir") or "/"),
        "SLURM_SUBMIT_HOST": str(job.get("submit_host") or "localhost"),
        "SLURM_CLUSTER_NAME": ctx.cluster,
        "SLURM_WORKING_CLUSTER": working_cluster(ctx),
        "SLURM_CONF": ctx.conf_path,
        "SLURM_PRIO_PROCESS": env.get("SLURM_PRIO_PROCESS", "0"),
        "SLURM_UMASK": str(launch.get("umask") or env.get("SLURM_UMASK") or "0022"),
        # the step
        "SLURM_STEP_ID": step_id,
        "SLURM_STEPID": step_id,
        "SLURM_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_TASKS_PER_NODE": format_counts(counts),
        "SLURM_STEP_TASKS_PER_NODE": format_counts(counts),
        "SLURM_SRUN_COMM_HOST": launch_host,
        "SLURM_SRUN_COMM_PORT": srun_port,
        "SLURM_STEP_LAUNCHER_PORT": srun_port,
        "SLURM_LAUNCH_NODE_IPADDR": launch_host,
        # the node and the task
        "SLURMD_NODENAME": node,
        "SLURM_TOPOLOGY_ADDR": ctx.topology_addr or node,
        "SLURM_TOPOLOGY_ADDR_PATTERN": ctx.topology_pattern,
        "SLURM_NODEID": str(index),
        "SLURM_PROCID": str(task),
        "SLURM_LOCALID": str(local),
        "SLURM_GTIDS": ",".join(str(t) for t in tasks_here),
        "SLURM_CPUS_ON_NODE": str(cpus_here),
    }
    if step.get("ntasks_per_node"):
        out["SLURM_NTASKS_PER_NODE"] = str(step["ntasks_per_node"])
    cpt = int(step.get("cpus_per_task") or 1)
    if cpt != 1:
        out["SLURM_CPUS_PER_TASK"] = str(cpt)
    if step.get("distribution") in ("cyclic", "arbitrary"):
        out["SLURM_DISTRIBUTION"] = str(step["distribution"])
    restarts = int(job.get("restart_count") or 0)
    if restarts > 0:
        out["SLURM_RESTART_COUNT"] = str(restarts)
    if job.get("array_task_id") is not None:
        out["SLURM_ARRAY_JOB_ID"] = str(job.get("array_job_id") or grant["job_id"])
        out["SLURM_ARRAY_TASK_ID"] = str(job["array_task_id"])
    out.update(_gpus(step, index, local))
    out.update(_het(launch.get("het"), task, tasks_here))
    preserved = launch.get("preserve_env") or {}
    if isinstance(preserved, dict):  # srun -E: the allocation's node and task counts
        out.update({str(k): str(v) for k, v in preserved.items() if str(k) in _PRESERVABLE})
    env.update(out)
    if launch.get("torch_env", True):
        _torch(env, step, grant, index, local, task, ntasks, len(tasks_here))
    return env


def _het(het: object, task: int, tasks_here: list[int]) -> dict[str, str]:
    """A het step's part (``launch["het"]``: its first rank, the step's total, the job's
    component count): ranks run across the components, the counts are the whole step's."""
    if not isinstance(het, dict):
        return {}
    first, total = int(het.get("first") or 0), int(het.get("total") or 0)
    out = {
        "SLURM_PROCID": str(first + task),
        "SLURM_GTIDS": ",".join(str(first + t) for t in tasks_here),
        "SLURM_HET_SIZE": str(int(het.get("size") or 1)),
    }
    if total > 0:
        out["SLURM_NTASKS"] = out["SLURM_NPROCS"] = str(total)
    return out


_PRESERVABLE = frozenset({"SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "SLURM_NPROCS"})


def _gpus(step: Mapping[str, Any], index: int, local: int) -> dict[str, str]:
    node_gpus = [int(g) for g in (step.get("gpus") or [[]])[index]]
    if not node_gpus:
        return {}
    bound = step.get("task_gpus")
    mine = [int(g) for g in bound[index][local]] if bound else node_gpus
    out = visible_devices(mine)
    out["SLURM_STEP_GPUS"] = ",".join(str(g) for g in mine)
    out["SLURM_GPUS_ON_NODE"] = str(len(node_gpus))
    if step.get("gpu_bind"):
        out["SLURMD_TRES_BIND"] = f"gpu:{step['gpu_bind']}"
    elif step.get("gpus_per_task"):
        out["SLURMD_TRES_BIND"] = f"gpu:per_task:{step['gpus_per_task']}"
    return out


def _torch(
    env: dict[str, str],
    step: Mapping[str, Any],
    grant: Mapping[str, Any],
    index: int,
    local: int,
    task: int,
    ntasks: int,
    local_size: int,
) -> None:
    addrs = step.get("addrs") or step["nodes"]
    env.setdefault("MASTER_ADDR", str(addrs[0]))
    env.setdefault("MASTER_PORT", str(step.get("master_port") or 29500))
    env.update(
        RANK=str(task),
        WORLD_SIZE=str(ntasks),
        LOCAL_RANK=str(local),
        LOCAL_WORLD_SIZE=str(local_size),
        NODE_RANK=str(index),
    )
