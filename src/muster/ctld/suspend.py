"""``scontrol suspend`` and ``scontrol resume``: operators and administrators stop a running
job where it stands and let it go on later (Slurm's semantics and wording).

A suspended job stays RUNNING in the lifecycle table and keeps its nodes, CPUs, memory and
GPUs (its GPU memory stays occupied: giving its devices to another job would not work, so
muster, unlike Slurm's CPU-only release, lends nothing meanwhile); commands show it
SUSPENDED (``Job.display_state``: squeue ``S``, ``scontrol show job`` ``JobState=SUSPENDED``,
sacct ``SUSPENDED`` with its ``Suspended`` time). The time it spends suspended does not
count against its time limit, here (``Job.expected_end``; the controller times an srun or
salloc allocation, ``ctld.steps``, and not while it is suspended) and on its batch host,
which enforces a batch job's limit. An srun or salloc allocation is suspended as a batch
job is: its steps' tasks are frozen on their nodes (salloc's shell, on the submit host,
is not, as in Slurm), and a step asked for meanwhile waits until it is resumed. Each
change is committed before its nodes are told
(``SuspendJob``: freeze or thaw the job's cgroup, or SIGSTOP/SIGCONT its processes).
"""

from __future__ import annotations

from collections.abc import Callable

from muster.core import lifecycle
from muster.core.errors import InvalidRequest, PermissionDenied
from muster.core.events import EventKind
from muster.core.job import Job
from muster.core.states import JobState
from muster.ctld.actions import Action, SuspendJob
from muster.ctld.identity import Identity
from muster.ctld.state import ClusterState
from muster.protocol.versions import PROTOCOL, ROUTE_SINCE

# Slurm's texts (slurm_errno.c) for the refusals
PENDING = "Job is pending execution"
DONE = "Job/step already completing or completed"
NOT_RUNNING = "Job is not running"
NOT_SUSPENDED = "Job is not suspended"
NOT_SUPPORTED = "Requested operation not supported on this system"


class Suspensions:
    def __init__(self, state: ClusterState, protocol: Callable[[str], int] = lambda node: PROTOCOL) -> None:
        self.state = state
        self.protocol = protocol  # each node's agent's wire protocol (``Agents.protocol``)

    def suspend(self, job: Job, who: Identity) -> list[Action]:
        self._check(job, who)
        if job.suspended_at is not None:
            raise InvalidRequest(NOT_RUNNING)
        old = sorted(n for n in job.nodes if self.protocol(n) < ROUTE_SINCE["/v1/suspend"])
        if old:  # its agent would not know the request: the job would run on, shown SUSPENDED
            raise InvalidRequest(f"{NOT_SUPPORTED} (the agent of {old[0]} is too old to suspend jobs: upgrade it)")
        now = self.state.clock.now()
        with self.state.atomic(job):
            lifecycle.suspend(job, now)
            self.state.record(now, [(job, EventKind.SUSPEND, {"by": who.uid})])
        return [SuspendJob(job.job_id, job.nodes, True)]

    def resume(self, job: Job, who: Identity) -> list[Action]:
        self._check(job, who)
        if job.suspended_at is None:
            raise InvalidRequest(NOT_SUSPENDED)
        now = self.state.clock.now()
        with self.state.atomic(job):
            lifecycle.resume(job, now)
            self.state.record(now, [(job, EventKind.RESUME, {"by": who.uid, "suspended": job.suspended_secs})])
        return [SuspendJob(job.job_id, job.nodes, False)]

    def _check(self, job: Job, who: Identity) -> None:
        """Only operators and administrators (Slurm: operator, administrator, SlurmUser,
        root), and only a running job."""
        if not who.admin:
            raise PermissionDenied()
        if job.state is JobState.PENDING:
            raise InvalidRequest(PENDING)
        if job.state is not JobState.RUNNING or job.completing:
            raise InvalidRequest(DONE)
