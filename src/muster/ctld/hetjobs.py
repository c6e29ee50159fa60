"""Heterogeneous jobs in the controller: one submission of several components, each a job
of its own (see ``core.hetjob``).

``HetJobs.submit`` checks every component as an ordinary submission is checked and
accepts all of them in one transaction, or none: component k gets job id ``N + k``, where
N (the leader's id) is ``het_job_id`` on each. Only the leader runs the batch script; the
other components are allocations with no script of their own (``JobSpec.interactive``),
whose steps ``srun --het-group`` starts. The scheduler starts the components together
(``sched.hetgroups``).

The leader decides for the whole job: ``sweep`` (every second, over the het jobs still
alive only) ends the other components once the leader ended, with its outcome (the batch
script's exit, a cancel, a time limit), and sends running components back to the queue
when the leader was requeued. A component that lost its node takes the whole job with it:
the leader is requeued (or ends NODE_FAIL), and the others follow it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from muster.core import lifecycle
from muster.core.errors import InvalidRequest
from muster.core.events import EventKind, ended_kind
from muster.core.job import Job, JobSpec
from muster.core.lifecycle import JobEvent
from muster.core.states import JobState
from muster.ctld.actions import Action, Terminate
from muster.ctld.hetindex import components, het_ids
from muster.ctld.identity import Identity
from muster.ctld.jobs import JobActions

__all__ = ["HetJobs", "components", "het_ids", "launch_view"]

log = logging.getLogger("musterctld")

ARRAY_REFUSED = "Job arrays of heterogeneous jobs are not supported"


def launch_view(job: Job, jobs: Mapping[int, Job]) -> dict[str, Any]:
    """The leader's wire form for its agent, with every component's (``het_components``),
    from which the agent builds the ``SLURM_*_HET_GROUP_<k>`` variables."""
    data = job.to_dict()
    if job.het_job_id is not None:
        data["het_components"] = [c.to_dict() for c in components(jobs, job.het_job_id)]
    return data


class HetJobs:
    def __init__(self, queue: JobActions) -> None:
        self.queue = queue
        self.state = queue.state
        self.live: set[int] = set()  # leaders with a component not yet ended

    def load(self) -> None:
        """After a restart: the het jobs still alive, from the jobs loaded."""
        self.live = {
            j.het_job_id for j in self.state.jobs.values() if j.het_job_id is not None and not j.state.is_terminal
        }

    def submit(self, specs: list[JobSpec], who: Identity, token: str | None = None) -> list[Job]:
        """Accept every component durably, or none (the first refusal is the answer). A
        ``token`` seen before from this caller returns the components it created."""
        known = self.queue.submitted(who, token)
        if known is not None:
            return components(self.state.jobs, known.job_id) or [known]
        if len(specs) < 2:
            raise InvalidRequest("A heterogeneous job needs at least two components")
        if any(spec.array for spec in specs):
            raise InvalidRequest(ARRAY_REFUSED)
        now = self.state.clock.now()
        first = self.state.next_job_id
        jobs = [self.queue.prepare(spec, who, first + k, now) for k, spec in enumerate(specs)]
        for k, job in enumerate(jobs):
            job.het_job_id = first
            job.het_job_offset = k
            if k > 0:
                job.spec.interactive = True  # only the leader runs the batch script
        self.queue.accept(jobs, who, now, token)
        self.live.add(first)
        return jobs

    def sweep(self) -> list[Action]:
        """Components follow their leader: ended with it, requeued with it."""
        if not self.live:
            return []
        now = self.state.clock.now()
        changes: list[tuple[Job, EventKind, dict[str, Any]]] = []
        actions: list[Action] = []
        for leader_id in sorted(self.live):
            comps = components(self.state.jobs, leader_id)
            if not comps or comps[0].het_job_offset != 0 or all(c.state.is_terminal for c in comps):
                self.live.discard(leader_id)
                continue
            leader = comps[0]
            if leader.state is JobState.RUNNING and any(
                c.state is JobState.PENDING or c.state is JobState.NODE_FAIL for c in comps[1:]
            ):
                ended = any(c.state is JobState.NODE_FAIL for c in comps[1:])
                changes.append(self._lost_component(leader, now, actions, requeue_allowed=not ended))
                continue  # the next sweep moves the other components with their leader
            for comp in comps[1:]:
                change = self._follow(leader, comp, now, actions)
                if change is not None:
                    changes.append(change)
        if changes:
            self.state.record(now, changes)
        return actions

    def _lost_component(
        self, leader: Job, now: float, actions: list[Action], requeue_allowed: bool
    ) -> tuple[Job, EventKind, dict[str, Any]]:
        """A component other than the leader lost its node (requeued, or ended NODE_FAIL):
        the whole job's attempt is over, as in Slurm. The leader's batch script is stopped
        and the job requeued when it may be, else it ends NODE_FAIL; it keeps what it holds
        until its agent confirms, as any stopped batch job."""
        attempt, nodes = leader.restart_count, list(leader.nodes)
        self.state.launch_answered(leader.job_id)
        requeue = leader.spec.requeue if leader.spec.requeue is not None else self.state.config.job_requeue
        requeue = requeue and requeue_allowed  # a component that ended for good ends the job
        log.warning(
            "job %s: a component of the het job lost its node; the whole job %s",
            leader.job_id,
            "is requeued" if requeue else "ends NODE_FAIL",
        )
        if requeue:
            lifecycle.requeue(leader, now, outcome="NODE_FAIL")
            actions.append(Terminate(leader.job_id, attempt, nodes, "requeue"))
            return leader, EventKind.REQUEUE, {"by": "het_component", "attempt": leader.restart_count}
        lifecycle.end(leader, JobEvent.NODE_FAIL, now, completing=True)
        actions.append(Terminate(leader.job_id, attempt, nodes, "cancel"))
        return leader, EventKind.NODE_FAIL, {"why": "a component of the het job lost its node", "nodes": nodes}

    def _follow(
        self, leader: Job, comp: Job, now: float, actions: list[Action]
    ) -> tuple[Job, EventKind, dict[str, Any]] | None:
        attempt = comp.restart_count
        nodes = list(comp.nodes)
        if leader.state.is_terminal and not comp.state.is_terminal:
            running = comp.state is JobState.RUNNING
            if leader.state is JobState.CANCELLED or not running:
                lifecycle.end(comp, JobEvent.CANCEL, now, completing=False)
                comp.cancelled_by = leader.cancelled_by
                lifecycle.cleaned(comp, leader.exit_code, leader.exit_signal)
            elif leader.state in (JobState.TIMEOUT, JobState.NODE_FAIL):
                event = JobEvent.TIMEOUT if leader.state is JobState.TIMEOUT else JobEvent.NODE_FAIL
                lifecycle.end(comp, event, now, completing=False)
                lifecycle.cleaned(comp, leader.exit_code, leader.exit_signal)
            else:
                lifecycle.finish(comp, leader.exit_code, leader.exit_signal, now)
            if running:
                self.state.release_resources(comp, attempt)
                actions.append(Terminate(comp.job_id, attempt, nodes, "cleanup"))
            log.info("job %s: ends %s with its het job leader %s", comp.job_id, comp.state, leader.job_id)
            return comp, ended_kind(comp.state), {"by": "het_leader", "leader": leader.job_id}
        if leader.state is JobState.PENDING and comp.state is JobState.RUNNING:
            lifecycle.requeue(comp, now)
            self.state.release_resources(comp, attempt)
            actions.append(Terminate(comp.job_id, attempt, nodes, "requeue"))
            return comp, EventKind.REQUEUE, {"by": "het_leader", "attempt": comp.restart_count}
        return None
