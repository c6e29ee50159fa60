"""Job steps in the controller: allocation inside a job, the step credential, endings.

``StepBook`` keeps the running steps of every job in memory (``active``), places new ones
with ``core.steps.plan_step`` against what the job's other steps hold, and persists every
change to the store's ``steps`` table (one row per step and attempt; accounting reads it)
before answering. It performs no I/O towards agents: like the controller it returns
``Action`` objects for ``dispatch``.

Life of a step::

    srun ── POST /v1/jobs/{id}/steps ──► create ──► RUNNING (row written; grant signed)
                                             │ StepWait: srun's request waits (long poll)
    srun ── POST .../steps/{s}/done ──────► finish ──► COMPLETED | FAILED | CANCELLED
    agent ─ POST /v1/agent/step_gone ─────► gone ───► CANCELLED (srun went away)
    job ends first (cancel, timeout, node failure, batch script exit) ──► sweep: CANCELLED
                                              (NODE_FAIL when the job failed with its node)

Interactive allocations (``JobSpec.interactive``: the job ``srun`` creates outside an
allocation, and ``salloc``'s) have no batch script. Their holder ends them
(``complete_allocation``: the job takes the command's exit code), a cancel ends them as
usual, and ``sweep`` enforces their time limit here, since no agent watches a script.

Waiting is by broadcast: ``changed()`` returns the event of the current generation, which
``notify`` sets (and replaces) whenever something a waiter might want happened (a job
started, a step ended, a job ended). A waiter takes the event *before* checking its
condition, so no wake-up falls between the check and the wait.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from muster.core import lifecycle
from muster.core.errors import InvalidJobId, InvalidRequest, PermissionDenied, StorageError
from muster.core.events import EventKind, ended_kind
from muster.core.hostlist import compress
from muster.core.job import Job
from muster.core.labels import check_label
from muster.core.lifecycle import JobEvent
from muster.core.memtext import format_mem
from muster.core.signals import parse_signal_spec
from muster.core.states import JobState
from muster.core.steps import (
    BATCH_STEP,
    NodeShare,
    Step,
    StepLayout,
    StepRejected,
    StepRequest,
    StepState,
    StepWait,
    format_step_id,
    master_port,
    plan_step,
)
from muster.ctld.actions import Action, StepSignal, Terminate
from muster.ctld.identity import Identity
from muster.ctld.state import ClusterState
from muster.protocol.stepcred import GRANT_TTL, sign_grant, sign_watch

__all__ = ["StepBook", "StepSignal", "step_tres", "step_wire"]

log = logging.getLogger("musterctld.steps")

ENDED_JOB = "Job/step already completing or completed"
# Slurm's ESLURM_DISABLED: a step of a suspended job is not created (srun retries)
SUSPENDED_JOB = "Requested operation is presently disabled"


def step_tres(cpus: int, mem: int, nodes: int, gpus: int) -> str:
    """``cpu=2,gres/gpu=4,mem=2000M,node=2``: a step's TRES in scontrol's order."""
    parts = [f"cpu={cpus}"]
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    if mem:
        parts.append(f"mem={format_mem(mem)}")
    parts.append(f"node={nodes}")
    return ",".join(parts)


def step_wire(step: Step, now: float) -> dict[str, Any]:
    """A step as commands see it (``squeue -s``, ``scontrol show step``)."""
    layout = step.layout
    end = step.end_time if step.end_time is not None else now
    gpus_per_node = {len(g) for g in layout.gpus} if layout.holds_gpus else set()
    return {
        "id": step.id_text,
        "job_id": step.job_id,
        "step_id": "batch" if step.step_id == BATCH_STEP else step.step_id,
        "attempt": step.attempt,
        "name": step.name,
        "user": step.user,
        "uid": step.uid,
        "state": step.state,
        "partition": step.partition,
        "start_time": step.start_time,
        "end_time": step.end_time,
        "run_time": int(max(0.0, end - step.start_time)),
        "time_limit": step.time_limit,
        "nodes": list(layout.nodes),
        "nodelist": compress(layout.nodes),
        "num_nodes": len(layout.nodes),
        "num_tasks": layout.ntasks,
        "num_cpus": step.num_cpus,
        "num_gpus": step.num_gpus,
        "tasks": layout.tasks,
        "tres": step_tres(step.num_cpus, step.mem, len(layout.nodes), step.num_gpus)
        if step.step_id != BATCH_STEP
        else "",
        "tres_per_node": f"gres:gpu:{gpus_per_node.pop()}" if len(gpus_per_node) == 1 else "",
        "distribution": layout.distribution,
        "argv": list(step.argv),
        "srun_host": step.srun_host,
        "srun_pid": step.srun_pid,
        "exit_code": step.exit_code,
        "signal": step.exit_signal,
    }


class StepBook:
    def __init__(self, controller: ClusterState, key: bytes) -> None:
        self.ctl = controller
        self.store = controller.store
        self.clock = controller.clock
        self.key = key
        self.active: dict[int, dict[int, Step]] = {}  # job id -> step id -> running step
        self.next_ids: dict[tuple[int, int], int] = {}  # (job id, attempt) -> next step id
        self.interactive: set[int] = set()  # running or pending srun/salloc allocations
        self._warned: set[tuple[int, int]] = set()  # (job, attempt) given its --signal warning
        self.cancelled: set[tuple[int, int]] = set()  # (job, step) cancelled by scancel
        self._changed = asyncio.Event()

    # --- start-up ---------------------------------------------------------------------

    def load(self) -> None:
        """Running steps of the jobs in memory (after a controller restart)."""
        live = [j.job_id for j in self.ctl.jobs.values() if j.is_active]
        for step in self.store.load_steps(live):
            key = (step.job_id, step.attempt)
            self.next_ids[key] = max(self.next_ids.get(key, 0), step.step_id + 1)
            if step.active:
                self.active.setdefault(step.job_id, {})[step.step_id] = step
        self.interactive = {j.job_id for j in self.ctl.jobs.values() if j.spec.interactive and not j.state.is_terminal}

    # --- waiting ----------------------------------------------------------------------

    def changed(self) -> asyncio.Event:
        return self._changed

    def notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    @staticmethod
    async def wait(event: asyncio.Event, timeout: float) -> None:
        try:
            await asyncio.wait_for(event.wait(), max(0.0, timeout))
        except TimeoutError:
            pass

    # --- queries ----------------------------------------------------------------------

    def steps_of(self, job_id: int) -> list[Step]:
        return sorted(self.active.get(job_id, {}).values(), key=lambda s: s.step_id)

    def batch_step(self, job: Job) -> Step | None:
        """The batch script as a step (``N.batch``), for a running batch job."""
        if job.spec.interactive or job.state is not JobState.RUNNING or not job.alloc:
            return None
        first = job.alloc[0]
        layout = StepLayout(
            nodes=[first.node],
            tasks=[[0]],
            cpus=[first.cpus],
            gpus=[list(first.gpu_ids)],
            task_gpus=[[list(first.gpu_ids)]],
            holds_gpus=bool(first.gpu_ids),
        )
        return Step(
            job_id=job.job_id,
            step_id=BATCH_STEP,
            attempt=job.restart_count,
            name="batch",
            uid=job.uid,
            user=job.user,
            state=StepState.RUNNING,
            start_time=job.start_time or 0.0,
            layout=layout,
            partition=job.partition,
            mem=first.mem,
        )

    def shares(self, job: Job) -> list[NodeShare]:
        """What each node of the job offers a new step, given its running steps."""
        cpus: dict[str, int] = {}
        gpus: dict[str, set[int]] = {}
        for step in self.active.get(job.job_id, {}).values():
            for node, c, g in zip(step.layout.nodes, step.layout.cpus, step.layout.gpus, strict=True):
                cpus[node] = cpus.get(node, 0) + c
                if step.layout.holds_gpus:
                    gpus.setdefault(node, set()).update(g)
        return [
            NodeShare(a.node, a.cpus, tuple(a.gpu_ids), cpus.get(a.node, 0), frozenset(gpus.get(a.node, ())))
            for a in job.alloc
        ]

    # --- permissions ------------------------------------------------------------------

    @staticmethod
    def check_owner(job: Job, who: Identity) -> None:
        if not who.admin and job.uid != who.uid:
            raise PermissionDenied()

    def watch(self, job: Job) -> None:
        """Remember an interactive job so that ``sweep`` enforces its time limit."""
        if job.spec.interactive and not job.state.is_terminal:
            self.interactive.add(job.job_id)

    # --- creating ---------------------------------------------------------------------

    def create(
        self,
        job: Job,
        who: Identity,
        request: StepRequest,
        name: str = "",
        argv: list[str] | None = None,
        srun_host: str = "",
        srun_pid: int = 0,
    ) -> Step | StepWait:
        """Place and record a step of a running job, or say it must wait."""
        self.check_owner(job, who)
        if job.state is not JobState.RUNNING or job.completing:
            raise InvalidRequest(ENDED_JOB)
        name = name or (argv[0].rsplit("/", 1)[-1] if argv else "step")
        check_label("step name", name)
        if job.suspended_at is not None:  # scontrol suspend: srun waits until it is resumed, as Slurm's
            return StepWait(SUSPENDED_JOB)
        try:
            outcome = plan_step(request, self.shares(job))
        except StepRejected as e:
            raise InvalidRequest(str(e)) from None
        if isinstance(outcome, StepWait):
            return outcome
        now = self.clock.now()
        key = (job.job_id, job.restart_count)
        step_id = self.next_ids.get(key, 0)
        self.next_ids[key] = step_id + 1
        argv = list(argv or [])
        mem_of = {a.node: a.mem for a in job.alloc}
        step = Step(
            job_id=job.job_id,
            step_id=step_id,
            attempt=job.restart_count,
            name=name,
            uid=job.uid,
            user=job.user,
            state=StepState.RUNNING,
            start_time=now,
            layout=outcome,
            request=request,
            argv=argv,
            cpus_per_task=request.cpus_per_task,
            srun_host=srun_host,
            srun_pid=srun_pid,
            partition=job.partition,
            time_limit=request.time_limit if request.time_limit is not None else job.time_limit,
            mem=sum(mem_of.get(n, 0) for n in outcome.nodes),
        )
        self.store.record_steps(now, [(step, "start")])  # before it exists in memory
        self.active.setdefault(job.job_id, {})[step_id] = step
        return step

    def _commit(
        self, now: float, steps: list[tuple[Step, str]], jobs: list[tuple[Job, EventKind, dict[str, Any]]] | None = None
    ) -> None:
        """Commit ended steps (and the jobs they end); when the commit fails, memory goes
        back to what the store holds: the jobs as stored, the steps running again."""
        jobs = jobs or []
        self.ctl.changed(j for j, _k, _d in jobs)  # their listed fragments are stale (ctld.listing)
        try:
            self.store.record_steps(now, steps, jobs)
        except StorageError:
            self.ctl.reload_jobs(j for j, _k, _d in jobs)
            for step, kind in steps:
                if kind != "end":
                    continue
                step.state, step.end_time, step.exit_code, step.exit_signal = StepState.RUNNING, None, 0, 0
                step.usage = None
                self.active.setdefault(step.job_id, {})[step.step_id] = step
            for job, _k, _d in jobs:
                if job.state is JobState.RUNNING and job.spec.interactive:
                    self.interactive.add(job.job_id)
            raise

    def answer(self, job: Job, step: Step) -> dict[str, Any]:
        """What srun needs to launch the step: the layout, the nodes' addresses, the grant."""
        nodes = []
        for name in step.layout.nodes:
            node = self.ctl.nodes[name]
            # the agent's wire protocol: srun runs a container only on agents that know how
            # a Controller's agents: ctld.controller imports this module's importers (no circle)
            protocol = self.ctl.agents.protocol(name)  # type: ignore[attr-defined]
            nodes.append({"name": name, "addr": node.addr, "port": node.port, "protocol": protocol})
        spec = job.spec
        alloc = job.alloc
        grant = {
            "v": 1,
            "job_id": job.job_id,
            "attempt": job.restart_count,
            "step_id": step.step_id,
            "uid": job.uid,
            "gid": job.gid,
            "user": job.user,
            "issued": self.clock.now(),
            "expires": self.clock.now() + GRANT_TTL,
            "job": {
                "name": spec.name,
                "partition": job.partition,
                "account": spec.account or job.user,
                "qos": spec.qos or "normal",
                "submit_host": job.submit_host,
                "workdir": spec.workdir,
                "time_limit": job.time_limit,
                "start_time": job.start_time,
                "restart_count": job.restart_count,
                "nodes": [a.node for a in alloc],
                "cpus": [a.cpus for a in alloc],
                "mem": [a.mem for a in alloc],  # MB per node: the job's cgroup limit there
                "gpu_ids": [list(a.gpu_ids) for a in alloc],  # its GPUs per node (devices cgroup)
                "ntasks": job.shape.ntasks,
                "ntasks_per_node": spec.ntasks_per_node,
                "cpus_per_task": spec.cpus_per_task,
                "interactive": spec.interactive,
                "array_job_id": getattr(job, "array_job_id", None),
                "array_task_id": getattr(job, "array_task_id", None),
            },
            "step": {
                "name": step.name,
                "nodes": step.layout.nodes,
                "addrs": [n["addr"] for n in nodes],
                "ports": [n["port"] for n in nodes],  # a relaying agent reaches its subtree here
                "tasks": step.layout.tasks,
                "cpus": step.layout.cpus,
                "gpus": step.layout.gpus,
                "task_gpus": step.layout.task_gpus,
                "distribution": step.layout.distribution,
                "cpus_per_task": step.request.cpus_per_task,
                "ntasks_per_node": step.request.ntasks_per_node,
                "gpus_per_task": step.request.gpus_per_task,
                "gpu_bind": step.request.gpu_bind,  # SLURMD_TRES_BIND
                "time_limit": step.request.time_limit,  # the agent stops the step then
                "master_port": master_port(job.job_id, step.step_id),
            },
        }
        text, sig = sign_grant(self.key, grant)
        return {
            "step": step_wire(step, self.clock.now()),
            "nodes": nodes,
            "grant": text,
            "sig": sig,
            "kill_wait": self.ctl.config.kill_wait,
            "slurmd_timeout": self.ctl.config.slurmd_timeout,
            "tree_width": self.ctl.config.tree_width,
            "message_timeout": self.ctl.config.message_timeout,
        }

    def watch_answer(self, job: Job, who: Identity, step_id: int) -> dict[str, Any]:
        """What sattach needs to attach to running step ``step_id`` of ``job``: its layout,
        its nodes' addresses and a signed watch (``protocol.stepcred.sign_watch``). Only
        the job's user, root and SlurmUser may: ``PermissionDenied`` for anyone else,
        ``InvalidJobId`` for a job or step that does not run (Slurm's one message)."""
        if who.uid != job.uid and who.uid != 0 and who.user != (self.ctl.config.slurm_user or "root"):
            raise PermissionDenied()
        step = self.active.get(job.job_id, {}).get(step_id) if job.state is JobState.RUNNING else None
        if step is None:
            raise InvalidJobId()
        nodes = [{"name": n, "addr": self.ctl.nodes[n].addr, "port": self.ctl.nodes[n].port} for n in step.layout.nodes]
        now = self.clock.now()
        watch = {
            "v": 1,
            "job_id": job.job_id,
            "step_id": step_id,
            "nodes": list(step.layout.nodes),
            "user": who.user,
            "issued": now,
            "expires": now + GRANT_TTL,
        }
        text, sig = sign_watch(self.key, watch)
        return {
            "step": step_wire(step, now),
            "nodes": nodes,
            "tasks": step.layout.tasks,
            "watch": text,
            "sig": sig,
            "message_timeout": self.ctl.config.message_timeout,
        }

    # --- ending -----------------------------------------------------------------------

    def finish(
        self,
        job: Job,
        who: Identity,
        step_id: int,
        exit_code: int,
        signal: int,
        cancelled: bool = False,
        end_job: bool = False,
        usage: dict[str, Any] | None = None,
        oom_kills: int = 0,
    ) -> list[Action]:
        """srun reports its step's end (and, for its own allocation, the job's end); a step
        whose tasks' cgroups saw OOM kills ends OUT_OF_MEMORY, ExitCode 0:125 (Slurm's)."""
        self.check_owner(job, who)
        now = self.clock.now()
        steps: list[tuple[Step, str]] = []
        step = self.active.get(job.job_id, {}).pop(step_id, None)
        if step is not None:
            ended_job = job.state is not JobState.RUNNING or step.attempt != job.restart_count
            if cancelled or (job.job_id, step_id) in self.cancelled:
                self.cancelled.discard((job.job_id, step_id))
                step.state = StepState.CANCELLED
            elif oom_kills:
                step.state = StepState.OUT_OF_MEMORY
            elif ended_job and not end_job and (exit_code or signal):
                # The job ended under the step (scancel, its time limit, a requeue): its
                # tasks were stopped with it, so the step is CANCELLED (NODE_FAIL with its
                # node), as in Slurm's accounting, not FAILED with the signal srun saw.
                step.state = StepState.NODE_FAIL if job.state is JobState.NODE_FAIL else StepState.CANCELLED
            elif exit_code == 0 and signal == 0:
                step.state = StepState.COMPLETED
            elif step.request.time_limit is not None and now >= step.start_time + step.request.time_limit:
                step.state = StepState.TIMEOUT  # its agent stopped it at its own limit
            else:
                step.state = StepState.FAILED
            step.end_time = now
            step.exit_code = exit_code
            step.exit_signal = signal
            if step.state == StepState.CANCELLED and not (exit_code or signal):
                step.exit_signal = 15  # stopped with its job or by scancel: Slurm's sacct says 0:15
            if step.state == StepState.OUT_OF_MEMORY:
                step.exit_code, step.exit_signal = 0, 125  # ExitCode 0:125, as Slurm prints it
            step.usage = usage
            steps.append((step, "end"))
            if not self.active.get(job.job_id):
                self.active.pop(job.job_id, None)
        actions: list[Action] = []
        jobs: list[tuple[Job, EventKind, dict[str, Any]]] = []
        if end_job:
            actions, jobs, more = self._end_allocation(job, exit_code, signal, cancelled, now, oom=bool(oom_kills))
            steps.extend(more)
        if steps or jobs:
            self._commit(now, steps, jobs)
            self.notify()
        return actions

    def signal_step(self, job: Job, who: Identity, step_id: int, sig: int | None) -> list[Action]:
        """``scancel N.S`` (``sig`` None: cancel the step) and ``scancel --signal=X N.S``."""
        self.check_owner(job, who)
        step = self.active.get(job.job_id, {}).get(step_id)
        if step is None:
            raise InvalidRequest("Job step not found" if job.state is JobState.RUNNING else ENDED_JOB)
        if sig is None:
            self.cancelled.add((job.job_id, step_id))
        action = StepSignal(
            job.job_id, step.attempt, step_id, list(step.layout.nodes), 15 if sig is None else sig, sig is None
        )
        return [action]

    def gone(self, job_id: int, attempt: int, step_id: int, node: str, exit_code: int, signal: int) -> None:
        """An agent says a step's tasks there ended after its srun went away: srun will not
        report the step, so it ends here (CANCELLED) and frees what it held."""
        step = self.active.get(job_id, {}).get(step_id)
        if step is None or step.attempt != attempt or node not in step.layout.nodes:
            return
        log.info("step %s: srun went away (told by %s); ending the step", step.id_text, node)
        now = self.clock.now()
        del self.active[job_id][step_id]
        if not self.active[job_id]:
            del self.active[job_id]
        step.state = StepState.CANCELLED
        step.end_time = now
        step.exit_code = exit_code
        step.exit_signal = signal
        self._commit(now, [(step, "end")])
        self.notify()

    def complete_allocation(
        self, job: Job, who: Identity, exit_code: int, signal: int, cancelled: bool = False
    ) -> list[Action]:
        """salloc (or srun) releases its allocation: the job ends with the command's code."""
        self.check_owner(job, who)
        now = self.clock.now()
        actions, jobs, steps = self._end_allocation(job, exit_code, signal, cancelled, now)
        if jobs or steps:
            self._commit(now, steps, jobs)
            self.notify()
        return actions

    def _end_allocation(
        self, job: Job, exit_code: int, signal: int, cancelled: bool, now: float, oom: bool = False
    ) -> tuple[list[Action], list[tuple[Job, EventKind, dict[str, Any]]], list[tuple[Step, str]]]:
        if not job.spec.interactive:
            raise InvalidRequest(f"job {job.job_id} is a batch job: it ends with its script")
        if job.state is not JobState.RUNNING:
            return [], [], []  # already ended (cancelled, timed out): nothing to change
        attempt = job.restart_count
        if cancelled:
            lifecycle.end(job, JobEvent.CANCEL, now, completing=False)
            lifecycle.cleaned(job, exit_code, signal)
        elif oom:  # its step's tasks were OOM killed: the allocation is OUT_OF_MEMORY, 0:125
            lifecycle.end(job, JobEvent.OUT_OF_MEMORY, now, completing=False)
            lifecycle.cleaned(job, 0, 125)
        else:
            lifecycle.finish(job, exit_code, signal, now)
        self.ctl.release_resources(job, attempt)
        self.interactive.discard(job.job_id)
        steps = self._end_steps(job.job_id, StepState.CANCELLED, now)
        jobs = [(job, ended_kind(job.state), {"exit_code": exit_code, "signal": signal, "by": "srun"})]
        # Whatever tasks are left (a step srun did not wait for) go with the allocation.
        return [Terminate(job.job_id, attempt, list(job.nodes), "cleanup")], jobs, steps

    def _end_steps(self, job_id: int, state: str, end: float) -> list[tuple[Step, str]]:
        out = []
        for step in self.active.pop(job_id, {}).values():
            step.state = state
            step.end_time = end
            if state == StepState.CANCELLED and not (step.exit_code or step.exit_signal):
                step.exit_signal = 15  # its tasks were stopped with the job (SIGTERM), as Slurm's sacct says
            out.append((step, "end"))
        return out

    def sweep(self) -> list[Action]:
        """End the steps of jobs that ended; time out interactive allocations. Runs every
        second (and costs nothing when no step runs)."""
        now = self.clock.now()
        steps: list[tuple[Step, str]] = []
        jobs: list[tuple[Job, EventKind, dict[str, Any]]] = []
        actions: list[Action] = []
        for job_id in list(self.active):
            job = self.ctl.jobs.get(job_id)
            attempts = {s.attempt for s in self.active[job_id].values()}
            if job is not None and job.state is JobState.RUNNING and attempts == {job.restart_count}:
                continue
            state = StepState.CANCELLED
            if job is not None and job.state is JobState.NODE_FAIL:
                state = StepState.NODE_FAIL
            end = job.end_time if job is not None and job.end_time is not None else now
            if job is not None and job.state is JobState.RUNNING:
                # Steps of an earlier attempt (requeued while the controller was away).
                stale = {k: s for k, s in self.active[job_id].items() if s.attempt != job.restart_count}
                for k, s in stale.items():
                    s.state, s.end_time = state, now
                    steps.append((s, "end"))
                    del self.active[job_id][k]
                continue
            steps.extend(self._end_steps(job_id, state, end))
        for job_id in list(self.interactive):
            job = self.ctl.jobs.get(job_id)
            if job is None or job.state.is_terminal:
                self.interactive.discard(job_id)
                continue
            if job.suspended_at is not None:
                continue  # scontrol suspend: its time does not run meanwhile
            expected = job.expected_end()
            if job.state is JobState.RUNNING and expected is not None and now < expected:
                actions.extend(self._warn(job, expected, now))
            if job.state is JobState.RUNNING and expected is not None and now >= expected:
                attempt = job.restart_count
                log.info("job %s: time limit reached (interactive allocation)", job_id)
                lifecycle.end(job, JobEvent.TIMEOUT, now, completing=True)
                self.interactive.discard(job_id)
                jobs.append((job, EventKind.TIMEOUT, {"by": "controller"}))
                steps.extend(self._end_steps(job_id, StepState.CANCELLED, now))
                actions.append(Terminate(job_id, attempt, list(job.nodes), "timeout"))
        if steps or jobs:
            self._commit(now, steps, jobs)
            self.notify()
        return actions

    def _warn(self, job: Job, expected: float, now: float) -> list[Action]:
        """``--signal=SIG@T`` of an srun or salloc allocation: T seconds before its limit,
        SIG to the tasks of its running steps (a batch job's agent does this itself)."""
        key = (job.job_id, job.restart_count)
        if key in self._warned or not job.spec.signal:
            return []
        try:
            warn = parse_signal_spec(job.spec.signal)
        except ValueError:
            return []
        if warn is None or now < expected - warn.seconds:
            return []
        self._warned = {k for k in self._warned if k[0] in self.interactive}
        self._warned.add(key)
        log.info("job %s: sending signal %s before its time limit", job.job_id, warn.signal)
        return [
            StepSignal(job.job_id, s.attempt, s.step_id, list(s.layout.nodes), warn.signal, False)
            for s in self.steps_of(job.job_id)
            if s.attempt == job.restart_count
        ]

    # --- what commands list -------------------------------------------------------------

    def listing(self, jobs: list[Job]) -> list[dict[str, Any]]:
        """Running steps of these jobs, the batch step first, as ``step_wire`` dicts."""
        now = self.clock.now()
        out = []
        for job in sorted(jobs, key=lambda j: j.job_id):
            mine = []
            batch = self.batch_step(job)
            if batch is not None:
                mine.append(step_wire(batch, now))
            for step in self.steps_of(job.job_id):
                mine.append(step_wire(step, now))
            if job.suspended_at is not None:  # a suspended job's steps are, as Slurm shows them
                for s in mine:
                    if s["state"] == "RUNNING":
                        s["state"] = "SUSPENDED"
            out.extend(mine)
        return out


def parse_step_id(text: str) -> tuple[int, int | None]:
    """``12`` or ``12.3`` or ``12.batch`` as (job id, step id or None)."""
    job_text, dot, step_text = text.strip().partition(".")
    try:
        job_id = int(job_text)
        if not dot:
            return job_id, None
        return job_id, BATCH_STEP if step_text == "batch" else int(step_text)
    except ValueError:
        raise InvalidRequest(f"Invalid job step id: {text}") from None


__all__ += ["format_step_id", "parse_step_id"]
