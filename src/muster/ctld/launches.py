"""Runs starting and ending: the scheduler's starts committed and handed to dispatch, launches
that failed (whose fault: the node's, the job's, a conflict, the site's Prolog), and the
agents' reports of ended runs. See docs/faults.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from muster.core import lifecycle
from muster.core.attribution import JOB
from muster.core.events import EventKind, ended_kind
from muster.core.job import Job
from muster.core.lifecycle import JobEvent
from muster.core.states import JobState, Reason
from muster.ctld.actions import Action, Launch, Terminate
from muster.ctld.preemption import end_victim
from muster.ctld.state import ClusterState
from muster.ctld.wire import message
from muster.protocol.messages import JobDone

log = logging.getLogger("musterctld")


class Launches:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        # ``Training.judged_end``: an attempt judged hung ends Hung whatever its script did
        self.judged_end: Callable[[Job, str | None], list[Action] | None] | None = None

    def apply_starts(self, starts: list[Any], now: float) -> list[Action]:
        """Record the scheduler's start decisions, then hand back launches to perform."""
        changes = []
        actions: list[Action] = []
        for s in starts:
            job = self.state.jobs.get(s.job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            lifecycle.start(job, s.alloc, now, scheduler="Backfill" if s.backfilled else "Main")
            job.partition = s.partition
            self.state.hold_resources(job)
            changes.append((job, EventKind.START, {"nodes": job.nodes, "attempt": job.restart_count}))
        if not changes:
            return actions
        self.state.record(now, changes)  # on failure: nothing started, nothing held
        mono = self.state.clock.monotonic()
        for job, _kind, _data in changes:
            if self.state.accounting is not None:
                self.state.accounting.started(job)  # charged from now, even if it ends before a pass
            if job.spec.interactive:
                continue  # srun/salloc hold it: there is no batch script to launch
            self.state.launch_sent(job.job_id, mono)
            actions.append(Launch(job))
        return actions

    def launch_failed(
        self, job_id: int, attempt: int, message: str, fault: str | None = None, node: str | None = None
    ) -> list[Action]:
        """The launch of this attempt failed; ``fault`` says whose fault it is (as the agent
        judged it): ``None`` (the agent could not be reached), ``"node"`` and ``"preflight"``
        (the pre-flight gate failed there: ``agent.preflight``) requeue the job elsewhere,
        ``"node"`` and ``"preflight"`` draining the node first (through the failure ledger);
        ``"job"`` ends the job FAILED with the reason in SystemComment; ``"stale"`` (the launch conflicted with what runs there
        already) changes nothing; ``"prolog"`` (the site's Prolog failed on ``node``, the
        batch host unless given) drains the node and requeues the job held, as Slurm does,
        returning the termination of what the job runs on its other nodes. Repeated node
        failures of one job hold it (JobHoldMaxRequeue) instead of trying node after node.
        Reports of the same failure (the launch's answer, the agent's saved report, a
        heartbeat) count once."""
        self.state.launch_answered(job_id)
        job = self.state.jobs.get(job_id)
        if job is None or job.state is not JobState.RUNNING or job.restart_count != attempt:
            return []
        if fault == "stale":
            return []
        now = self.state.clock.now()
        host = job.batch_host if node is None else node
        if fault == "job":
            with self.state.atomic(job):
                lifecycle.finish(job, 1, 0, now, reason=Reason.LAUNCH_FAILURE)
                job.system_comment = f"Launch failed on {host}: {message}"
                self.state.release_resources(job)
                self.state.record(now, [(job, EventKind.FAILED, {"exit_code": 1, "signal": 0, "launch": message})])
            log.warning("job %s: its launch on %s failed by its own fault: %s", job_id, host, message)
            return []
        own = False  # the same job failed the same way on other nodes: its fault (no drain storm)
        if fault in ("node", "prolog", "preflight") and host is not None:
            drain = message if fault in ("prolog", "preflight") else f"launch failed: {message}"
            kind = fault if fault in ("prolog", "preflight") else "launch"
            own = self.state.node_fault(host, kind, now, job=job, evidence=message, drain=drain) == JOB
        others = [n for n in job.nodes if n != host]
        limit = self.max_launch_requeue
        with self.state.atomic(job):
            self.state.release_resources(job)
            job.launch_failures += 1
            job.system_comment = f"Launch failed on {host}: {message}"
            held = fault == "prolog" or own or job.launch_failures >= limit
            why = (Reason.LAUNCH_FAILED if fault == "prolog" or own else Reason.HOLD_MAX_REQUEUE) if held else None
            lifecycle.requeue(job, now, hold="user" if held else None, reason=why)
            self.state.delay_requeued(job, now, held=held)  # requeue_delay, as in Slurm
            self.state.record(
                now, [(job, EventKind.LAUNCH_FAILED, {"error": message, "node": host, "fault": fault, "held": held})]
            )
        log.warning(
            "job %s: launch on %s failed (%s); %s",
            job_id,
            host,
            message,
            ("held" if fault == "prolog" or own else f"held after {job.launch_failures} failed launches")
            if held
            else "requeued",
        )
        return [Terminate(job_id, attempt, others, "requeue")] if fault == "prolog" and others else []

    @property
    def max_launch_requeue(self) -> int:
        """``SchedulerParameters=max_batch_requeue=N`` (Slurm's; default 5)."""
        raw = self.state.config.scheduler_parameters.get("max_batch_requeue", "")
        return max(1, int(raw)) if raw.isdigit() else 5

    def launch_done(self, job_id: int) -> None:
        self.state.launch_answered(job_id)

    def job_done(self, body: JobDone | Mapping[str, Any]) -> list[Action]:
        """An agent's report of an ended run (or a launch that failed). A report of an
        earlier attempt frees what that attempt held and changes nothing else; a report
        repeated (the agent retries until acknowledged) changes nothing."""
        msg = message(JobDone, body)
        now = self.state.clock.now()
        job = self.state.jobs.get(msg.job_id)
        attempt = msg.restart_count
        if job is None:
            return []
        if msg.launch_failure:
            return self.launch_failed(job.job_id, attempt, msg.reason or "launch failed", msg.launch_failure, msg.node)
        self.state.launch_answered(job.job_id)
        self.state.lost.pop(job.job_id, None)
        if attempt != job.restart_count:
            # A report from an earlier attempt: only its resources need freeing.
            self.state.release_resources(job, attempt)
            return []
        if msg.node and job.alloc and msg.node not in job.nodes:
            return []  # a node the job went on without (--no-kill): its share is already free
        exit_code, sig, by = msg.exit_code, msg.signal, msg.terminated_by
        ended = ended_at(msg.end_time, job.start_time, now)
        if msg.usage is not None:
            job.usage = msg.usage.model_dump()
        others = [n for n in job.nodes if n != msg.node]
        if job.state is JobState.RUNNING and job.preempt_deadline is not None and by != "node_fail":
            # a victim that ended in its grace time (it checkpointed and exited): preempted
            end_victim(self.state, job, now)
            self.state.release_resources(job, attempt)
            if job.completing:
                lifecycle.cleaned(job, exit_code, sig)
                self.state.record(now, [(job, EventKind.CLEANED, {"exit_code": exit_code, "signal": sig, "by": by})])
            return [Terminate(job.job_id, attempt, others, "preempt")] if others else []
        if job.state is JobState.RUNNING and self.judged_end is not None:
            hung = self.judged_end(job, by)
            if hung is not None:
                return hung
        if job.state is JobState.RUNNING:
            if by == "node_fail":
                # The agent lost the job (e.g. it restarted and the exit status is gone):
                # a node failure for this attempt, requeued unless --no-requeue.
                self.state.node_failed_job(job, now, msg.reason or "lost by its node agent")
                return [Terminate(job.job_id, attempt, others, "cleanup")] if others else []
            if by == "timeout":
                lifecycle.end(job, JobEvent.TIMEOUT, ended, completing=False)
                lifecycle.cleaned(job, exit_code, sig)
            elif by == "oom":  # the node's cgroup saw OOM kills: OUT_OF_MEMORY, ExitCode 0:125
                lifecycle.end(job, JobEvent.OUT_OF_MEMORY, ended, completing=False)
                lifecycle.cleaned(job, 0, OOM_SIGNAL)
            else:
                lifecycle.finish(job, exit_code, sig, ended)
            kind = ended_kind(job.state)
        elif job.completing:
            lifecycle.cleaned(job, exit_code, sig)
            kind = EventKind.CLEANED
        else:
            return []
        self.state.release_resources(job)
        self.state.record(now, [(job, kind, {"exit_code": exit_code, "signal": sig, "by": by})])
        return [Terminate(job.job_id, attempt, others, "cleanup")] if others else []


OOM_SIGNAL = 125  # Slurm's ExitCode of an OUT_OF_MEMORY job: 0:125


def ended_at(reported: float | None, started: float | None, now: float) -> float:
    """When a run ended: the time its agent saw it end (a report delivered late, after a
    controller outage or takeover, keeps its true end), bounded by what the controller
    knows: not after now, not before the run started (a node's clock may be off). Without
    a report's time, now."""
    if reported is None or reported != reported:  # absent, or NaN
        return now
    end = min(reported, now)
    return max(end, started) if started is not None else end
