"""The site's programs the agent runs around jobs and on its own: Prolog, Epilog and
HealthCheckProgram (slurm.conf's keys, Slurm's semantics).

* ``Prolog`` runs as root on a node before the first batch script or step of a job attempt
  starts there. A failure (non-zero exit, a signal, a time-out, a program that cannot be
  run) drains the node and requeues the job held ("launch failed requeued held").
* ``Epilog`` runs as root on a node when the job's batch script ends or the job's end
  reaches it. A failure drains the node.
* ``HealthCheckProgram`` runs as root when the agent starts and every
  ``HealthCheckInterval`` seconds, on nodes in the states ``HealthCheckNodeState`` names
  (ANY by default; IDLE, ALLOC, MIXED, NONDRAINED_IDLE as far as the agent can tell). A
  failure drains the node with the program's own first line of output as the reason; a
  later success returns to service a node that the health check had drained (and only such).

Each program gets Slurm's environment for it (SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_UID,
SLURM_JOB_GID, SLURM_JOB_PARTITION, SLURM_JOB_NODELIST, SLURMD_NODENAME, CUDA_VISIBLE_DEVICES
...), a clean PATH, no standard input, and ``PrologEpilogTimeout`` seconds (default 300)
before it is killed. Nothing here decides what a failure means for the cluster: callers
turn a ``HookResult`` into a launch failure or a node fault for the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from muster.core.config import Config
from muster.core.hostlist import compress
from muster.core.states import HEALTH_DRAIN_PREFIX

__all__ = ["HookResult", "Hooks", "hook_environment"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 300.0
OUTPUT_LIMIT = 64 * 1024
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, slots=True)
class HookResult:
    ok: bool
    reason: str = ""  # why it failed, in one line


def hook_environment(job: dict[str, Any], node: str, cluster: str) -> dict[str, str]:
    """Slurm's Prolog/Epilog environment for one job on ``node``."""
    spec = job.get("spec") or {}
    alloc = job.get("alloc") or []
    here: dict[str, Any] = next((a for a in alloc if a.get("node") == node), {})
    env = {
        "PATH": SAFE_PATH,
        "SLURM_CLUSTER_NAME": cluster,
        "SLURMD_NODENAME": node,
        "SLURM_JOB_ID": str(job.get("job_id", "")),
        "SLURM_JOBID": str(job.get("job_id", "")),
        "SLURM_JOB_USER": str(job.get("user", "")),
        "SLURM_JOB_UID": str(job.get("uid", "")),
        "SLURM_JOB_GID": str(job.get("gid", "")),
        "SLURM_JOB_PARTITION": str(job.get("partition", "")),
        "SLURM_JOB_NAME": str(spec.get("name", "")),
        "SLURM_JOB_NODELIST": compress([str(a.get("node")) for a in alloc]),
        "SLURM_RESTART_COUNT": str(job.get("restart_count") or 0),
        "SLURM_SCRIPT_CONTEXT": "",
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in here.get("gpu_ids") or []),
    }
    if job.get("array_job_id") is not None:
        env["SLURM_ARRAY_JOB_ID"] = str(job["array_job_id"])
        env["SLURM_ARRAY_TASK_ID"] = str(job.get("array_task_id"))
    if spec.get("workdir"):
        env["SLURM_JOB_WORK_DIR"] = str(spec["workdir"])
    return env


