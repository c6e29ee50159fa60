"""In-allocation replacement: a failed node of a running job swapped for a free one, same job id.

``Replacements.job_lost_node`` is the one entry point the controller calls when a node of
a running job fails (``liveness``: not responding or set DOWN; ``training``: a GPU fault;
``agents``: a failed health check). It answers the actions that repair the job, or None:
then the caller does what it did before (``--no-kill``, else NODE_FAIL and requeue).
docs/recovery.md says what the operator and the user see; the failure ledger of another
part of the controller is fed from the same call (see the note there).

A job is repaired when it asked for it (``--spare-nodes=N``: at most N replacements over
its life), the failed node is not its batch host (the script runs there: the job is
requeued as before), it is no heterogeneous job, and ``sched.replace.choose_replacement``
finds a node (same leaf switch or block first, the partition's ``SpareNodes=`` pool first,
never a drained or down node). The change goes through ``ClusterState.record`` (stored,
so it survives a restart or a takeover; event ``replaced``): the failed node's share of
the allocation moves to the new node at the same position (so SLURM_NODEID of the other
nodes does not change), with as many CPUs, as much memory and as many GPUs. Then:

* the steps that ran on the failed node are stopped on their other nodes (their srun
  sees the step fail; the batch script goes on, and its next srun is placed by the
  controller on the repaired allocation, with the new SLURM_JOB_NODELIST and MASTER_ADDR);
* the failed node, when it still answers (a GPU fault, a failed health check), is told to
  end the job's processes there;
* the job's other nodes are told the new allocation (``AllocationRequest``, route
  ``/v1/allocation``): the batch host's record takes it, and every attempt of the job
  there finds it beside its progress file (``muster.progress.allocation()``);
* ``--spare-nodes=N@SIG``: the batch script and its processes get SIG;
* when no free node fits, a spare running preemptible work (a partition of lower
  PriorityTier with PreemptMode REQUEUE or CANCEL) is taken: its jobs are told to leave
  (``Preemptions.warn``) within their partition's GraceTime.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from muster.core.errors import StorageError
from muster.core.events import EventKind
from muster.core.job import Job, NodeAlloc
from muster.core.signals import parse_signal
from muster.core.states import JobState
from muster.core.steps import Step
from muster.ctld.actions import Action, NewAllocation, SignalJob, Terminate
from muster.ctld.state import ClusterState
from muster.ctld.steps import StepSignal
from muster.sched.replace import Candidate, Need, choose_replacement
from muster.sched.snapshot import spares

__all__ = ["Replacements"]

log = logging.getLogger("musterctld")

# Causes, as sacct and the events show them.
NOT_RESPONDING = "not_responding"
SET_DOWN = "set_down"
GPU_FAULT = "gpu_fault"
HEALTH_CHECK = "health_check"
HANG = "hang"  # ranks hung behind the others' on that node (``ctld.training``)
GATE_HOLD = 300.0  # seconds a gated replacement holds its job's new steps at most
PREFLIGHT = "preflight"  # the node failed the job's pre-flight gate (``ctld.dispatch``)


def _features(constraint: str | None) -> frozenset[str]:
    """The features a plain ``--constraint=a&b`` (or ``a,b``) asks for every node; an
    expression with ``|``, brackets or counts is not understood here: none required."""
    text = (constraint or "").strip()
    if not text or any(c in text for c in "|[]*()"):
        return frozenset()
    return frozenset(p.strip() for p in text.replace(",", "&").split("&") if p.strip())


def _lost_work(job: Job, now: float) -> float:
    p = job.progress or {}
    first, ckpt = p.get("first"), p.get("ckpt_time")
    if not isinstance(first, int | float):
        return 0.0
    since = max(float(first), float(ckpt)) if isinstance(ckpt, int | float) else float(first)
    return max(0.0, now - since)


class Replacements:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        # the running steps of a job (``StepBook.steps_of``), set by the application
        self.steps_of: Callable[[int], list[Step]] | None = None
        # ``Preemptions.warn``, set by the controller: a spare running preemptible work is
        # reclaimed (its jobs told to leave within their partition's GraceTime)
        self.warn: Callable[..., list[Action]] | None = None
        # nodes swapped into a gated running job whose pre-flight gate has not answered yet
        # (job -> node -> since): its new steps wait (``ctld.stepapi``, ``holds_steps``) until
        # ``ctld.dispatch`` clears them, GATE_HOLD seconds at most (a gate never dispatched)
        self.gating: dict[int, dict[str, float]] = {}

    def job_lost_node(
        self, job: Job, node: str, cause: str, why: str, now: float, detected: float | None = None
    ) -> list[Action] | None:
        """Node ``node`` of running ``job`` failed (``cause``: one of this module's causes,
        ``why``: the words for logs and sacct). The actions that swapped a spare into the
        job, or None when it is not replaced (the caller requeues it as before)."""
        if job.state is not JobState.RUNNING or node not in job.nodes or job.spec.spare_nodes <= 0:
            return None
        if job.het_job_id is not None:
            return None
        if job.batch_host == node:
            log.warning("job %s: its batch host %s failed (%s): not replaceable, requeued", job.job_id, node, why)
            return None
        # a node swapped into this attempt that failed the job's pre-flight gate is swapped
        # again without using another of the job's N (it never ran the job: the swap it
        # repairs was counted); a node of the job's start that failed it uses one
        again = cause == PREFLIGHT and any(
            e.get("new") == node and e.get("attempt") == job.restart_count for e in job.replacements
        )
        used = sum(1 for e in job.replacements if not e.get("again"))
        if not again and used >= job.spec.spare_nodes:
            log.warning("job %s: node %s failed but its %d replacement(s) are used", job.job_id, node, used)
            return None
        pick = self._choose(job, node)
        victims: list[tuple[Job, str, int]] = []
        if pick is None:
            reclaim = self._reclaim(job, node)
            if reclaim is not None:
                pick, victims = (reclaim[0], reclaim[1]), reclaim[2]
        if pick is None:
            log.warning("job %s: node %s failed (%s) and no node can replace it", job.job_id, node, why)
            return None
        new, gpu_ids = pick
        attempt = job.restart_count
        index = job.nodes.index(node)
        old = job.alloc[index]
        event: dict[str, Any] = {
            "old": node,
            "new": new,
            "cause": cause,
            "why": why[:256],
            "time": now,
            "detected": now if detected is None else detected,
            "attempt": attempt,
            "index": index,
            # the work since the last checkpoint (or the first step), redone after the swap:
            # goodput counts it as lost (``core.goodput``); 0 for a job that reports no progress
            "lost": _lost_work(job, now),
        }
        if again:
            event["again"] = True
        if victims:
            event["reclaimed"] = [v.job_id for v, _m, _g in victims]
        try:
            with self.state.atomic(job):
                job.alloc[index] = NodeAlloc(new, old.cpus, old.mem, list(gpu_ids))
                job.replacements.append(event)
                self._move_hold(job, node, attempt)
                self.state.record(now, [(job, EventKind.REPLACED, event)])
        except StorageError:
            return None  # logged; memory is the store's again: the caller requeues the job
        log.warning("job %s: node %s (%s) replaced by %s in its allocation", job.job_id, node, why, new)
        if self._gated(job):
            self.gating.setdefault(job.job_id, {})[new] = now
        with contextlib.suppress(StorageError):  # the failure ledger's record of the swap (not a fault)
            self.state.node_fault(node, "replacement", now, job=job, evidence=f"replaced by {new}: {why}")
        actions = self._actions(job, event)
        for victim, mode, grace in victims:  # the spare's preemptible work leaves within its grace
            reason = f"preempted: its node {new} replaces failed node {node} of job {job.job_id}"
            assert self.warn is not None
            actions += self.warn(victim, job.job_id, mode, float(grace), reason, now)
        return actions

    def _gated(self, job: Job) -> bool:
        """Whether the job passes the pre-flight gate (``--preflight`` or its partition's
        ``Preflight=YES``): a node swapped in is checked before it is handed over."""
        if job.spec.preflight:
            return True
        conf = self.state.config.partition(job.partition)
        return conf is not None and str(conf.params.get("Preflight", "NO")).lower() in ("yes", "true", "1", "on")

    def gate_done(self, job_id: int, node: str) -> None:
        """The gate of ``node``, swapped into the job, answered (passed or not)."""
        nodes = self.gating.get(job_id)
        if nodes is not None:
            nodes.pop(node, None)
            if not nodes:
                del self.gating[job_id]

    def holds_steps(self, job_id: int) -> bool:
        """Whether the job's new steps wait: a node swapped in is still being gated."""
        now = self.state.clock.now()
        return any(now - since < GATE_HOLD for since in self.gating.get(job_id, {}).values())

    def _choose(self, job: Job, failed: str) -> tuple[str, tuple[int, ...]] | None:
        state = self.state
        conf = state.config.partition(job.partition)
        if conf is None:
            return None
        share = job.alloc[job.nodes.index(failed)]
        need = Need(
            cpus=share.cpus,
            mem=share.mem,
            gpus=len(share.gpu_ids),
            gpu_type=job.shape.gpu_type,
            whole_node=job.shape.exclusive,
            features=_features(job.spec.constraint),
        )
        pool = spares(conf)
        now = state.clock.now()
        barred = set(job.spec.exclude)
        # nodes this attempt of the job lost (one that failed its pre-flight gate included)
        # are not tried again, drained or not (a failure the ledger judged the job's own
        # leaves them in service)
        barred.update(str(e.get("old")) for e in job.replacements if e.get("attempt") == job.restart_count)
        allowed: set[str] | None = None
        for resv in state.reservations.values():
            if not resv.active(now):
                continue
            if resv.name == job.spec.reservation:
                allowed = set(resv.nodes)
            else:
                barred.update(resv.nodes)
        candidates = []
        for name in conf.nodes:
            n = state.nodes.get(name)
            if n is None or (allowed is not None and name not in allowed):
                continue
            used_gpus = n.gpu_ids_alloc
            candidates.append(
                Candidate(
                    name=name,
                    index=n.index,
                    usable=n.available,
                    free_cpus=n.cpus - n.cpus_alloc,
                    free_mem=n.real_memory - n.mem_alloc,
                    free_gpu_ids=tuple(g for g in range(n.gpus) if g not in used_gpus),
                    gpu_type=n.gpu_type,
                    idle=not n.allocs,
                    spare=name in pool,
                    weight=n.weight,
                    features=frozenset(n.features),
                )
            )
        return choose_replacement(failed, need, candidates, job.nodes, barred, state.topology)

    def _reclaim(self, job: Job, failed: str) -> tuple[str, tuple[int, ...], list[tuple[Job, str, int]]] | None:
        """No free node fits: a usable node of the partition's spare pool whose every job may
        be preempted by this one (a partition of lower ``PriorityTier`` whose ``PreemptMode``
        is REQUEUE or CANCEL, the cluster's when it says none), and that would fit once they
        left. Returns it, the GPU indices the job takes there, and the jobs to tell to leave
        with their mode and grace. The swap does not wait for them: until they leave (their
        GraceTime at most) the node is shared."""
        state = self.state
        conf = state.config.partition(job.partition)
        if self.warn is None or conf is None:
            return None
        share = job.alloc[job.nodes.index(failed)]
        barred = set(job.nodes) | set(job.spec.exclude)
        for name in sorted(spares(conf), key=lambda n: state.nodes[n].index if n in state.nodes else 0):
            n = state.nodes.get(name)
            if n is None or not n.available or name in barred:
                continue
            victims: list[tuple[Job, str, int]] = []
            for job_id in state.job_ids_on(name):
                v = state.jobs.get(job_id)
                told = self._preemptible(v, conf.priority_tier) if v is not None else None
                if v is None or told is None:
                    victims = []
                    break
                victims.append((v, *told))
            if not victims:
                continue
            gpus = len(share.gpu_ids)
            if n.cpus < share.cpus or n.real_memory < share.mem or n.gpus < gpus:
                continue
            if gpus and job.shape.gpu_type and n.gpu_type != job.shape.gpu_type:
                continue
            return name, tuple(range(gpus)), victims
        return None

    def _preemptible(self, victim: Job, tier: int) -> tuple[str, int] | None:
        """(mode, grace) when ``victim`` may be preempted for a job of a partition of
        PriorityTier ``tier``; None otherwise."""
        conf = self.state.config.partition(victim.partition)
        if victim.state is not JobState.RUNNING or victim.preempted_by is not None or conf is None:
            return None
        if conf.priority_tier >= tier:
            return None
        mode = self.state.config.partition_preempt_mode(conf)
        for kind in ("REQUEUE", "CANCEL"):
            if kind in mode.split(","):
                return kind, conf.grace_time
        return None

    def _move_hold(self, job: Job, failed: str, attempt: int) -> None:
        """The per-node and per-job indexes of what the run holds follow the new allocation."""
        node = self.state.nodes.get(failed)
        if node is not None:
            node.allocs.pop((job.job_id, attempt), None)
        where = self.state.held.get(job.job_id, {}).get(attempt)
        if where is not None:
            where.discard(failed)
        self.state.hold_resources(job)

    def _actions(self, job: Job, event: dict[str, Any]) -> list[Action]:
        failed, new, cause, attempt = event["old"], event["new"], event["cause"], event["attempt"]
        alloc: list[dict[str, object]] = [
            {"node": a.node, "cpus": a.cpus, "mem": a.mem, "gpu_ids": list(a.gpu_ids)} for a in job.alloc
        ]
        others = [n for n in job.nodes if n != new]
        actions: list[Action] = [NewAllocation(job.job_id, attempt, others, alloc, failed, new, cause, event["time"])]
        for step in self.steps_of(job.job_id) if self.steps_of is not None else []:
            if step.attempt != attempt or failed not in step.layout.nodes:
                continue
            rest = [n for n in step.layout.nodes if n != failed]
            if rest:  # their srun sees the step fail; the batch script goes on
                actions.append(StepSignal(job.job_id, attempt, step.step_id, rest, 15, True))  # type: ignore[arg-type]
        if cause != NOT_RESPONDING:
            actions.append(Terminate(job.job_id, attempt, [failed], "node_fail"))
        if job.spec.replace_signal and job.batch_host is not None:
            try:
                sig = parse_signal(job.spec.replace_signal)
            except ValueError:
                sig = 0
            if sig:
                actions.append(SignalJob(job.job_id, [job.batch_host], sig, batch_only=False, whole_job=True))
        return actions
