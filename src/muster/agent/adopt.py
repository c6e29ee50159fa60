"""ssh sessions adopted into the job of their user (pam_slurm_adopt's role), the agent's side:
which running job of a user is on this node, and the move of a process into its cgroup.

``muster-adopt`` (``muster.cli.adopt``), run by ``pam_exec.so`` in sshd's PAM stack as root,
asks the node's agent on its local socket (``POST /v1/adopt`` ``{"user", "pid"}``); the
socket's peer must be root (SO_PEERCRED), since the answer moves a process. The agent
picks the user's newest job here (the one started last, ties to the highest id: what
pam_slurm_adopt's default ``action_unknown=newest`` does) and moves ``pid`` (the session
process: pam_exec's parent) into the job's ``step_extern/task_0`` cgroup, where Slurm puts
adopted processes: from then on the session and all it forks are limited, frozen, signalled
and killed with the job. A user without a job here gets ``{"job_id": null}`` and is refused
by the helper. On a node without cgroups the job is named but nothing is moved
(``"contained": false``).
"""

from __future__ import annotations

import logging
import pwd
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from muster.agent.runstate import RunState

if TYPE_CHECKING:
    from muster.agent.steps import StepRunner
    from muster.agent.supervisor import Supervisor

log = logging.getLogger("musterd")

__all__ = ["EXTERN_STEP", "Adoption", "newest"]

EXTERN_STEP = "extern"  # step_extern, as Slurm names the step of adopted processes


def newest(jobs: Iterable[tuple[int, float]]) -> int | None:
    """The job to adopt into from ``(job id, start time)`` pairs: the newest (pure)."""
    best = max(jobs, key=lambda j: (j[1], j[0]), default=None)
    return None if best is None else best[0]


class Adoption:
    def __init__(self, supervisor: Supervisor, steps: StepRunner | None) -> None:
        self.supervisor = supervisor
        self.steps = steps

    def jobs_of(self, uid: int) -> list[tuple[int, float]]:
        """The running jobs of ``uid`` on this node (batch scripts and steps), with when
        each started (the controller's start time; the agent's own when it has none)."""
        out: dict[int, float] = {}
        for t in list(self.supervisor.jobs.values()):
            if t.uid == uid and t.state is RunState.RUNNING:
                out[t.job_id] = float(t.job.get("start_time") or t.started_at)
        if self.steps is not None:
            for step in list(self.steps.steps.values()):
                if step.uid == uid and step.state in (RunState.LAUNCHING, RunState.RUNNING):
                    start = float(step.job.get("start_time") or 0.0)
                    out[step.job_id] = max(out.get(step.job_id, 0.0), start)
        return sorted(out.items())

    def adopt(self, user: str, pid: int) -> dict[str, Any]:
        """Move ``pid`` into the newest job of ``user`` here; the answer says which job
        (``job_id`` None: the user has none here) and whether it is now contained."""
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            return {"job_id": None, "reason": f"unknown user {user}"}
        job_id = newest(self.jobs_of(uid))
        if job_id is None:
            return {"job_id": None, "reason": f"{user} has no running job on {self.supervisor.node}"}
        cg = self.supervisor.cgroups
        if cg is None:
            log.info("job %s: ssh session %s of %s admitted (no cgroups here)", job_id, pid, user)
            return {"job_id": job_id, "contained": False}
        cg.adopt(job_id, pid, EXTERN_STEP)
        log.info("job %s: ssh session %s of %s adopted into its cgroup", job_id, pid, user)
        return {"job_id": job_id, "contained": True}
