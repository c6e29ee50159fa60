"""The pre-flight gate on a node: short checks before a job's user code starts there
(``--preflight``, or its partition's ``Preflight=YES``), so that a bad node is drained with
the evidence and the job placed elsewhere before it wastes a start-up.

Built-in checks, each returning what is wrong in one line (None: fine):

* **GPUs** (``gpus``): every GPU of the job's allocation here has its device file
  (``PreflightGpuDevices=``, a pattern with ``%i`` for the index and ``%n`` for the node's
  name, so emulated nodes can have device files of their own; default ``/dev/nvidia%i``
  when the node's GPUs are real, none when they are emulated and the key is unset);
* **disk** (``disk``): the job's spool has at least ``PreflightMinFreeMB`` (default 1024) free;
* **clock** (``clock``): the job's start time, stamped by the controller, is not ahead of
  this node's clock by more than ``PreflightMaxClockOffset`` seconds (default 30; the launch
  latency is inside that bound, so a clock far behind the controller's is what fails);

then the site's ``PreflightProgram`` (run as the Prolog is, with its environment and
``PrologEpilogTimeout``; its first line of output is the evidence).

**All-reduce** (opt-in: ``PreflightAllReduce=YES``, cluster-wide or on a partition's line):
when the controller asks (``/v1/preflight`` with ``allreduce``, every node of the job at
once), this node also runs its rank of one small ``torch.distributed`` all-reduce
(``agent.allreduce``: rank = the node's place in the allocation, rendezvous at the first
node's address, ``PreflightAllReduceTimeout`` seconds, default 60), after its own checks,
whatever they said, so that its peers are not left waiting. A rank that failed waiting on
its peers says so (``peer``): the controller blames the nodes whose rank failed by itself.

A failure raises the launch's ``PREFLIGHT_FAULT``: the controller records it in the failure
ledger (kind ``preflight``), drains the node with the evidence and requeues the job (not held).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from muster.agent.allreduce import port_for, run_allreduce
from muster.agent.hooks import HookResult, hook_environment, run_program
from muster.core.config import Config

__all__ = ["PREFLIGHT_FAULT", "Preflight", "Verdict"]

PREFLIGHT_FAULT = "preflight"
DEFAULT_MIN_FREE_MB = 1024
DEFAULT_MAX_CLOCK_OFFSET = 30
ON = ("yes", "true", "1", "on")
DEFAULT_ALLREDUCE_TIMEOUT = 60


@dataclass(frozen=True, slots=True)
class Verdict(HookResult):
    """The gate's verdict here; ``peer``: only the all-reduce failed, waiting on its peers."""

    peer: bool = False