class Hooks:
    """The configured programs of one node; each method runs one and says how it went.

    The Prolog runs once per job attempt on this node (``ensure_prolog``: the batch launch
    and every step launch ask; the first runs it, the others wait for its result), the
    Epilog once per attempt (``epilog_once``). A failure that is the node's is also posted
    to ``on_fault`` (``{"kind", "reason", "job_id", "attempt"}``) for the controller."""

    MEMORY = 4096  # job attempts remembered (their Prolog result, whether the Epilog ran)

    def __init__(self, config: Config, node: str) -> None:
        self.on_fault: Callable[[dict[str, Any]], None] = lambda fault: None
        self._prologs: dict[tuple[int, int], asyncio.Future[HookResult]] = {}
        self._epilogs: dict[tuple[int, int], bool] = {}
        self.node = node
        # Set when a reconfigure changes the health check (program, interval, states): the
        # agent's health loop starts, stops or re-times itself (``AgentDaemon._health_checks``).
        self.health_changed = asyncio.Event()
        self.configure(config)

    def configure(self, config: Config) -> list[str]:
        """Take the programs and their settings from ``config`` (at start, and again on
        SIGHUP: the next job's Prolog is the new one); the keys whose value changed."""
        before = self._settings() if hasattr(self, "timeout") else None
        self.cluster = config.cluster_name
        self.prolog = (config.get("Prolog") or "").strip() or None
        self.epilog = (config.get("Epilog") or "").strip() or None
        self.task_prolog = (config.get("TaskProlog") or "").strip() or None  # each step task's (agent.taskprolog)
        self.task_epilog = (config.get("TaskEpilog") or "").strip() or None  # each step task's end (agent.stepd)
        self.health_program = (config.get("HealthCheckProgram") or "").strip() or None
        self.health_interval = float(config.get_int("HealthCheckInterval", 0))
        self.health_states = {
            s.strip().upper() for s in (config.get("HealthCheckNodeState") or "ANY").split(",") if s.strip()
        }
        self.timeout = float(config.get_int("PrologEpilogTimeout", 0)) or DEFAULT_TIMEOUT
        after = self._settings()
        changed = [] if before is None else [k for k in after if after[k] != before[k]]
        if any(k.startswith("HealthCheck") for k in changed):
            self.health_changed.set()
        return changed

    def _settings(self) -> dict[str, Any]:
        return {
            "Prolog": self.prolog,
            "Epilog": self.epilog,
            "HealthCheckProgram": self.health_program,
            "HealthCheckInterval": self.health_interval,
            "HealthCheckNodeState": self.health_states,
            "PrologEpilogTimeout": self.timeout,
        }

    @staticmethod
    def _key(job: dict[str, Any]) -> tuple[int, int]:
        return int(job["job_id"]), int(job.get("restart_count") or 0)

    async def ensure_prolog(self, job: dict[str, Any]) -> HookResult:
        """The Prolog's result for this job attempt here, running it the first time."""
        if self.prolog is None:
            return HookResult(True)
        key = self._key(job)
        future = self._prologs.get(key)
        if future is None:
            future = self._prologs[key] = asyncio.get_running_loop().create_future()
            _forget_oldest(self._prologs, self.MEMORY)
            result = await self.run_prolog(job)
            future.set_result(result)
            if not result.ok:
                self.on_fault({"kind": "prolog", "reason": result.reason, "job_id": key[0], "attempt": key[1]})
        return await asyncio.shield(future)

    def prolog_ran(self, job_id: int, attempt: int) -> bool:
        return (job_id, attempt) in self._prologs

    async def epilog_once(self, job: dict[str, Any]) -> None:
        """Run the Epilog for this job attempt, unless it ran here already; a failure is a
        fault of the node."""
        key = self._key(job)
        if self.epilog is None or key in self._epilogs:
            return
        self._epilogs[key] = True
        _forget_oldest(self._epilogs, self.MEMORY)
        result = await self.run_epilog(job)
        if not result.ok:
            self.on_fault({"kind": "epilog", "reason": result.reason, "job_id": key[0], "attempt": key[1]})

    async def run_prolog(self, job: dict[str, Any]) -> HookResult:
        if self.prolog is None:
            return HookResult(True)
        env = hook_environment(job, self.node, self.cluster)
        env["SLURM_SCRIPT_CONTEXT"] = "prolog_slurmd"
        return await run_program("Prolog", self.prolog, env, self.timeout)

    async def run_epilog(self, job: dict[str, Any]) -> HookResult:
        if self.epilog is None:
            return HookResult(True)
        env = hook_environment(job, self.node, self.cluster)
        env["SLURM_SCRIPT_CONTEXT"] = "epilog_slurmd"
        return await run_program("Epilog", self.epilog, env, self.timeout)

    def health_due(self, busy: bool) -> bool:
        """Whether the health check runs in this node's state (busy: it runs jobs)."""
        if self.health_program is None:
            return False
        states = self.health_states - {"CYCLE"}
        if not states or "ANY" in states:
            return True
        if busy:
            return bool(states & {"ALLOC", "MIXED"})
        return bool(states & {"IDLE", "NONDRAINED_IDLE"})

    async def run_health_check(self) -> HookResult:
        if self.health_program is None:
            return HookResult(True)
        env = {"PATH": SAFE_PATH, "SLURMD_NODENAME": self.node, "SLURM_CLUSTER_NAME": self.cluster}
        result = await run_program("HealthCheckProgram", self.health_program, env, self.timeout)
        if result.ok:
            return result
        return HookResult(False, HEALTH_DRAIN_PREFIX + result.reason)


async def run_program(kind: str, path: str, env: dict[str, str], timeout: float) -> HookResult:
    """Run one site program as this process's user (root on a real node); ``reason`` is the
    program's first line of output, else how it ended."""
    try:
        proc = await asyncio.create_subprocess_exec(
            path,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd="/",
            start_new_session=True,
        )
    except OSError as exc:
        return HookResult(False, f"{kind} error: cannot run {path}: {exc.strerror or exc}")
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        await proc.wait()
        return HookResult(False, f"{kind} error: {path} timed out after {timeout:.0f} s")
    rc = proc.returncode
    if rc == 0:
        return HookResult(True)
    first = next(
        (line.strip() for line in out[:OUTPUT_LIMIT].decode(errors="replace").splitlines() if line.strip()), ""
    )
    how = f"exit code {rc}" if rc is not None and rc > 0 else f"signal {-(rc or 0)}"
    if kind == "HealthCheckProgram":
        reason = first or f"{path} failed ({how})"
    else:
        reason = f"{kind} error: {path} failed ({how})" + (f": {first}" if first else "")
    log.warning("%s", reason)
    return HookResult(False, reason[:1000])


def _forget_oldest(table: dict[Any, Any], keep: int) -> None:
    while len(table) > keep:
        del table[next(iter(table))]
