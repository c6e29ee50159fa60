"""Carrying out the preemptions a pass decided (``sched.preempt``) and ending the victims
when their grace time is over.

* ``apply``: each victim is committed with its preemptor, its mode and its deadline (now +
  GraceTime), its SystemComment says why (``Preempted by job 12 (last checkpoint 40 s
  ago)``), and its batch shell and tasks get SIGTERM, or the signal of its ``--signal``,
  so that they can write a checkpoint. Each preemptor holds the nodes it will start on until its victims are
  gone (plus ``HOLD_SLACK`` seconds), so nobody else takes them meanwhile.
* ``expire`` (each pass): a victim past its deadline is killed and requeued under the same
  id with its restart count + 1 (PreemptMode=REQUEUE; its previous attempt shows PREEMPTED
  in ``sacct -D``), or ends PREEMPTED (CANCEL, or a job submitted with ``--no-requeue``).

Like every controller responsibility it returns ``Action`` objects and performs no I/O.
"""

from __future__ import annotations

import logging
import signal

from muster.core import lifecycle
from muster.core.errors import StorageError
from muster.core.job import Job
from muster.core.lifecycle import JobEvent
from muster.core.signals import parse_signal_spec
from muster.core.states import JobState
from muster.ctld.actions import Action, SignalJob, Terminate
from muster.ctld.state import ClusterState
from muster.sched.decisions import Preemption

__all__ = ["HOLD_SLACK", "Preemptions", "end_victim"]

log = logging.getLogger("musterctld")

# Seconds a preemptor keeps its nodes beyond its victims' grace time: their agents still
# have to confirm that the processes are gone. It holds them anyway while a victim runs.
HOLD_SLACK = 60.0


class Preemptions:
    def __init__(self, ctl: ClusterState) -> None:
        self.ctl = ctl

    def apply(self, preemptions: list[Preemption], holds: dict[int, list[str]], now: float) -> list[Action]:
        ctl = self.ctl
        actions: list[Action] = []
        grace_of: dict[int, float] = {}
        for p in preemptions:
            victim = ctl.jobs.get(p.job_id)
            if victim is None or victim.state is not JobState.RUNNING or victim.preempted_by is not None:
                continue
            mode = p.mode if victim.spec.requeue is not False else "CANCEL"
            try:
                with ctl.atomic(victim):
                    victim.preempted_by = p.preemptor
                    victim.preempt_deadline = now + p.grace_time
                    victim.preempt_mode = mode
                    victim.system_comment = p.reason
                    data = {"by": p.preemptor, "mode": mode, "grace": p.grace_time, "lost": round(p.lost, 1)}
                    ctl.record(now, [(victim, "preempt", data)])
            except StorageError:
                continue
            grace_of[p.preemptor] = max(grace_of.get(p.preemptor, 0.0), float(p.grace_time))
            log.warning(
                "job %s: %s; %s in %d s (%.0f s of work since its last checkpoint)",
                victim.job_id,
                p.reason,
                "requeued" if mode == "REQUEUE" else "cancelled",
                p.grace_time,
                p.lost,
            )
            sig, batch, whole = _signal_of(victim)
            actions.append(SignalJob(victim.job_id, victim.nodes, sig, batch, whole))
        for job_id, nodes in holds.items():
            job = ctl.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING or job_id not in grace_of:
                continue
            try:
                with ctl.atomic(job):
                    job.held_nodes = list(nodes)
                    job.hold_until = now + grace_of[job_id] + HOLD_SLACK
                    ctl.record(now, [(job, "hold_nodes", {"nodes": nodes, "until": job.hold_until})])
            except StorageError:
                continue
        return actions

    def expire(self, now: float) -> list[Action]:
        """End the victims whose grace time is over."""
        actions: list[Action] = []
        for job in [j for j in self.ctl.jobs.values() if j.preempt_deadline is not None]:
            if job.state is not JobState.RUNNING:
                job.preempted_by = job.preempt_deadline = job.preempt_mode = None
                continue
            if job.preempt_deadline is not None and job.preempt_deadline <= now:
                try:
                    actions += self._end(job, now)
                except StorageError:
                    continue
        return actions

    def _end(self, job: Job, now: float) -> list[Action]:
        attempt, nodes = job.restart_count, job.nodes
        end_victim(self.ctl, job, now)
        return [Terminate(job.job_id, attempt, nodes, "preempt")]


def end_victim(ctl: ClusterState, job: Job, now: float) -> None:
    """Requeue (REQUEUE) or end PREEMPTED (CANCEL) a victim: at its deadline, or when it
    ended by itself in its grace time (a script that checkpoints and exits on SIGTERM is
    preempted all the same, as in Slurm)."""
    nodes, by = job.nodes, job.preempted_by
    requeue = job.preempt_mode == "REQUEUE"
    with ctl.atomic(job):
        if requeue:
            lifecycle.requeue(job, now, outcome="PREEMPTED")
        else:
            lifecycle.end(job, JobEvent.PREEMPT, now, completing=True)
            job.preempted_by = job.preempt_deadline = job.preempt_mode = None
        ctl.record(now, [(job, "preempted", {"by": by, "nodes": nodes, "attempt": job.restart_count})])
    ctl.launching.pop(job.job_id, None)
    log.warning("job %s: preempted by job %s, %s", job.job_id, by, "requeued" if requeue else "cancelled")


def _signal_of(job: Job) -> tuple[int, bool, bool]:
    """How a victim is warned, as (signal, batch shell only, whole job): its ``--signal`` as
    it was given (``B:`` the batch shell, else its tasks), else SIGTERM to the batch shell
    and every task at once, as Slurm warns a preempted job."""
    if job.spec.signal:
        try:
            spec = parse_signal_spec(job.spec.signal)
        except ValueError:
            pass
        else:
            return spec.signal, spec.batch_only, False
    return int(signal.SIGTERM), False, True
