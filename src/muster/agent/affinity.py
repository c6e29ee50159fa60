"""Which of this machine's CPUs each job holds, and pinning a process to a set of them.

The controller counts CPUs per node; the ids are the agent's to choose, since only it knows
the machine. ``CpuLedger`` gives a job, the first time something of it starts here (its
batch script or a step's tasks), as many of the agent's CPUs as the job was allocated on
the node, the least used first, and takes them back when the last of its users ends. A
job's steps split the job's CPUs among their tasks (``core.cpubind.task_cpu_sets``).

When the node is configured with more CPUs than the machine has (emulated nodes sharing
one host), a job's set is at most every CPU the agent may use, and jobs overlap: the
binding is real, only not exclusive. ``apply`` is called in the forked child before
``exec``; a kernel that refuses (a CPU taken offline) leaves the process unbound.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence

from muster.core.config import Config
from muster.core.cpubind import CpuBind, mask_text, pick_least_used, task_cpu_sets

__all__ = ["CpuLedger", "apply", "binding_env", "host_cpus", "task_affinity"]


def host_cpus() -> list[int]:
    """The CPUs this process may run on (what cgroups and taskset left it)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def task_affinity(config: Config) -> bool:
    """Whether tasks are bound without ``--cpu-bind`` (``TaskPlugin=task/affinity``,
    or task/cgroup, which confines them to the job's CPUs the same way here)."""
    plugins = (config.get("TaskPlugin") or "").lower()
    return "affinity" in plugins or "cgroup" in plugins


class CpuLedger:
    def __init__(self, cpus: Sequence[int] | None = None) -> None:
        self.cpus = list(cpus) if cpus is not None else host_cpus()
        self._jobs: dict[int, list[int]] = {}  # job id -> its CPUs here
        self._holders: dict[int, int] = {}  # job id -> batch script + steps using them
        self._steps: dict[tuple[int, int], list[tuple[int, ...]]] = {}  # (job, step) -> task sets

    def job_cpus(self, job_id: int, count: int) -> list[int]:
        """The job's CPUs here, chosen on first use; each call must be matched by
        ``release(job_id)``."""
        held = self._jobs.get(job_id)
        if held is None:
            usage = Counter(c for cpus in self._jobs.values() for c in cpus)
            held = self._jobs[job_id] = pick_least_used(self.cpus, usage, max(1, count))
        self._holders[job_id] = self._holders.get(job_id, 0) + 1
        return list(held)

    def adopt(self, job_id: int, cpus: Sequence[int]) -> bool:
        """A running job found after a restart keeps the CPUs it is pinned to (True: it
        holds them now, to ``release``)."""
        known = set(self.cpus)
        mine = sorted(c for c in cpus if c in known)
        if not mine:
            return False
        self._jobs.setdefault(job_id, mine)
        self._holders[job_id] = self._holders.get(job_id, 0) + 1
        return True

    def release(self, job_id: int) -> None:
        left = self._holders.get(job_id, 0) - 1
        if left > 0:
            self._holders[job_id] = left
            return
        self._holders.pop(job_id, None)
        self._jobs.pop(job_id, None)

    def step_cpus(
        self,
        job_id: int,
        step_id: int,
        job_count: int,
        per_task: Sequence[int],
        bind: CpuBind,
        default: str,
    ) -> list[tuple[int, ...]] | None:
        """Each local task's CPUs for a step (None: unbound); ``release_step`` ends it.
        Tasks of the job's other running steps count as users of their CPUs."""
        job = self.job_cpus(job_id, job_count)
        usage = Counter(c for (jid, _), sets in self._steps.items() if jid == job_id for cpus in sets for c in cpus)
        sets = task_cpu_sets(bind, job, per_task, usage, default)
        self._steps[(job_id, step_id)] = sets or []
        return sets

    def release_step(self, job_id: int, step_id: int) -> None:
        if self._steps.pop((job_id, step_id), None) is not None:
            self.release(job_id)

    def held(self) -> dict[int, list[int]]:
        return {j: list(c) for j, c in self._jobs.items()}


def apply(cpus: Sequence[int] | None) -> bool:
    """Pin the calling process (in a forked child); False when the kernel refused."""
    if not cpus:
        return False
    try:
        os.sched_setaffinity(0, cpus)
    except (AttributeError, OSError):
        return False
    return True


def binding_env(bind: CpuBind, sets: Sequence[Sequence[int]]) -> dict[str, str]:
    """What Slurm's task/affinity tells the tasks: ``SLURM_CPU_BIND`` and its parts."""
    masks = ",".join(mask_text(s) for s in sets)
    verbose = "verbose" if bind.verbose else "quiet"
    return {
        "SLURM_CPU_BIND": f"{verbose},mask_cpu:{masks}",
        "SLURM_CPU_BIND_VERBOSE": verbose,
        "SLURM_CPU_BIND_TYPE": "mask_cpu:",
        "SLURM_CPU_BIND_LIST": masks,
    }
