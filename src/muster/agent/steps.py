"""Job steps on this node: start the tasks srun asks for, stream their output back, signal
and stop them.

srun reaches the agent through ``agent.stepapi`` (its HTTP face), authorized by the grant
the controller signed for the step; the runner checks the request, plans the tasks
(``agent.stepplan``) and keeps each running step as a ``localstep.Step``.

Each task is forked here and becomes the user's process through ``agent.spawn`` (the one
become-the-user sequence, shared with batch scripts) with the task's choices: stdio from
the agent's pipes, files opened as the user, srun's terminal (``--pty``) or nothing;
``/tmp`` when the working directory cannot be entered, as Slurm does, with a warning; CPU
pinning when the task is bound (``--cpu-bind``, or ``TaskPlugin=task/affinity``: see
``agent.affinity``); ``execvpe`` of the command with the task's ``PATH``. A failure is
written to a close-on-exec pipe; the child exits with the errno (Slurm's ``slurmstepd:
error: execve(): cmd: No such file or directory``, code 2).

A task's ``x`` frame follows all of its output. When the last task here has ended, what is left of
the tasks' sessions is killed (as slurmstepd does), which also closes pipes that a leftover background
process held open. If srun's connection drops while tasks run, the step is stopped (nobody would see
its output or its end); once its tasks are gone the agent tells the controller (``/v1/agent/step_gone``)."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from muster.agent import proctree, spawn, stepplan
from muster.agent.affinity import CpuLedger
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
from muster.agent.pipes import read_pipe
from muster.agent.progress import progress_env
from muster.agent.state import StateDir
from muster.agent.stepplan import StepLaunchError, TaskPlan
from muster.core.clock import Clock
from muster.core.cpubind import CpuBindError, parse_cpu_bind
from muster.core.timefmt import format_timestamp
from muster.protocol.replay import ReplayGuard, SignatureError
from muster.protocol.stepcred import GRANT_TTL, GrantError, verify_grant
from muster.protocol.stream import frame, json_frame

__all__ = ["StepRunner"]

log = logging.getLogger(__name__)

HIGH_WATER = 4 << 20  # bytes of output queued for srun before the tasks' pipes are paused
LOW_WATER = 1 << 20


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
    ) -> None:
        self.node = node
        self.hooks = hooks  # the site's Prolog runs before a job's first step here
        # Where the pids of running steps are noted, so that a restarted agent can find
        # and end the tasks its predecessor left (see ``recover``).
        self.state = state
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
        # Set by the daemon: a signed POST to the controller (path, body). Used to say that
        # a step whose srun went away has ended here, so its resources are freed.
        self.report: Callable[[str, dict[str, Any]], Awaitable[Any]] | None = None
        self._reports: set[asyncio.Task[None]] = set()

    # --- what a previous agent left ------------------------------------------------------

    def _note(self, step: Step) -> None:
        if self.state is None or step.finished:
            return
        try:
            self.state.save_step(record_key(step), step_record(step))
            step.noted = True
        except OSError as e:
            log.warning("step %s: cannot note its tasks on disk: %s", step.id_text, e)

    def recover(self) -> int:
        """End the tasks of steps a previous agent ran here and tell the controller.

        Their srun's connection died with that agent and cannot be taken over, so nobody
        would see their output or their end; left alone they would hold the job's GPUs
        and CPUs unseen. Each one's session, group and descendants are killed (a task
        whose pid now belongs to another process is left alone) and the step is reported
        gone, killed by SIGKILL. Returns how many steps were found."""
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
            for t in tasks:
                holder = procs.get(t.pid)
                alive = holder is not None and holder.start_ticks == t.start_ticks
                t.status = None if alive else (0, signal.SIGKILL)
            doomed = step_members(procs, tasks, exclude=os.getpid())
            for t in tasks:
                t.status = (0, signal.SIGKILL)
            for pid in doomed:
                kill_quietly(pid, signal.SIGKILL)
            log.warning("step %s: left by the previous agent; %d process(es) killed", step.id_text, len(doomed))
            step.tasks = tasks
            self.state.drop_step(key)
            self._report_gone(step)
        return len(records)

    # --- queries ----------------------------------------------------------------------

    def running_jobs(self) -> list[int]:
        return sorted({s.job_id for s in self.steps.values()})

    # --- control from the controller ----------------------------------------------------

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

    async def stop_all_when(self, stopping: Callable[[], bool]) -> None:
        """When the agent is being stopped, stop every step (TERM, KILL a second later) so
        that srun's connections end and the HTTP server can close them. Unlike a batch
        script, a step cannot be adopted by the next agent: its srun connection is gone."""
        while not stopping():
            await asyncio.sleep(0.5)  # cheap: dozens of nodes may share a process (agent.host)
        for step in list(self.steps.values()):
            log.info("step %s: musterd is stopping; stopping the step", step.id_text)
            self.stop(step, "shutdown", 1.0)

    # --- launching (srun's requests arrive through ``agent.stepapi``) ----------------------

    async def launch(self, body: dict[str, Any]) -> Step:
        """Check the request and its grant, run the Prolog if this is the job's first launch
        here, fork every task; the step is then registered and its output queued. Raises
        ``StepLaunchError``."""
        step, plans = self._prepare(body)
        if self.hooks is not None:  # the first of this job's launches here runs the Prolog
            prolog = await self.hooks.ensure_prolog(step.job)
            if not prolog.ok:
                raise StepLaunchError(f"{prolog.reason} on {self.node}", 500, "launch_failed")
        self.steps[step.key] = step
        try:
            await self._spawn_all(step, plans)
        except BaseException:
            self._forget(step)
            raise
        self._note(step)
        if step.time_limit and not step.finished:
            step.limit_handle = asyncio.get_running_loop().call_later(step.time_limit, self.stop, step, "timeout", None)
        return step

    def detach(self, step: Step) -> None:
        """srun's stream has ended: a finished step is forgotten; one still running is
        stopped (nobody would see its output or its end) and reported once its tasks end."""
        if step.finished:
            self._forget(step)
        else:
            log.info("step %s: srun went away; stopping the step", step.id_text)
            step.orphaned = True
            self.stop(step, "srun", None)

    def _prepare(self, body: dict[str, Any]) -> tuple[Step, list[TaskPlan]]:
        try:
            grant = verify_grant(self.key, str(body.get("grant") or ""), str(body.get("sig") or ""), self.clock.now())
            if self.replay is not None:
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
            secrets.token_hex(16),
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
        step.tasks = [Task(plan.task, plan.local) for plan in plans]
        step.pinned = stepplan.pin_tasks(self.cpus, step, plans, grant, bind, self.bind_default, self.node)
        limit = layout.get("time_limit")
        step.time_limit = float(limit) if limit else None
        self._launched[(job_id, attempt, step_id)] = self.clock.monotonic()
        return step, plans

    def _prune_launched(self) -> None:
        cutoff = self.clock.monotonic() - 2 * GRANT_TTL
        for k, when in list(self._launched.items()):
            if when < cutoff:
                del self._launched[k]

    # --- starting -----------------------------------------------------------------------

    async def _spawn_all(self, step: Step, plans: list[TaskPlan]) -> None:
        """Fork every task; a task that cannot start reports why on its stderr frame and
        ends with the errno as its exit code, as Slurm's do. Tasks sharing an output file
        start one after another, so that only the first truncates it."""
        shared = stepplan.shares_files(plans)
        pending = []
        for plan, task in zip(plans, step.tasks, strict=True):
            started = self._fork(step, plan, task)
            if shared:
                await started
            else:
                pending.append(started)
        if pending:
            await asyncio.gather(*pending)
        log.info("step %s: started tasks %s on %s", step.id_text, [t.task for t in step.tasks], self.node)

    async def _fork(self, step: Step, plan: TaskPlan, task: Task) -> None:
        loop = asyncio.get_running_loop()
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
        err_r, err_w = os.pipe()
        spec = stepplan.child_spec(plan, pipes, terminal, close_first=(err_r,))
        pid = os.fork()
        if pid == 0:  # the child: never returns
            spawn.become(spec, err_w)
        os.close(err_w)
        if terminal is not None:  # its output is read, and its input written, at the master
            master, slave = terminal
            os.close(slave)
            os.set_blocking(master, False)
            task.read_fds[master] = b"o"
            loop.add_reader(master, self._readable, step, task, master, b"o")
            task.stdin_fd, task.pty = os.dup(master), True
        task.pid = pid
        for fd, (r, w) in pipes.items():
            if fd == 0:
                os.close(r)
                task.stdin_fd = w
            else:
                os.close(w)
                os.set_blocking(r, False)
                kind = b"o" if fd == 1 else b"e"
                task.read_fds[r] = kind
                loop.add_reader(r, self._readable, step, task, r, kind)
        failed = spawn.failure(await read_pipe(err_r))
        # read once it exec'd (or failed: a zombie until reaped): a fork's /proc is slow to read
        task.start_ticks = proctree.process_start_ticks(pid)
        if failed is not None:
            # The child failed before exec: its stderr frame says why (it exits soon).
            step.emit(frame(b"e", task.task, f"slurmstepd-{self.node}: error: {failed[1]}\n".encode()))
        self._watch_exit(step, task)

    def _watch_exit(self, step: Step, task: Task) -> None:
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(task.pid)
        except (AttributeError, OSError):
            loop.create_task(self._poll_exit(step, task))
            return

        def ready() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            self._reap(step, task)

        loop.add_reader(pidfd, ready)

    async def _poll_exit(self, step: Step, task: Task) -> None:
        while task.status is None:
            await asyncio.sleep(0.05)
            self._reap(step, task, block=False)

    def _reap(self, step: Step, task: Task, block: bool = True) -> None:
        try:
            pid, status, usage = os.wait4(task.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status, usage = task.pid, 0, None
        if pid == 0:
            return
        if usage is not None:  # the task and the children it waited for (sacct's MaxRSS, CPU)
            task.usage = {"rss": usage.ru_maxrss, "user": round(usage.ru_utime, 3), "sys": round(usage.ru_stime, 3)}
        if os.WIFSIGNALED(status):
            task.status = (0, os.WTERMSIG(status))
        else:
            task.status = (os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0, 0)
        self._maybe_report(step, task)
        if all(t.status is not None for t in step.tasks) and not step.swept:
            # The last task here ended: what is left of the tasks' sessions goes too.
            step.swept = True
            self._kill_leftovers(step)

    # --- output ---------------------------------------------------------------------------

    def _readable(self, step: Step, task: Task, fd: int, kind: bytes) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            step.emit(frame(kind, task.task, data))
            if step.buffered > HIGH_WATER and not step.paused:
                step.pause()
            return
        asyncio.get_running_loop().remove_reader(fd)
        close_quietly(fd)
        task.read_fds.pop(fd, None)
        self._maybe_report(step, task)

    def resume(self, step: Step) -> None:
        step.paused = False
        loop = asyncio.get_running_loop()
        for t in step.tasks:
            for fd, kind in t.read_fds.items():
                loop.add_reader(fd, self._readable, step, t, fd, kind)

    def _maybe_report(self, step: Step, task: Task) -> None:
        if task.reported or task.status is None or task.read_fds:
            return
        task.reported = True
        code, sig = task.status
        step.emit(json_frame(b"x", task.task, {"code": code, "signal": sig, **(task.usage or {})}))
        if all(t.reported for t in step.tasks):
            step.finished = True
            if step.kill_handle is not None:
                step.kill_handle.cancel()
            for t in step.tasks:
                if t.stdin_fd is not None:
                    close_quietly(t.stdin_fd)
                    t.stdin_fd = None
            step.queue.put_nowait(None)
            log.info("step %s: all tasks ended on %s", step.id_text, self.node)
            if step.orphaned:
                self._forget(step)
                self._report_gone(step)

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
        if step.terminated is None:
            step.terminated = reason
            if reason not in ("cleanup", "srun"):
                when = format_timestamp(self.clock.now())
                line = (
                    f"slurmstepd-{self.node}: error: *** STEP {step.id_text} ON {self.node} "
                    f"CANCELLED AT {when}{REASON_WORDS.get(reason, '')} ***\n"
                )
                step.emit(frame(b"e", -1, line.encode()))  # the node's, no task's
                step.emit(json_frame(b"m", -1, {"aborted": reason}))  # srun says so
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
        if step.terminated is None:
            step.terminated = "srun"
        if step.kill_handle is not None:
            step.kill_handle.cancel()
        # Each task's process group at once, as Slurm's stepd does: a shell whose child is
        # killed first would otherwise end on its own (137), not "Killed".
        for t in step.tasks:
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

    def _kill_leftovers(self, step: Step) -> None:
        """Kill what the tasks left behind. Their process groups go at once (cheap, and
        safe: a group id is not reused while the group has members); a full look through
        ``/proc`` follows only if some output pipe is still held open a moment later, by a
        process that left its task's group."""
        for t in step.tasks:
            try:
                os.killpg(t.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

        def sweep() -> None:
            if not step.finished:
                for pid in self._members(step):
                    kill_quietly(pid, signal.SIGKILL)

        asyncio.get_running_loop().call_later(0.2, sweep)

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
        loop = asyncio.get_running_loop()
        for t in step.tasks:
            for fd in t.read_fds:
                loop.remove_reader(fd)
                close_quietly(fd)
            t.read_fds.clear()
            if t.stdin_fd is not None:
                close_quietly(t.stdin_fd)
                t.stdin_fd = None
