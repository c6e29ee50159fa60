"""Job steps on this node: start the tasks srun asks for, stream their output back, signal
and stop them, and take them back after a restart of the agent.

srun reaches the agent through ``agent.stepapi`` (its HTTP face), authorized by the grant
the controller signed for the step; the runner checks the request, plans the tasks
(``agent.stepplan``) and keeps each running step as a ``localstep.Step`` whose life is one
run state (``agent.runstate``: LAUNCHING, RUNNING, TERMINATING, ENDED, REPORTED).

Each step has a supervisor process (``agent.stepd``, slurmstepd's role), forked here with
the tasks' pipes (or terminal) and recipes: it forks each task, which becomes the user's
process through ``agent.spawn`` (the one become-the-user sequence, shared with batch
scripts) with the task's choices: stdio from the pipes, files opened as the user, srun's
terminal (``--pty``) or nothing; ``/tmp`` when the working directory cannot be entered, as
Slurm does, with a warning; CPU pinning when the task is bound (``--cpu-bind``, or
``TaskPlugin=task/affinity``: see ``agent.affinity``); ``execvpe`` of the command with the
task's ``PATH``. A failure is said on a close-on-exec pipe; the child exits with the errno
(Slurm's ``slurmstepd: error: execve(): cmd: No such file or directory``, code 2).

The supervisor writes the tasks' output and ends into the step's log
(``<state>/steps/<job>.<attempt>.<step>.log``) and rings a FIFO; the agent reads the log
(``_scan``: the tasks' pids, their ends) and streams it to srun from wherever srun says it
is (``agent.stepapi``). A task's ``x`` frame follows all of its output. The agent keeps the
tasks' stdin and signals their processes itself; the node's own words (the CANCELLED line)
go into the log through the supervisor's control FIFO.

SIGTERM to the agent does not stop steps: their streams end without their ``d`` frame, srun
reconnects to the next agent (``/v1/steps/attach``), which took the step back from its
record and its log (``recover``) and sends what srun has not had. If srun's connection drops
while the agent runs, or srun does not come back to a restarted agent within SlurmdTimeout,
the step is stopped (nobody would see its output or its end); once its tasks are gone the
agent tells the controller (``/v1/agent/step_gone``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import signal
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from muster.agent import containers, monitor, proctree, spawn, stepd, stepplan
from muster.agent.affinity import CpuLedger
from muster.agent.containers import ContainerError, Containers
from muster.agent.env import EnvContext
from muster.agent.hooks import Hooks
from muster.agent.localstep import (
    REASON_WORDS,
    Step,
    Task,
    close_quietly,
    kill_quietly,
    record_key,
    step_from_record,
    step_members,
    step_record,
)
from muster.agent.ocibundle import ContainerRequest
from muster.agent.progress import progress_env
from muster.agent.runstate import RunEvent, RunState
from muster.agent.state import StateDir
from muster.agent.stepplan import StepLaunchError, TaskPlan
from muster.core.clock import Clock
from muster.core.cpubind import CpuBindError, parse_cpu_bind
from muster.core.timefmt import format_timestamp
from muster.protocol.replay import GrantLedger, ReplayGuard, SignatureError
from muster.protocol.stepcred import GRANT_TTL, GrantError, attach_token, verify_grant
from muster.protocol.stream import frame, json_frame

__all__ = ["StepRunner"]

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # bytes of the log read at once for srun


class StepRunner:
    def __init__(
        self,
        node: str,
        key: bytes,
        clock: Clock,
        env_ctx: EnvContext,
        kill_wait: float,
        proc_reader: Callable[[], Mapping[int, proctree.ProcInfo]] = proctree.read_proc,
        cpus: CpuLedger | None = None,
        bind_default: str = "none",
        state: StateDir | None = None,
        hooks: Hooks | None = None,
        reattach_wait: float = 300.0,
    ) -> None:
        self.node = node
        self.hooks = hooks  # the site's Prolog runs before a job's first step here
        # Where running steps are noted, with their logs, so that a restarted agent takes
        # them back (see ``recover``); a private directory when none is given.
        if state is None:
            state = StateDir(tempfile.mkdtemp(prefix="musterd-steps-"))
            state.create()
        self.state: StateDir | None = state
        # How long a taken-back step waits for its srun to reconnect (SlurmdTimeout)
        self.reattach_wait = reattach_wait
        self.closing = False  # the agent stops: streams end, steps go on
        self.closed = asyncio.Event()  # set with ``closing``, for those who wait on it
        # The host's CPUs as the jobs here hold them; tasks are pinned with --cpu-bind, or
        # by default when bind_default is "task" (TaskPlugin=task/affinity).
        self.cpus = cpus if cpus is not None else CpuLedger()
        self.bind_default = bind_default
        self.key = key
        self.clock = clock
        self.env_ctx = env_ctx
        self.kill_wait = kill_wait
        self.proc_reader = proc_reader
        self.steps: dict[tuple[int, int], Step] = {}
        self._launched: dict[tuple[int, int, int], float] = {}
        # Set by the app: the agent's replay guard. A grant issued before the agent's
        # replay floor may have been launched by a previous agent here: refused.
        self.replay: ReplayGuard | None = None
        # Set by the app: the grants launched here, on disk until they expire. With it, a
        # grant is refused when already used rather than when issued before the floor, so
        # a new step's grant signed just before this agent restarted is honoured.
        self.grants: GrantLedger | None = None
        # Set by the daemon: a signed POST to the controller (path, body). Used to say that
        # a step whose srun went away has ended here, so its resources are freed.
        self.report: Callable[[str, dict[str, Any]], Awaitable[Any]] | None = None
        self._reports: set[asyncio.Task[None]] = set()
        # Set by the daemon under cgroup confinement (``Supervisor.confine_step``): the
        # cgroup.procs files of (grant, step id, local task id); the task joins them before exec.
        self.confine: Callable[[Mapping[str, Any], int, int], tuple[str, ...]] | None = None
        # Set by the daemon with JobContainerType=job_container/tmpfs (``JobContainer.prepare``):
        # a job id -> the binds of its private /tmp.
        self.private_dirs: Callable[[int], tuple[tuple[str, str], ...]] | None = None
        # Set by the daemon when oci.conf is beside the config (``agent.containers``); the
        # fault it reports when a container cannot run here (the controller drains the node).
        self.containers: Containers | None = None
        self.on_fault: Callable[[dict[str, Any]], None] | None = None

    # --- what a previous agent left ------------------------------------------------------

    def _note(self, step: Step) -> None:
        if self.state is None or step.state is RunState.REPORTED or step.log_fd < 0:
            return
        try:
            self.state.save_step(record_key(step), step_record(step))
            step.noted = True
        except OSError as e:
            log.warning("step %s: cannot note its tasks on disk: %s", step.id_text, e)

    def recover(self) -> int:
        """Take back the steps a previous agent ran here. Returns how many were found.

        A step run by a supervisor (``agent.stepd``) goes on: its log is read from the
        start (the tasks' pids, the ends written while no agent ran), and it waits for its
        srun to reconnect (``attach``) for ``reattach_wait`` seconds (SlurmdTimeout: an
        agent away longer finds its node DOWN anyway); a step whose srun does not come back
        is stopped, and its end reported to the controller, as if srun had gone away. A step
        whose supervisor is gone has lost its tasks: their ends are written as killed.

        A step an older agent ran without a supervisor cannot be taken back: its tasks'
        output pipes died with that agent. Their sessions, groups and descendants are
        killed (a task whose pid now belongs to another process is left alone) and the step
        is reported gone, killed by SIGKILL."""
        if self.state is None:
            return 0
        records = self.state.steps()
        procs = self.proc_reader() if records else {}
        for key, rec in records:
            try:
                step, tasks = step_from_record(rec, self.node)
            except (KeyError, TypeError, ValueError):
                log.error("ignoring a malformed step record %s: %r", key, rec)
                self.state.drop_step(key)
                continue
            step.tasks = tasks
            if rec.get("stepd"):
                self._take_back(step)
                continue
            for t in tasks:
                holder = procs.get(t.pid)
                alive = holder is not None and holder.start_ticks == t.start_ticks
                t.status = None if alive else (0, signal.SIGKILL)
            doomed = step_members(procs, tasks, exclude=os.getpid())
            for t in tasks:
                t.status = (0, signal.SIGKILL)
            for pid in doomed:
                kill_quietly(pid, signal.SIGKILL)
            log.warning(
                "step %s: left by an agent without step supervisors; %d process(es) killed", step.id_text, len(doomed)
            )
            self.state.drop_step(key)
            self._report_gone(step)
        return len(records)

    def _take_back(self, step: Step) -> None:
        base = self._base(step)
        try:
            step.log_fd = os.open(base + ".log", os.O_RDONLY)
            step.bell_fd = os.open(base + ".bell", os.O_RDWR | os.O_NONBLOCK)
            step.ctl_fd = os.open(base + ".ctl", os.O_RDWR | os.O_NONBLOCK)
        except OSError as e:
            log.error("step %s: its files are gone (%s); reporting it lost", step.id_text, e)
            self._forget(step)
            for t in step.tasks:
                t.status = (0, signal.SIGKILL)
            self._report_gone(step)
            return
        step.noted = True
        self.steps[step.key] = step
        self._scan(step)  # the pids, and the ends written meanwhile
        if not step.finished:
            self._watch(step)  # a supervisor found gone ends the tasks it left unsaid
        log.info(
            "step %s: taken back on %s (%s); waiting %.0fs for its srun",
            step.id_text,
            self.node,
            step.state,
            self.reattach_wait,
        )
        if not step.finished:
            if step.terminated is not None:  # it was being stopped: KILL after its grace
                loop = asyncio.get_running_loop()
                step.kill_handle = loop.call_later(step.kill_wait, self._kill_now, step)
            if step.limit_at is not None:
                delay = max(0.0, step.limit_at - self.clock.now())
                step.limit_handle = asyncio.get_running_loop().call_later(delay, self.stop, step, "timeout", None)
        if step.orphaned:  # its srun had gone before the restart
            if step.finished:
                self._hand_over(step)
            return
        step.claim_handle = asyncio.get_running_loop().call_later(self.reattach_wait, self._unclaimed, step)

    def _unclaimed(self, step: Step) -> None:
        """No srun came back for a taken-back step (or one whose relay went): as if it had
        gone away."""
        step.claim_handle = None
        if step.attached or self.steps.get(step.key) is not step:
            return
        log.info("step %s: its srun did not come back", step.id_text)
        step.orphaned = True
        if step.finished:
            self._hand_over(step)
        else:
            self._note(step)
            self.stop(step, "srun", None)

    # --- queries ----------------------------------------------------------------------

    def running_jobs(self) -> list[int]:
        return sorted({s.job_id for s in self.steps.values()})

    def job_members(self, job_id: int) -> dict[int, set[int]]:
        """The living processes of the job's steps here, by attempt (hang evidence)."""
        out: dict[int, set[int]] = {}
        for step in list(self.steps.values()):
            if step.job_id == job_id and not step.finished:
                out.setdefault(step.attempt, set()).update(self._members(step))
        return out

    # --- control from the controller ----------------------------------------------------

    def suspend(self, job_id: int, on: bool) -> None:
        """``scontrol suspend`` (``on``) or ``resume`` of the job: the own time limits
        (``srun -t``) of its steps here stop running while it is suspended, as the job's
        does; what was left is noted, and runs again from the resume."""
        now = self.clock.now()
        for step in list(self.steps.values()):
            if step.job_id != job_id or step.finished:
                continue
            if on and step.limit_at is not None:
                step.limit_left, step.limit_at = max(0.0, step.limit_at - now), None
                if step.limit_handle is not None:
                    step.limit_handle.cancel()
                    step.limit_handle = None
            elif not on and step.limit_left is not None:
                step.limit_at, step.limit_left = now + step.limit_left, None
                loop = asyncio.get_running_loop()
                step.limit_handle = loop.call_later(step.limit_at - now, self.stop, step, "timeout", None)
            else:
                continue
            self._note(step)

    def signal(self, job_id: int, sig: int) -> bool:
        """``scancel --signal``: signal the tasks of the job's steps here. For a batch job
        the batch script's supervisor signals the script's processes, srun among them, and
        srun forwards the signal to its tasks on every node; signalling them here as well
        would deliver it twice. So only the steps of an interactive allocation (srun's or
        salloc's, where no batch script runs) are signalled from here."""
        found = False
        for step in list(self.steps.values()):
            if step.job_id == job_id and step.interactive:
                found = True
                self.signal_tasks(step, sig)
        return found

    def signal_step(self, job_id: int, attempt: int, step_id: int, sig: int, kill: bool) -> bool:
        """The controller's ``scancel N.S``: stop the step here (``kill``) or signal it."""
        step = self.steps.get((job_id, step_id))
        if step is None or step.attempt != attempt:
            return False
        if kill:
            self.stop(step, "cancel", None)
        else:
            self.signal_tasks(step, sig)
        return True

    def terminate(self, job_id: int, reason: str, kill_wait: float | None = None, attempt: int | None = None) -> bool:
        """The job ends: stop its steps here (TERM now, KILL after ``kill_wait``); only those
        of ``attempt`` when it is given (a requeued job's next run is not this one)."""
        found = False
        for step in list(self.steps.values()):
            if step.job_id == job_id and (attempt is None or step.attempt == attempt):
                found = True
                self.stop(step, reason, kill_wait)
        return found

    async def hold_all_when(self, stopping: Callable[[], bool]) -> None:
        """When the agent is being stopped, end the streams to srun (without their ``d``
        frame: srun reconnects to the next agent) so that the HTTP server can close them.
        The steps go on under their supervisors; the next agent takes them back."""
        while not stopping():
            await asyncio.sleep(0.5)  # cheap: dozens of nodes may share a process (agent.host)
        self.closing = True
        self.closed.set()
        for step in list(self.steps.values()):
            log.info("step %s: musterd is stopping; the step goes on under its supervisor", step.id_text)
            step.wake()

    # --- launching (srun's requests arrive through ``agent.stepapi``) ----------------------

    async def launch(self, body: dict[str, Any]) -> Step:
        """Check the request and its grant, run the Prolog if this is the job's first launch
        here, have the step's supervisor fork every task; the step is then registered and
        its record noted on disk. Raises ``StepLaunchError``."""
        step, plans = self._prepare(body)
        if body.get("container"):
            try:
                await self._containerize(body, step, plans)
            except StepLaunchError:
                self._forget(step)  # its CPUs back
                raise
        if self.hooks is not None:  # the first of this job's launches here runs the Prolog
            prolog = await self.hooks.ensure_prolog(step.job)
            if not prolog.ok:
                raise StepLaunchError(f"{prolog.reason} on {self.node}", 500, "launch_failed")
        self.steps[step.key] = step
        try:
            await self._start(step, plans)
        except BaseException:
            self._forget(step)
            raise
        if step.time_limit and not step.finished:
            step.limit_at = self.clock.now() + step.time_limit
            step.limit_handle = asyncio.get_running_loop().call_later(step.time_limit, self.stop, step, "timeout", None)
        self._note(step)
        return step

    def attach(self, job_id: int, step_id: int, token: str) -> Step | None:
        """srun's stream to a running (or ended, not yet handed over) step: the launch's,
        or srun's again after this agent restarted or its stream broke."""
        if self.closing:  # srun tries again, and finds the next agent
            raise StepLaunchError(f"musterd on {self.node} is stopping", 503, "unavailable")
        step = self.steps.get((job_id, step_id))
        if step is None or not secrets.compare_digest(step.token, token):
            return None
        step.attached += 1
        if step.claim_handle is not None:
            step.claim_handle.cancel()
            step.claim_handle = None
        return step

    def detach(self, step: Step, delivered: bool, grace: float = 0.0) -> None:
        """An srun stream has ended; ``delivered``: with the step's end. A step handed over
        is forgotten; while the agent stops, the step goes on (the next agent takes it
        back); one whose srun went away is stopped (nobody would see its output or its
        end) and reported once its tasks end. With ``grace`` (a stream through a relay of
        the launch tree, whose agent may be restarting) srun has that long to come back
        directly (``attach``) before the step is taken for abandoned."""
        step.attached = max(0, step.attached - 1)
        if self.closing or step.attached or self.steps.get(step.key) is not step:
            return
        if grace > 0 and not delivered and step.claim_handle is None:
            loop = asyncio.get_running_loop()
            step.claim_handle = loop.call_later(grace, self._unclaimed, step)
            return
        if step.finished:
            if delivered:
                self._done(step)
            else:
                self._hand_over(step)
        else:
            log.info("step %s: srun went away; stopping the step", step.id_text)
            step.orphaned = True
            self._note(step)
            self.stop(step, "srun", None)

    def _prepare(self, body: dict[str, Any]) -> tuple[Step, list[TaskPlan]]:
        try:
            grant = verify_grant(self.key, str(body.get("grant") or ""), str(body.get("sig") or ""), self.clock.now())
            if self.replay is not None and self.grants is None:
                self.replay.admit(float(grant["issued"]))
        except GrantError as e:
            raise StepLaunchError(str(e), 403, "auth") from None
        except SignatureError as e:
            log.warning("refused a step credential at %s: %s", self.node, e)
            raise StepLaunchError(f"step credential refused: {e}", 403, "auth") from None
        try:
            job_id, attempt = int(grant["job_id"]), int(grant["attempt"])
            step_id, uid, gid = int(grant["step_id"]), int(grant["uid"]), int(grant["gid"])
            layout = grant["step"]
            nodes = list(layout["nodes"])
        except (KeyError, TypeError, ValueError):
            raise StepLaunchError("malformed step credential") from None
        if self.node not in nodes:
            raise StepLaunchError(f"step {job_id}.{step_id} has no tasks on {self.node}", 403, "auth")
        self._prune_launched()
        if (job_id, attempt, step_id) in self._launched:
            raise StepLaunchError(f"step {job_id}.{step_id} was already launched on {self.node}", 409, "conflict")
        if self.grants is not None:  # once ever on this node, across restarts (protocol.replay)
            try:
                self.grants.admit(
                    (job_id, attempt, step_id), float(grant["issued"]), float(grant["expires"]), self.clock.now()
                )
            except SignatureError as e:
                log.warning("refused a step credential at %s: %s", self.node, e)
                raise StepLaunchError(f"step credential refused: {e}", 403, "auth") from None
        me = os.geteuid()
        if me != 0 and uid != me:
            raise StepLaunchError(
                f"musterd runs as uid {me} and cannot start tasks of uid {uid} (run it as root)", 500, "launch_failed"
            )
        groups = stepplan.task_groups(uid, gid) if me == 0 else None
        argv = [str(a) for a in body.get("argv") or []]
        if not argv:
            raise StepLaunchError("no command to run")
        task_argv = body.get("task_argv") or {}  # srun --multi-prog: a command line per task
        if not isinstance(task_argv, dict):
            raise StepLaunchError("malformed task_argv")
        env = {str(k): str(v) for k, v in (body.get("env") or {}).items()}
        cwd = str(body.get("cwd") or "/")
        umask = spawn.parse_umask(body.get("umask"))
        try:
            bind = parse_cpu_bind(body.get("cpu_bind"))
        except CpuBindError as e:
            raise StepLaunchError(str(e)) from None
        job = grant.get("job") or {}
        step = Step(
            job_id,
            attempt,
            step_id,
            uid,
            self.node,
            attach_token(str(body.get("sig") or "")),
            float(body.get("kill_wait") or self.kill_wait),
            bool(job.get("interactive")),
        )
        step.job = {
            "job_id": job_id,
            "restart_count": attempt,
            "uid": uid,
            "gid": gid,
            "user": str(grant.get("user") or ""),
            "partition": str(job.get("partition") or ""),
            "spec": {"name": str(job.get("name") or ""), "workdir": cwd},
            "alloc": [{"node": n} for n in nodes],
            "gpus": containers.step_gpus(layout, self.node),  # the step's GPUs here
        }
        if self.state is not None:  # MUSTER_PROGRESS: this node's file for the job attempt
            env = {**env, **progress_env(self.state.root, step.job)}
        plans = stepplan.task_plans(
            body,
            grant,
            self.node,
            argv=argv,
            task_argv=task_argv,
            env=env,
            cwd=cwd,
            uid=uid,
            gid=gid,
            groups=groups,
            umask=umask,
            ctx=self.env_ctx,
        )
        # TaskProlog, then srun --task-prolog: each task runs them before its command; srun's
        # --task-epilog, then TaskEpilog, once it has ended
        for key in ("task_prolog", "task_epilog"):
            if body.get(key) is not None and not (isinstance(body[key], str) and os.path.isabs(body[key])):
                raise StepLaunchError(f"{key} must be an absolute path")
        prologs = [getattr(self.hooks, "task_prolog", None), body.get("task_prolog")]
        epilogs = [body.get("task_epilog"), getattr(self.hooks, "task_epilog", None)]
        for plan in plans:
            plan.task_prologs = tuple(str(p) for p in prologs if p)
            plan.task_epilogs = tuple(str(p) for p in epilogs if p)
        if self.confine is not None:
            try:
                for plan in plans:
                    plan.cgroup_procs = self.confine(grant, step_id, plan.local)
            except OSError as e:
                raise StepLaunchError(
                    f"cannot set up the step's cgroup on {self.node}: {e}", 500, "launch_failed"
                ) from None
        if self.private_dirs is not None:  # JobContainerType=job_container/tmpfs
            try:
                binds = self.private_dirs(job_id)
            except OSError as e:
                raise StepLaunchError(
                    f"cannot make the job's private directories on {self.node}: {e}", 500, "launch_failed"
                ) from None
            for plan in plans:
                plan.private_dirs = binds
        step.tasks = [Task(plan.task, plan.local) for plan in plans]
        step.pinned = stepplan.pin_tasks(self.cpus, step, plans, grant, bind, self.bind_default, self.node)
        limit = layout.get("time_limit")
        step.time_limit = float(limit) if limit else None
        self._launched[(job_id, attempt, step_id)] = self.clock.monotonic()
        return step, plans

    async def _containerize(self, body: dict[str, Any], step: Step, plans: list[TaskPlan]) -> None:
        """Each task in its container (srun's ``--container-*``): its bundle written, its
        command line the runtime's. Unpacking an image takes a while: done off the loop."""
        try:
            request = containers.request_of(body)
        except ContainerError as e:
            raise StepLaunchError(str(e)) from None
        if request is None:
            return
        if self.containers is None:
            raise StepLaunchError(f"containers are not configured on {self.node} (no oci.conf)")
        gpus = [int(g) for g in step.job.get("gpus") or []]
        try:
            await asyncio.to_thread(self._wrap, request, step, plans, gpus)
        except containers.NodeFault as e:
            log.error("node %s cannot run containers: %s", self.node, e)
            if self.on_fault is not None:
                self.on_fault({"kind": "container", "reason": str(e)})
            raise StepLaunchError(f"{e} on {self.node}", 500, "launch_failed") from None
        except ContainerError as e:
            raise StepLaunchError(str(e)) from None
        except OSError as e:
            raise StepLaunchError(
                f"cannot prepare the container on {self.node}: {e.strerror or e}", 500, "launch_failed"
            ) from None

    def _wrap(self, request: ContainerRequest, step: Step, plans: list[TaskPlan], gpus: list[int]) -> None:
        assert self.containers is not None
        for plan in plans:
            who = containers.identity(plan.uid, plan.gid, plan.groups, plan.umask)
            plan.argv = self.containers.prepare(
                request,
                job_id=step.job_id,
                step_id=step.step_id,
                task=plan.task,
                argv=plan.argv,
                env=plan.env,
                host_cwd=plan.cwd,
                who=who,
                gpus=gpus,
                user=str(step.job.get("user") or plan.uid),
            )
            plan.env = {"PATH": os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin"}
            plan.cwd = "/"
            plan.container, plan.hide = True, self.containers.masks

    def _prune_launched(self) -> None:
        cutoff = self.clock.monotonic() - 2 * GRANT_TTL
        for k, when in list(self._launched.items()):
            if when < cutoff:
                del self._launched[k]

    # --- starting: the step's supervisor forks its tasks (``agent.stepd``) -------------------

    def _base(self, step: Step) -> str:
        assert self.state is not None
        return os.path.join(self.state.steps_dir, record_key(step))

    async def _start(self, step: Step, plans: list[TaskPlan]) -> None:
        """Make each task's pipes (or terminal) and recipe, fork the step's supervisor with
        them, and wait until it says the tasks' pids. The agent keeps the tasks' stdin and
        reads their output from the step's log."""
        base = self._base(step)
        for suffix in (".bell", ".ctl"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + suffix)
            os.mkfifo(base + suffix, 0o600)
        log_w = os.open(base + ".log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o600)
        step.log_fd = os.open(base + ".log", os.O_RDONLY)
        step.bell_fd = os.open(base + ".bell", os.O_RDWR | os.O_NONBLOCK)
        step.ctl_fd = os.open(base + ".ctl", os.O_RDWR | os.O_NONBLOCK)
        starts: list[stepd.TaskStart] = []
        try:
            for plan, task in zip(plans, step.tasks, strict=True):
                starts.append(self._task_start(plan, task))
            monitor.prctl()  # looked up before the fork, never in the supervisor
            pid = os.fork()
            if pid == 0:  # the supervisor: never returns
                stepd.run(
                    self.node, stepd.StepFiles(log_w, step.bell_fd, step.ctl_fd), starts, stepplan.shares_files(plans)
                )
        finally:
            os.close(log_w)
            for start in starts:  # the supervisor's and the tasks' ends
                for fd in (*start.err, *start.outputs, *start.child_fds):
                    close_quietly(fd)
        step.stepd_pid = pid
        step.stepd_ticks = proctree.process_start_ticks(pid)
        self._note(step)  # from now on a restarted agent takes the step back
        self._watch(step)
        while not step.started:
            if step.stepd_gone:
                raise StepLaunchError(f"the step's supervisor on {self.node} died", 500, "launch_failed")
            await step.changed()
        self._settle(step)
        log.info("step %s: started tasks %s on %s", step.id_text, [t.task for t in step.tasks], self.node)

    def _task_start(self, plan: TaskPlan, task: Task) -> stepd.TaskStart:
        pipes: dict[int, tuple[int, int]] = {}
        terminal: tuple[int, int] | None = None
        if plan.stdin.mode == "pty":
            try:
                terminal = stepplan.open_terminal(plan)
            except OSError as e:
                raise StepLaunchError(
                    f"cannot open a terminal on {self.node}: {e.strerror}", 500, "launch_failed"
                ) from None
        if plan.stdin.mode == "pipe":
            pipes[0] = os.pipe()
        if plan.stdout.mode == "pipe":
            pipes[1] = os.pipe()
        if plan.stderr.mode == "pipe":
            pipes[2] = os.pipe()
        err = os.pipe()
        spec = stepplan.child_spec(plan, pipes, terminal, close_first=(err[0],))
        outputs: dict[int, bytes] = {}
        child: list[int] = []
        if terminal is not None:  # its output is read at the master, its input written there
            master, slave = terminal
            outputs[master] = b"o"
            child.append(slave)
            task.stdin_fd, task.pty = os.dup(master), True
        for fd, (r, w) in pipes.items():
            if fd == 0:
                child.append(r)
                task.stdin_fd = w
            else:
                outputs[r] = b"o" if fd == 1 else b"e"
                child.append(w)
        # the child closes its own ends once they are its stdio (the others are not in the
        # supervisor, which holds no stdin write end: the tasks' input ends with the agent's)
        spec = dataclasses.replace(spec, close_after=tuple(child))
        return stepd.TaskStart(plan.task, spec, err, outputs, tuple(child))

    # --- watching: the step's log and its supervisor ----------------------------------------

    def _watch(self, step: Step) -> None:
        """Read the log whenever its bell rings; learn the supervisor's end from a pidfd
        (polled where there is none)."""
        loop = asyncio.get_running_loop()
        loop.add_reader(step.bell_fd, self._scan, step)
        try:
            step.pidfd = os.pidfd_open(step.stepd_pid) if step.stepd_pid > 0 else -1
        except ProcessLookupError:
            self._stepd_exited(step)
            return
        except (AttributeError, OSError):
            step.pidfd = -1
        if step.pidfd >= 0 and step.stepd_ticks is not None:
            if proctree.process_start_ticks(step.stepd_pid) != step.stepd_ticks:  # another's pid now
                self._stepd_exited(step)
                return
        if step.pidfd >= 0:
            loop.add_reader(step.pidfd, self._stepd_exited, step)
        else:
            loop.create_task(self._poll_stepd(step))

    async def _poll_stepd(self, step: Step) -> None:
        while not step.stepd_gone:
            await asyncio.sleep(0.5)
            if proctree.process_start_ticks(step.stepd_pid) is None:
                self._stepd_exited(step)

    def _stepd_exited(self, step: Step) -> None:
        if step.stepd_gone:
            return
        step.stepd_gone = True
        if step.pidfd >= 0:
            asyncio.get_running_loop().remove_reader(step.pidfd)
            close_quietly(step.pidfd)
            step.pidfd = -1
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(step.stepd_pid, os.WNOHANG)  # ours unless a previous agent forked it
        self._scan(step)
        if not step.finished:
            # It died before its tasks' ends were written (killed with SIGKILL, OOM): the
            # tasks are lost with it. Their ends are written here, once, in its stead.
            log.error("step %s: its supervisor on %s died; its tasks are lost", step.id_text, self.node)
            if not step.started:  # before it said the pids: nothing of theirs can be found
                step.started = True
            missing = [t for t in step.tasks if t.status is None]
            for pid in self._members(step):
                kill_quietly(pid, signal.SIGKILL)
            lost = f"slurmstepd-{self.node}: error: the step's supervisor died\n".encode()
            frames = frame(b"e", -1, lost) + b"".join(
                json_frame(b"x", t.task, {"code": 0, "signal": signal.SIGKILL}) for t in missing
            )
            self._append_log(step, frames)
            self._scan(step)
        step.wake()

    def _append_log(self, step: Step, data: bytes) -> None:
        """Write to the log of a step whose supervisor is gone (the log's one writer then)."""
        try:
            fd = os.open(self._base(step) + ".log", os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as e:
            log.error("step %s: cannot write its log: %s", step.id_text, e)

    def _scan(self, step: Step) -> None:
        """Read what the log gained: the tasks' pids (``p``) and ends (``x``); wake the
        streams to srun."""
        if step.bell_fd >= 0:
            with contextlib.suppress(OSError):
                while os.read(step.bell_fd, 65536):
                    pass
        while step.log_fd >= 0:
            try:
                data = os.pread(step.log_fd, 1 << 20, step.scan_pos)
                frames, used = stepd.frames_in(data)
            except (OSError, ValueError) as e:
                log.error("step %s: its log cannot be read: %s", step.id_text, e)
                break
            for kind, task, payload in frames:
                if kind == b"p":
                    self._pids(step, payload)
                elif kind == b"x":
                    self._task_ended(step, task, payload)
            step.scan_pos += used
            if used == 0 or len(data) < 1 << 20:
                break
        if step.started and not step.finished and all(t.status is not None for t in step.tasks):
            self._ended(step)
        step.wake()

    def _pids(self, step: Step, payload: bytes) -> None:
        info = json.loads(payload)
        by_task = {t.task: t for t in step.tasks}
        for task, pid, ticks in info["tasks"]:
            t = by_task.get(int(task))
            if t is not None:
                t.pid, t.start_ticks = int(pid), None if ticks is None else int(ticks)
        step.stepd_pid, step.stepd_ticks = int(info["stepd"][0]), info["stepd"][1]
        step.started = True

    def _task_ended(self, step: Step, task: int, payload: bytes) -> None:
        info = json.loads(payload)
        for t in step.tasks:
            if t.task == task and t.status is None:
                t.status = (int(info.get("code") or 0), int(info.get("signal") or 0))
                t.usage = {k: info[k] for k in ("rss", "user", "sys") if k in info} or None

    def _settle(self, step: Step) -> None:
        """The tasks run (or have all ended already)."""
        if step.state is RunState.LAUNCHING or step.state is RunState.TERMINATING:
            step.advance(RunEvent.STARTED)

    def _ended(self, step: Step) -> None:
        """Every task here ended and its output is in the log."""
        self._settle(step)
        step.advance(RunEvent.EXITED)  # checks that every task's end is known
        if step.kill_handle is not None:
            step.kill_handle.cancel()
            step.kill_handle = None
        if step.limit_handle is not None:
            step.limit_handle.cancel()
            step.limit_handle = None
        for t in step.tasks:
            if t.stdin_fd is not None:
                close_quietly(t.stdin_fd)
                t.stdin_fd = None
        log.info("step %s: all tasks ended on %s", step.id_text, self.node)
        if step.orphaned and not step.attached:
            self._hand_over(step)

    def _hand_over(self, step: Step) -> None:
        """Nobody will stream this ended step's end to srun: tell the controller, forget it."""
        self._report_gone(step)
        self._done(step)

    def _done(self, step: Step) -> None:
        if step.state is RunState.ENDED:
            step.advance(RunEvent.REPORTED)
        self._forget(step)

    def ack(self, step: Step, pos: int) -> None:
        """Tell the supervisor how much of the log srun has had (its back-pressure)."""
        if step.ctl_fd >= 0 and not step.stepd_gone:
            with contextlib.suppress(OSError):
                os.write(step.ctl_fd, b'{"ack":%d}\n' % pos)

    def _say(self, step: Step, kind: bytes, text: str) -> None:
        """A frame of the node's own (task -1) into the step's log, through its supervisor."""
        line = json.dumps({"emit": [kind.decode(), -1, text]}).encode() + b"\n"
        if step.stepd_gone:
            self._append_log(step, frame(kind, -1, text.encode()))
            self._scan(step)
            return
        with contextlib.suppress(OSError):
            os.write(step.ctl_fd, line)

    # --- signals --------------------------------------------------------------------------

    def _members(self, step: Step) -> set[int]:
        """The living processes of the step's tasks: each task's session and process group
        and their descendants (see ``task_members``)."""
        return step_members(self.proc_reader(), step.tasks, exclude=os.getpid())

    def signal_tasks(self, step: Step, sig: int) -> None:
        for pid in self._members(step):
            kill_quietly(pid, sig)

    def stop(self, step: Step, reason: str, kill_wait: float | None) -> None:
        if step.finished:
            return
        if step.stop(reason):
            if reason not in ("cleanup", "srun"):
                when = format_timestamp(self.clock.now())
                line = (
                    f"slurmstepd-{self.node}: error: *** STEP {step.id_text} ON {self.node} "
                    f"CANCELLED AT {when}{REASON_WORDS.get(reason, '')} ***\n"
                )
                self._say(step, b"e", line)  # the node's, no task's
                self._say(step, b"m", json.dumps({"aborted": reason}))  # srun says so
            self._note(step)  # a restarted agent goes on stopping it
            self.signal_tasks(step, signal.SIGTERM)
            self.signal_tasks(step, signal.SIGCONT)
            wait = step.kill_wait if kill_wait is None else kill_wait
            if reason == "cleanup":
                wait = 0.0  # the job is over already: nothing to wait for
            loop = asyncio.get_running_loop()
            step.kill_handle = loop.call_later(max(0.0, wait), self._kill_now, step)

    def kill_at_once(self, step: Step) -> None:
        """srun stops its own step with SIGKILL and no grace (no CANCELLED line: srun
        itself reports why)."""
        if step.finished:
            return
        if step.stop("srun"):
            self._note(step)
        if step.kill_handle is not None:
            step.kill_handle.cancel()
        # Each task's process group at once, as Slurm's stepd does: a shell whose child is
        # killed first would otherwise end on its own (137), not "Killed".
        for t in step.tasks:
            if t.pid <= 0:
                continue  # not forked yet (never the agent's own group)
            try:
                os.killpg(t.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._kill_now(step)

    def _kill_now(self, step: Step) -> None:
        if step.finished:
            return
        self.signal_tasks(step, signal.SIGKILL)
        # Keep at it until everything is gone (a fork racing the kill).
        step.kill_handle = asyncio.get_running_loop().call_later(1.0, self._kill_now, step)

    def _report_gone(self, step: Step) -> None:
        if self.report is None:
            return
        codes = [t.status for t in step.tasks if t.status is not None]
        body = {
            "node": self.node,
            "job_id": step.job_id,
            "attempt": step.attempt,
            "step_id": step.step_id,
            "exit_code": max((c for c, _ in codes), default=0),
            "signal": max((sig for _, sig in codes), default=0),
        }
        task = asyncio.get_running_loop().create_task(self._deliver(body))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def _deliver(self, body: dict[str, Any]) -> None:
        """A few tries: if the controller stays away, the job's end cleans the step up."""
        assert self.report is not None
        delay = 0.5
        for _ in range(5):
            try:
                await self.report("/v1/agent/step_gone", body)
                return
            except Exception as e:  # noqa: BLE001 - network, refusal: retry, then give up
                log.info("step %s.%s: end not reported yet: %s", body["job_id"], body["step_id"], e)
                await asyncio.sleep(delay)
                delay *= 2

    def _forget(self, step: Step) -> None:
        if self.steps.get(step.key) is step:
            del self.steps[step.key]
        if self.state is not None and step.noted:
            step.noted = False
            self.state.drop_step(record_key(step))
        if step.pinned:
            step.pinned = False
            self.cpus.release_step(step.job_id, step.step_id)
        if step.limit_handle is not None:
            step.limit_handle.cancel()
            step.limit_handle = None
        for handle in (step.kill_handle, step.claim_handle):
            if handle is not None:
                handle.cancel()
        step.kill_handle = step.claim_handle = None
        for t in step.tasks:
            if t.stdin_fd is not None:
                close_quietly(t.stdin_fd)
                t.stdin_fd = None
        loop = asyncio.get_running_loop()
        for fd in (step.bell_fd, step.pidfd):
            if fd >= 0:
                loop.remove_reader(fd)
        for fd in (step.log_fd, step.bell_fd, step.ctl_fd, step.pidfd):
            if fd >= 0:
                close_quietly(fd)
        step.log_fd = step.bell_fd = step.ctl_fd = step.pidfd = -1
        step.stepd_gone = True  # nothing here watches it any more
        if self.state is not None:
            base = self._base(step)
            for suffix in (".log", ".bell", ".ctl"):
                with contextlib.suppress(OSError):
                    os.unlink(base + suffix)
        step.wake()