@dataclass
class Preflight:
    """The gate's settings on this node, from muster.conf (again on SIGHUP)."""

    node: str
    cluster: str = ""
    program: str | None = None
    partitions: frozenset[str] = frozenset()  # Preflight=YES: every job of these
    min_free_mb: int = DEFAULT_MIN_FREE_MB
    max_clock_offset: float = DEFAULT_MAX_CLOCK_OFFSET
    gpu_devices: str | None = None  # a pattern with %i; None: not checked
    timeout: float = 60.0
    addrs: dict[str, str] = field(default_factory=dict)  # node name -> address (the rendezvous)
    real_gpus: bool = False
    allreduce_timeout: float = DEFAULT_ALLREDUCE_TIMEOUT
    clock: Callable[[], float] = field(default=lambda: __import__("time").time())

    @classmethod
    def from_config(cls, config: Config, node: str, real_gpus: bool = False) -> Preflight:
        devices = (config.get("PreflightGpuDevices") or "").strip() or ("/dev/nvidia%i" if real_gpus else None)
        return cls(
            node=node,
            cluster=config.cluster_name,
            program=(config.get("PreflightProgram") or "").strip() or None,
            partitions=frozenset(
                p.name for p in config.partitions if str(p.params.get("Preflight", "NO")).lower() in ON
            ),
            min_free_mb=config.get_int("PreflightMinFreeMB", DEFAULT_MIN_FREE_MB),
            max_clock_offset=float(config.get_int("PreflightMaxClockOffset", DEFAULT_MAX_CLOCK_OFFSET)),
            gpu_devices=devices,
            timeout=float(config.get_int("PrologEpilogTimeout", 0)) or 60.0,
            addrs={n.name: n.addr for n in config.nodes},
            real_gpus=real_gpus,
            allreduce_timeout=float(config.get_int("PreflightAllReduceTimeout", DEFAULT_ALLREDUCE_TIMEOUT)),
        )

    def wanted(self, job: dict[str, Any]) -> bool:
        """Whether this job attempt passes the gate here first."""
        spec = job.get("spec") or {}
        return bool(spec.get("preflight")) or str(job.get("partition") or "") in self.partitions

    # --- the built-in checks ---------------------------------------------------------------

    def gpus(self, job: dict[str, Any]) -> str | None:
        if not self.gpu_devices:
            return None
        here: dict[str, Any] = next((a for a in job.get("alloc") or [] if a.get("node") == self.node), {})
        pattern = self.gpu_devices.replace("%n", self.node)
        missing = [str(i) for i in here.get("gpu_ids") or [] if not os.path.exists(pattern.replace("%i", str(i)))]
        if missing:
            return f"GPU {','.join(missing)}: no device file ({pattern.replace('%i', missing[0])})"
        return None

    def disk(self, spool: str) -> str | None:
        path = spool
        while path and not os.path.exists(path):
            path = os.path.dirname(path)
        try:
            st = os.statvfs(path or "/")
        except OSError as exc:
            return f"disk: cannot read the free space of {spool}: {exc.strerror or exc}"
        free_mb = st.f_bavail * st.f_frsize // (1024 * 1024)
        if free_mb < self.min_free_mb:
            return f"disk: {free_mb} MB free under {path}, under PreflightMinFreeMB={self.min_free_mb}"
        return None

    def clock_offset(self, job: dict[str, Any]) -> str | None:
        stamped = job.get("start_time")
        if not isinstance(stamped, int | float):
            return None
        ahead = float(stamped) - self.clock()
        if ahead > self.max_clock_offset:
            return f"clock: {ahead:.0f} s behind the controller's (PreflightMaxClockOffset={self.max_clock_offset:.0f})"
        return None

    async def run(self, job: dict[str, Any], spool: str, allreduce: bool = False) -> Verdict:
        """Every check, in order; the first failure is the verdict. ``allreduce``: this
        node's rank of the all-reduce too, after the checks whatever they said."""
        verdict = await self._checks(job, spool)
        if allreduce:
            reduced = await self.allreduce(job)
            if verdict.ok and reduced is not None and not reduced.ok:
                return Verdict(False, f"preflight failed: {reduced.reason}", peer=reduced.peer)
        return verdict

    async def _checks(self, job: dict[str, Any], spool: str) -> Verdict:
        for problem in (self.gpus(job), self.disk(spool), self.clock_offset(job)):
            if problem:
                return Verdict(False, f"preflight failed: {problem}")
        if self.program:
            env = hook_environment(job, self.node, self.cluster)
            env["SLURM_SCRIPT_CONTEXT"] = "preflight_slurmd"
            result = await run_program("PreflightProgram", self.program, env, self.timeout)
            if not result.ok:
                return Verdict(False, f"preflight failed: {result.reason}")
        return Verdict(True)

    async def allreduce(self, job: dict[str, Any]) -> Verdict | None:
        """This node's rank of the job's all-reduce (``agent.allreduce``); None when the job
        has one node, or this node is not in its allocation."""
        alloc = [a for a in job.get("alloc") or [] if a.get("node")]
        names = [str(a["node"]) for a in alloc]
        if len(names) < 2 or self.node not in names:
            return None
        rank = names.index(self.node)
        gpu_ids = alloc[rank].get("gpu_ids") or []
        backend = "nccl" if self.real_gpus and gpu_ids else "gloo"
        env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpu_ids)} if backend == "nccl" else {}
        master = self.addrs.get(names[0], names[0])
        port = port_for(int(job.get("job_id") or 0), int(job.get("restart_count") or 0))
        r = await run_allreduce(self.node, master, port, rank, len(names), self.allreduce_timeout, backend, env)
        return Verdict(r.ok, r.reason, peer=r.peer)
