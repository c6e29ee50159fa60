"""``srun --no-allocate`` (``-Z``): a step run on named nodes without a job, for root and
SlurmUser only, as srun(1) describes it ("bypassing the normal resource allocation step").

The controller creates no job and holds nothing: it checks the caller and the nodes, picks a
job id out of the queue's range (a random 32-bit one above ``NOALLOC_BASE``, as Slurm's are),
lays the tasks out block-wise over the nodes (``--ntasks``, ``--ntasks-per-node``), and signs
a grant for step 0 of that job with each node's whole CPUs, memory and GPUs, which srun
carries to the agents as for any step. While it runs, the agents' reports of that job are
not taken for strays (``Agents.unallocated``); srun's end of it (``done``) forgets it and asks
the nodes to end the job there (``Terminate``: the job's leftovers on the agent go). Nothing
is stored: ``squeue`` and ``sacct`` never show such a step, and a controller that restarts
while one runs lets the agents' next heartbeat end it (a stray then).

=============================================  ============================================
``POST /v1/steps/no_allocate``                 ``{"nodes", "ntasks", "ntasks_per_node",
                                               "cpus_per_task", "name", "argv", "workdir",
                                               "srun_host"}`` -> what ``POST
                                               /v1/jobs/N/steps`` answers (``step``,
                                               ``nodes``, ``grant``, ``sig``, ...)
``POST /v1/steps/no_allocate/{job_id}/done``   ``{}`` -> ``{"ok": true}``
=============================================  ============================================
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from muster.core.errors import InvalidRequest, PermissionDenied
from muster.core.hostlist import compress
from muster.core.steps import master_port
from muster.ctld.actions import Action, Terminate
from muster.ctld.identity import Identity
from muster.protocol.stepcred import GRANT_TTL, sign_grant

if TYPE_CHECKING:
    from muster.ctld.controller import Controller

__all__ = ["NOALLOC_BASE", "NoAllocSteps", "block_layout"]

NOALLOC_BASE = 1 << 31  # no-allocate job ids lie above the queue's (MaxJobId is far below)


def block_layout(nodes: int, ntasks: int | None, per_node: int | None) -> list[list[int]]:
    """Task ids per node, block-wise: ``per_node`` on each, or ``ntasks`` spread as evenly
    as Slurm's block distribution does (the first nodes take one more); one per node by
    default. ``InvalidRequest`` when the counts do not fit the nodes."""
    if per_node is not None:
        counts = [per_node] * nodes
        if ntasks is not None:
            if ntasks > per_node * nodes:
                raise InvalidRequest("Requested node configuration is not available")
            counts = [max(0, min(per_node, ntasks - i * per_node)) for i in range(nodes)]
    else:
        total = nodes if ntasks is None else ntasks
        if total < nodes:
            raise InvalidRequest(f"Warning: can't run {total} processes on {nodes} nodes, setting nnodes to {total}")
        base, extra = divmod(total, nodes)
        counts = [base + (1 if i < extra else 0) for i in range(nodes)]
    out, next_id = [], 0
    for count in counts:
        out.append(list(range(next_id, next_id + count)))
        next_id += count
    return out


class NoAllocSteps:
    """The no-allocate steps running now (in memory only)."""

    def __init__(self, ctl: Controller, key: bytes) -> None:
        self.ctl = ctl
        self.key = key

    def _allowed(self, who: Identity) -> bool:
        return who.uid == 0 or who.user == (self.ctl.config.slurm_user or "root")

    def answer(self, who: Identity, body: dict[str, Any]) -> dict[str, Any]:
        """Sign step 0 of a new no-allocate job on ``body["nodes"]``: srun's launch answer."""
        if not self._allowed(who):
            raise PermissionDenied()
        names = [str(n) for n in body.get("nodes") or []]
        if not names:
            raise InvalidRequest("must specify a node list with -Z, --no-allocate.")
        if len(set(names)) != len(names):
            raise InvalidRequest("a node is named twice")
        missing = [n for n in names if n not in self.ctl.nodes]
        if missing:
            raise InvalidRequest(f"Can't find an address for host {missing[0]}, check slurm.conf")
        tasks = block_layout(len(names), _count(body, "ntasks"), _count(body, "ntasks_per_node"))
        used = [i for i, t in enumerate(tasks) if t]
        names, tasks = [names[i] for i in used], [tasks[i] for i in used]
        unallocated = self.ctl.agents.unallocated
        job_id = NOALLOC_BASE + secrets.randbelow((1 << 32) - 2 - NOALLOC_BASE)
        while job_id in unallocated:
            job_id = NOALLOC_BASE + secrets.randbelow((1 << 32) - 2 - NOALLOC_BASE)
        cpus_per_task = _count(body, "cpus_per_task") or 1
        runtime = [self.ctl.nodes[n] for n in names]
        now = self.ctl.clock.now()
        gpus = [list(range(node.gpus)) for node in runtime]
        nodes = [{"name": n.name, "addr": n.addr, "port": n.port} for n in runtime]
        grant = {
            "v": 1,
            "job_id": job_id,
            "attempt": 0,
            "step_id": 0,
            "uid": who.uid,
            "gid": who.gid,
            "user": who.user,
            "issued": now,
            "expires": now + GRANT_TTL,
            "job": {
                "name": str(body.get("name") or "srun"),
                "partition": "",
                "account": who.user,
                "qos": "normal",
                "submit_host": str(body.get("srun_host") or who.host),
                "workdir": str(body.get("workdir") or "/"),
                "time_limit": None,
                "start_time": now,
                "restart_count": 0,
                "nodes": names,
                "cpus": [node.cpus for node in runtime],
                "mem": [node.real_memory for node in runtime],
                "gpu_ids": gpus,
                "ntasks": sum(len(t) for t in tasks),
                "ntasks_per_node": _count(body, "ntasks_per_node"),
                "cpus_per_task": cpus_per_task,
                "interactive": True,
                "array_job_id": None,
                "array_task_id": None,
            },
            "step": {
                "name": str(body.get("name") or "srun"),
                "nodes": names,
                "addrs": [n["addr"] for n in nodes],
                "ports": [n["port"] for n in nodes],
                "tasks": tasks,
                "cpus": [min(node.cpus, len(t) * cpus_per_task) for node, t in zip(runtime, tasks, strict=True)],
                "gpus": gpus,
                "task_gpus": [[list(g) for _ in t] for g, t in zip(gpus, tasks, strict=True)],
                "distribution": "block",
                "cpus_per_task": cpus_per_task,
                "ntasks_per_node": _count(body, "ntasks_per_node"),
                "gpus_per_task": None,
                "gpu_bind": None,
                "time_limit": None,
                "master_port": master_port(job_id, 0),
            },
        }
        text, sig = sign_grant(self.key, grant)
        unallocated[job_id] = set(names)
        config = self.ctl.config
        ntasks = sum(len(t) for t in tasks)
        return {
            "step": {
                "job_id": job_id,
                "step_id": 0,
                "name": grant["step"]["name"],  # type: ignore[index]
                "nodes": names,
                "nodelist": compress(names),
                "num_nodes": len(names),
                "num_tasks": ntasks,
                "tasks": tasks,
            },
            "nodes": nodes,
            "grant": text,
            "sig": sig,
            "kill_wait": config.kill_wait,
            "slurmd_timeout": config.slurmd_timeout,
            "tree_width": config.tree_width,
            "message_timeout": config.message_timeout,
        }

    def gone(self, job_id: int, node: str) -> list[Action]:
        """An agent ended the step after its srun went away: the job ends on that node (and
        is forgotten once no node runs it)."""
        nodes = self.ctl.agents.unallocated.get(job_id)
        if nodes is None or node not in nodes:
            return []
        nodes.discard(node)
        if not nodes:
            del self.ctl.agents.unallocated[job_id]
        return [Terminate(job_id, 0, [node], "no_allocate")]

    def done(self, who: Identity, job_id: int) -> list[Action]:
        """srun's step has ended: forget the job, and end it on its nodes."""
        if not self._allowed(who):
            raise PermissionDenied()
        nodes = self.ctl.agents.unallocated.pop(job_id, None)
        if nodes is None:
            return []
        return [Terminate(job_id, 0, sorted(nodes), "no_allocate")]


def _count(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(f"{key} must be a positive integer")
    return value
