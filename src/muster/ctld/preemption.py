"""Carrying out the preemptions a pass decided (``sched.preempt``), the checkpoint
handshake, and ending the victims when their grace time is over.

* ``apply``: each victim is told (``warn``): committed with its preemptor, its mode, when it
  was told and its deadline (now + GraceTime), its SystemComment says why (``Preempted by
  job 12 (last checkpoint 40 s ago)``), and its batch shell and tasks get SIGTERM, or the
  signal of its ``--signal``, so that they can write a checkpoint; the deadline goes with
  the signal, and the agent leaves it where ``muster.progress.preempt_deadline()`` reads it.
  Each preemptor holds the nodes it will start on until its victims are gone (plus
  ``HOLD_SLACK`` seconds), so nobody else takes them meanwhile.
* ``checkpointed`` (the handshake): a victim that reports a new checkpoint in its grace
  time (``muster.progress.checkpoint(step)``, with a heartbeat) has answered: its deadline
  becomes now, so the next pass ends it and its resources go to the preemptor at once,
  not at the end of GraceTime. Slurm cannot tell this answer from any other exit.
* ``expire`` (each pass): a victim past its deadline is killed and requeued under the same
  id with its restart count + 1 (PreemptMode=REQUEUE; its previous attempt shows PREEMPTED
  in ``sacct -D``), or ends PREEMPTED (CANCEL, or a job submitted with ``--no-requeue``).
  sacct's ``LostWork`` is the work it lost: from its last checkpoint to its end, times its
  GPUs (``ctld.records``).

* ``PreemptMode=SUSPEND,GANG`` (partition PriorityTier only): a SUSPEND victim is frozen at
  once (``suspend_victim``, as ``scontrol suspend`` does: state SUSPENDED, reason
  Preempted, its suspended time not counted against its limit). It keeps its memory and
  GPUs and lends its CPUs (``lends_cpus``: the view counts them free) so that its
  preemptor starts on them; ``resume_victims`` (each pass) thaws it once its preemptor has
  ended (or stopped waiting for it) and its CPUs are free again on every node.

Like every controller responsibility it returns ``Action`` objects and performs no I/O.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable

from muster.core import lifecycle
from muster.core.errors import StorageError
from muster.core.events import EventKind
from muster.core.job import Job
from muster.core.lifecycle import JobEvent
from muster.core.signals import parse_signal_spec
from muster.core.states import JobState, Reason
from muster.ctld.actions import Action, SignalJob, SuspendJob, Terminate
from muster.ctld.state import ClusterState
from muster.protocol.versions import PROTOCOL, ROUTE_SINCE
from muster.sched.decisions import Preemption

__all__ = ["HOLD_SLACK", "Preemptions", "end_victim", "lends_cpus"]

log = logging.getLogger("musterctld")

# Seconds a preemptor keeps its nodes beyond its victims' grace time: their agents still
# have to confirm that the processes are gone. It holds them anyway while a victim runs.
HOLD_SLACK = 60.0


class Preemptions:
    def __init__(self, ctl: ClusterState, protocol: Callable[[str], int] = lambda node: PROTOCOL) -> None:
        self.ctl = ctl
        self.protocol = protocol  # each node's agent's wire protocol (``Agents.protocol``)

    def apply(self, preemptions: list[Preemption], holds: dict[int, list[str]], now: float) -> list[Action]:
        ctl = self.ctl
        actions: list[Action] = []
        grace_of: dict[int, float] = {}
        for p in preemptions:
            victim = ctl.jobs.get(p.job_id)
            if victim is None or victim.state is not JobState.RUNNING or victim.preempted_by is not None:
                continue
            if p.mode == "SUSPEND":
                frozen = self.suspend_victim(victim, p.preemptor, p.reason, now)
                if frozen:
                    grace_of[p.preemptor] = max(grace_of.get(p.preemptor, 0.0), 0.0)
                    log.warning("job %s: %s; suspended", victim.job_id, p.reason)
                    actions += frozen
                continue
            mode = p.mode if victim.spec.requeue is not False else "CANCEL"
            told = self.warn(victim, p.preemptor, mode, float(p.grace_time), p.reason, now, lost=p.lost)
            if not told:
                continue
            grace_of[p.preemptor] = max(grace_of.get(p.preemptor, 0.0), float(p.grace_time))
            log.warning(
                "job %s: %s; %s in %d s unless it checkpoints first (%.0f s of work since its last checkpoint)",
                victim.job_id,
                p.reason,
                "requeued" if mode == "REQUEUE" else "cancelled",
                p.grace_time,
                p.lost,
            )
            actions += told
        for job_id, nodes in holds.items():
            job = ctl.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING or job_id not in grace_of:
                continue
            try:
                with ctl.atomic(job):
                    lifecycle.hold_nodes(job, nodes, now + grace_of[job_id] + HOLD_SLACK, now)
                    ctl.record(now, [(job, EventKind.HOLD_NODES, {"nodes": nodes, "until": job.hold_until})])
            except StorageError:
                continue
        return actions

    def warn(
        self, job: Job, by: int, mode: str, grace: float, reason: str, now: float, lost: float | None = None
    ) -> list[Action]:
        """Tell a running job to checkpoint and leave (the handshake's first half, for
        preemption and for any other caller that wants a job's nodes back, e.g. a job
        being replaced): committed with ``by`` (the job it makes room for), ``mode``
        (REQUEUE or CANCEL at the deadline), its deadline ``now + grace`` and ``reason``
        (its SystemComment); returns the signal to send, with the deadline, or nothing when
        the job is not running, already told, or the store refused the change. A new
        checkpoint it then reports ends its grace at once (``checkpointed``); otherwise
        ``expire`` ends it at the deadline."""
        ctl = self.ctl
        if job.state is not JobState.RUNNING or job.preempted_by is not None:
            return []
        try:
            with ctl.atomic(job):
                job.preempted_by = by
                job.preempt_time = now
                job.preempt_deadline = now + grace
                job.preempt_mode = mode
                job.system_comment = reason
                data: dict[str, object] = {"by": by, "mode": mode, "grace": grace}
                if lost is not None:
                    data["lost"] = round(lost, 1)
                ctl.record(now, [(job, EventKind.PREEMPT, data)])
        except StorageError:
            return []
        sig, batch, whole = _signal_of(job)
        return [SignalJob(job.job_id, job.nodes, sig, batch, whole, deadline=job.preempt_deadline)]

    def suspend_victim(self, job: Job, by: int, reason: str, now: float) -> list[Action]:
        """Freeze a SUSPEND victim for job ``by`` (committed, then its nodes told): it stays
        RUNNING, shown SUSPENDED with reason Preempted, and lends its CPUs to ``by``."""
        ctl = self.ctl
        if job.state is not JobState.RUNNING or job.preempted_by is not None or job.suspended_at is not None:
            return []
        if any(self.protocol(n) < ROUTE_SINCE["/v1/suspend"] for n in job.nodes):
            return []  # its agent could not freeze it: the preemptor waits, as for no victim
        try:
            with ctl.atomic(job):
                lifecycle.suspend(job, now, Reason.PREEMPTED)
                job.preempted_by = by
                job.preempt_time = now
                job.preempt_mode = "SUSPEND"
                job.system_comment = reason
                ctl.record(now, [(job, EventKind.PREEMPT, {"by": by, "mode": "SUSPEND", "grace": 0})])
        except StorageError:
            return []
        return [SuspendJob(job.job_id, job.nodes, True)]

    def resume_victims(self, now: float) -> list[Action]:
        """Thaw each SUSPEND victim whose preemptor has ended (or is pending and no longer
        holds nodes for it), once its CPUs are free again on every node; one resumed by
        hand (``scontrol resume``) just stops being a victim."""
        ctl = self.ctl
        actions: list[Action] = []
        for job in [j for j in ctl.jobs.values() if j.preempt_mode == "SUSPEND" and j.preempted_by is not None]:
            if job.state is not JobState.RUNNING or job.completing:
                continue
            by = ctl.jobs.get(job.preempted_by) if job.preempted_by is not None else None
            if job.suspended_at is not None:
                if by is not None and (by.state is JobState.RUNNING or by.completing):
                    continue
                if (
                    by is not None
                    and by.state is JobState.PENDING
                    and by.hold_until is not None
                    and by.hold_until > now
                ):
                    continue
                if not self._cpus_free(job):
                    continue
            try:
                with ctl.atomic(job):
                    resumed = job.suspended_at is not None
                    if resumed:
                        lifecycle.resume(job, now)
                        ctl.record(
                            now,
                            [(job, EventKind.RESUME, {"preemptor": job.preempted_by, "suspended": job.suspended_secs})],
                        )
                    job.preempted_by = job.preempt_mode = job.preempt_time = None
            except StorageError:
                continue
            if resumed:
                log.warning("job %s: its preemptor is gone: resumed", job.job_id)
                actions.append(SuspendJob(job.job_id, job.nodes, False))
        return actions

    def _cpus_free(self, job: Job) -> bool:
        """Whether each node of a suspended victim has its CPUs back: what the jobs there
        use, other than suspended victims, leaves room for it."""
        ctl = self.ctl
        for a in job.alloc:
            node = ctl.nodes.get(a.node)
            if node is None:
                continue
            used = 0
            for (job_id, _attempt), (cpus, _mem, _gpus) in node.allocs.items():
                other = ctl.jobs.get(job_id)
                if job_id != job.job_id and not (other is not None and lends_cpus(other)):
                    used += cpus
            if used + a.cpus > node.cpus:
                return False
        return True

    def checkpointed(self, job: Job, now: float) -> bool:
        """The handshake's second half: ``job`` reported a new checkpoint (``ctld.training``).
        A victim in its grace time has answered: its deadline becomes ``now`` (committed),
        so that the next pass ends it and its preemptor starts. Returns whether it was one."""
        deadline, told = job.preempt_deadline, job.preempt_time
        if job.state is not JobState.RUNNING or deadline is None or told is None or deadline <= now:
            return False
        step = (job.progress or {}).get("ckpt_step")
        try:
            with self.ctl.atomic(job):
                job.preempt_deadline = now
                self.ctl.record(
                    now, [(job, EventKind.PREEMPT_ANSWERED, {"ckpt_step": step, "early": round(deadline - now, 1)})]
                )
        except StorageError:
            return False
        log.warning(
            "job %s: checkpoint at step %s saved %.0f s into its grace time: ended now, %.0f s early",
            job.job_id,
            step,
            now - told,
            deadline - now,
        )
        return True

    def expire(self, now: float) -> list[Action]:
        """End the victims whose grace time is over."""
        actions: list[Action] = []
        for job in [j for j in self.ctl.jobs.values() if j.preempt_deadline is not None]:
            if job.state is not JobState.RUNNING:
                job.preempted_by = job.preempt_deadline = job.preempt_mode = job.preempt_time = None
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
            if not ctl.expedite(job):  # requeue_delay, as after any requeue (Slurm)
                ctl.delay_requeued(job, now)
        else:
            lifecycle.end(job, JobEvent.PREEMPT, now, completing=True)
            job.preempted_by = job.preempt_deadline = job.preempt_mode = job.preempt_time = None
        ctl.record(now, [(job, EventKind.PREEMPTED, {"by": by, "nodes": nodes, "attempt": job.restart_count})])
    ctl.launch_answered(job.job_id)
    log.warning("job %s: preempted by job %s, %s", job.job_id, by, "requeued" if requeue else "cancelled")


def lends_cpus(job: Job) -> bool:
    """Whether ``job`` is a SUSPEND victim now frozen: its CPUs count as free on its nodes
    (its memory and GPUs do not)."""
    return job.preempt_mode == "SUSPEND" and job.suspended_at is not None and job.preempted_by is not None


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
            if spec is not None:
                return spec.signal, spec.batch_only, False
    return int(signal.SIGTERM), False, True
