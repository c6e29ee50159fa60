"""Job steps on this node: start the tasks srun asks for, stream their output back, signal
and stop them.

srun talks to the agent directly (TCP ``NodeAddr:Port``), with no cluster-key signature:
what authorizes a launch is the *grant* the controller signed for this step
(``protocol.stepcred``), which srun carries verbatim. The grant fixes the job, the step, the
user, the nodes and the task layout; srun supplies the command, its environment, its
working directory and how to connect stdio.

=============================  ==================================================================
``POST /v1/steps/launch``      ``{"grant", "sig", "argv", "env", "cwd", "umask", "torch_env", "preserve_env",
                               "launch_host", "srun_port", "stdin", "stdout", "stderr",
                               "open_mode", "cpu_bind"}`` -> a stream of frames
                               (``protocol.stream``) that ends when every task here has
                               ended and its output is sent
``POST /v1/steps/stdin``       ``?job=J&step=S&token=T``, a chunked body copied to the stdin of
                               the tasks here that take it; its end closes their stdin
``POST /v1/steps/signal``      ``{"job_id", "step_id", "token", "signal", "kill"}`` ->
                               ``{"ok": true}``; ``kill`` stops the step (TERM, KillWait, KILL)
=============================  ==================================================================

``token`` is a random value the launch stream's first frame gives srun, so that only the
srun that launched a step can feed or signal it.

Each task is forked here and becomes the user's process through ``agent.spawn`` (the one
become-the-user sequence, shared with batch scripts) with the task's choices: stdio from
the agent's pipes, files opened as the user, srun's terminal (``--pty``) or nothing;
``/tmp`` when the working directory cannot be entered, as Slurm does, with a warning; CPU
pinning when the task is bound (``--cpu-bind``, or ``TaskPlugin=task/affinity``: see
``agent.affinity``); ``execvpe`` of the command with the task's ``PATH``. A failure is
written to a close-on-exec pipe; the child exits with the errno (Slurm's ``slurmstepd:
error: execve(): cmd: No such file or directory``, code 2).

A task's ``x`` frame follows all of its output. When the last task here has ended, what
is left of the tasks' sessions is killed (as slurmstepd does), which also closes pipes
that a leftover background process held open. If srun's connection drops while tasks
run, the step is stopped: nobody would see its output or its end; once its tasks are
gone the agent tells the controller (``POST /v1/agent/step_gone``, signed), which ends the
step and frees what it held.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import secrets
import signal
import struct
import termios
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from muster.agent import proctree, spawn
from muster.agent.affinity import CpuLedger, binding_env
from muster.agent.env import EnvContext
from muster.agent.hooks import Hooks
from muster.agent.pipes import read_pipe
from muster.agent.progress import progress_env
from muster.agent.state import StateDir
from muster.agent.taskenv import task_environment
from muster.core import outputs
from muster.core.clock import Clock
from muster.core.cpubind import CpuBind, CpuBindError, mask_text, parse_cpu_bind
from muster.core.timefmt import format_timestamp
from muster.protocol.httpd import read_body
from muster.protocol.replay import ReplayGuard, SignatureError
from muster.protocol.stepcred import GRANT_TTL, GrantError, verify_grant
from muster.protocol.stream import frame, json_frame

__all__ = ["StepRunner"]

log = logging.getLogger(__name__)

HIGH_WATER = 4 << 20  # bytes of output queued for srun before the tasks' pipes are paused
LOW_WATER = 1 << 20
_REASON_WORDS = {
    "timeout": " DUE TO TIME LIMIT",
    "node_fail": " DUE TO NODE FAILURE",
    "requeue": " DUE TO JOB REQUEUE",
    "preempt": " DUE TO PREEMPTION",
    "shutdown": " DUE TO MUSTERD SHUTDOWN",
}


class StepLaunchError(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "invalid") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(slots=True)
class _Stdio:
    """Where one task's fd 0, 1 or 2 goes: a pipe to the agent, a file, or /dev/null."""

    mode: str  # "pipe", "file", "null", "same" (stderr to stdout's file), "pty" (srun --pty)
    path: str = ""
    flags: int = 0


@dataclass(slots=True)
class _Plan:
    task: int
    local: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    uid: int
    gid: int
    groups: list[int] | None
    umask: int | None
    stdin: _Stdio
    stdout: _Stdio
    stderr: _Stdio
    node: str = ""
    cpus: tuple[int, ...] | None = None  # pinned to these (``--cpu-bind``, task/affinity)
    bind_verbose: bool = False
    pty_size: tuple[int, int] | None = None  # srun --pty: the terminal's rows and columns


@dataclass(slots=True)
class _Task:
    task: int
    local: int
    pid: int = 0
    start_ticks: int | None = None  # tells our task from a later process given its pid
    status: tuple[int, int] | None = None  # (exit code, signal) once reaped
    stdin_fd: int | None = None
    read_fds: dict[int, bytes] = field(default_factory=dict)  # fd -> frame kind (o, e)
    pty: bool = False  # its stdin_fd is a terminal's master (srun --pty)
    usage: dict[str, float] | None = None  # getrusage when reaped: rss (KB), user, sys (s)
    reported: bool = False


@dataclass(slots=True)
class _Step:
    job_id: int
    attempt: int
    step_id: int
    uid: int
    node: str
    token: str
    kill_wait: float
    interactive: bool = False  # the job is srun's or salloc's (no batch script)
    tasks: list[_Task] = field(default_factory=list)
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    buffered: int = 0
    paused: bool = False
    terminated: str | None = None
    kill_handle: asyncio.TimerHandle | None = None
    swept: bool = False
    finished: bool = False  # every task here ended and its output is queued
    pinned: bool = False  # holds the job's CPUs in the ledger
    time_limit: float | None = None  # ``srun -t`` inside an allocation: the step's own limit
    limit_handle: asyncio.TimerHandle | None = None
    noted: bool = False  # its tasks' pids are on disk (StateDir.save_step)
    orphaned: bool = False  # srun's stream is gone
    job: dict[str, Any] = field(default_factory=dict)  # what the Prolog/Epilog are told

    @property
    def key(self) -> tuple[int, int]:
        return (self.job_id, self.step_id)

    @property
    def id_text(self) -> str:
        return f"{self.job_id}.{self.step_id}"


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
        self.steps: dict[tuple[int, int], _Step] = {}
        self._launched: dict[tuple[int, int, int], float] = {}
        # Set by the app: the agent's replay guard. A grant issued before the agent's
        # replay floor may have been launched by a previous agent here: refused.
        self.replay: ReplayGuard | None = None
        # Set by the daemon: a signed POST to the controller (path, body). Used to say that
        # a step whose srun went away has ended here, so its resources are freed.
        self.report: Callable[[str, dict[str, Any]], Awaitable[Any]] | None = None
        self._reports: set[asyncio.Task[None]] = set()

    # --- what a previous agent left ------------------------------------------------------

    def _note(self, step: _Step) -> None:
        if self.state is None or step.finished:
            return
        record = {
            "job_id": step.job_id, "attempt": step.attempt, "step_id": step.step_id,
            "tasks": [[t.task, t.pid, t.start_ticks] for t in step.tasks if t.pid],
        }
        try:
            self.state.save_step(_record_key(step), record)
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
        children: dict[int, list[int]] = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
        for key, rec in records:
            try:
                step = _Step(int(rec["job_id"]), int(rec["attempt"]), int(rec["step_id"]), -1, self.node, "", 0.0)
                tasks = [_Task(int(t), 0, int(pid), None if ticks is None else int(ticks)) for t, pid, ticks in rec["tasks"]]
            except (KeyError, TypeError, ValueError):
                log.error("ignoring a malformed step record %s: %r", key, rec)
                self.state.drop_step(key)
                continue
            doomed: set[int] = set()
            for t in tasks:
                holder = procs.get(t.pid)
                alive = holder is not None and holder.start_ticks == t.start_ticks
                t.status = None if alive else (0, signal.SIGKILL)
                doomed |= _task_members(procs, children, t)
                t.status = (0, signal.SIGKILL)
            doomed -= {os.getpid(), 1}
            for pid in doomed:
                _kill(pid, signal.SIGKILL)
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
                self._signal_step(step, sig)
        return found

    def signal_step(self, job_id: int, attempt: int, step_id: int, sig: int, kill: bool) -> bool:
        """The controller's ``scancel N.S``: stop the step here (``kill``) or signal it."""
        step = self.steps.get((job_id, step_id))
        if step is None or step.attempt != attempt:
            return False
        if kill:
            self._stop(step, "cancel", None)
        else:
            self._signal_step(step, sig)
        return True

    def terminate(
        self, job_id: int, reason: str, kill_wait: float | None = None, attempt: int | None = None
    ) -> bool:
        """The job ends: stop its steps here (TERM now, KILL after ``kill_wait``); only those
        of ``attempt`` when it is given (a requeued job's next run is not this one)."""
        found = False
        for step in list(self.steps.values()):
            if step.job_id == job_id and (attempt is None or step.attempt == attempt):
                found = True
                self._stop(step, reason, kill_wait)
        return found

    async def stop_all_when(self, stopping: Callable[[], bool]) -> None:
        """When the agent is being stopped, stop every step (TERM, KILL a second later) so
        that srun's connections end and the HTTP server can close them. Unlike a batch
        script, a step cannot be adopted by the next agent: its srun connection is gone."""
        while not stopping():
            await asyncio.sleep(0.2)
        for step in list(self.steps.values()):
            log.info("step %s: musterd is stopping; stopping the step", step.id_text)
            self._stop(step, "shutdown", 1.0)

    # --- the HTTP face ------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """ASGI app for ``/v1/steps/*`` on the agent's TCP socket."""
        path, method = scope["path"], scope["method"]
        try:
            if method != "POST":
                raise StepLaunchError("method not allowed", 405, "invalid")
            if path == "/v1/steps/launch":
                await self._launch(receive, send)
            elif path == "/v1/steps/stdin":
                await self._stdin(scope, receive, send)
            elif path == "/v1/steps/signal":
                await self._signal_request(receive, send)
            else:
                raise StepLaunchError(f"no route {path}", 404, "not_found")
        except StepLaunchError as e:
            await _json(send, e.status, {"error": str(e), "code": e.code})

    async def _launch(self, receive: Any, send: Any) -> None:
        body = _parse_json(await read_body(receive))
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
            step.limit_handle = asyncio.get_running_loop().call_later(
                step.time_limit, self._stop, step, "timeout", None)
        await send({
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/x-muster-frames")],
        })
        gone = asyncio.Event()

        async def watch_disconnect() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set()
                    step.queue.put_nowait(None)
                    return

        watcher = asyncio.create_task(watch_disconnect())
        started = [t.task for t in step.tasks]
        first = json_frame(b"m", -1, {"started": started, "token": step.token, "node": self.node})
        try:
            await send({"type": "http.response.body", "body": first, "more_body": True})
            while True:
                item = await step.queue.get()
                if gone.is_set():
                    break
                chunks = [] if item is None else [item]
                while not step.queue.empty():
                    more = step.queue.get_nowait()
                    if more is not None:
                        chunks.append(more)
                if chunks:
                    data = b"".join(chunks)
                    step.buffered -= len(data)
                    if step.paused and step.buffered < LOW_WATER:
                        self._resume(step)
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                if step.finished and step.queue.empty():
                    await send({"type": "http.response.body", "body": frame(b"d", -1, b""), "more_body": False})
                    break
        except OSError:
            pass
        finally:
            watcher.cancel()
            if step.finished:
                self._forget(step)
            else:
                log.info("step %s: srun went away; stopping the step", step.id_text)
                step.orphaned = True
                self._stop(step, "srun", None)

    async def _stdin(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        query = parse_qs(scope.get("query_string", b"").decode())
        try:
            key = (int(query["job"][0]), int(query["step"][0]))
            token = query["token"][0]
        except (KeyError, ValueError, IndexError):
            raise StepLaunchError("stdin needs job, step and token") from None
        step = self.steps.get(key)
        if step is None or not secrets.compare_digest(step.token, token):
            raise StepLaunchError(f"no such step {key[0]}.{key[1]} here", 404, "not_found")
        targets = [t for t in step.tasks if t.stdin_fd is not None]
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    break
                data = message.get("body", b"")
                for t in targets:
                    if t.stdin_fd is not None and data:
                        if not await _write_all(t.stdin_fd, data):
                            _close(t.stdin_fd)
                            t.stdin_fd = None
                if not message.get("more_body"):
                    break
        finally:
            for t in targets:
                if t.stdin_fd is not None:
                    if t.pty:  # a terminal's end of input is ^D (twice: after a partial line too)
                        await _write_all(t.stdin_fd, b"\x04\x04")
                    _close(t.stdin_fd)
                    t.stdin_fd = None
        await _json(send, 200, {"ok": True})

    async def _signal_request(self, receive: Any, send: Any) -> None:
        body = _parse_json(await read_body(receive))
        try:
            key = (int(body["job_id"]), int(body["step_id"]))
            sig = int(body.get("signal") or signal.SIGTERM)
        except (KeyError, TypeError, ValueError):
            raise StepLaunchError("signal needs job_id, step_id and signal") from None
        step = self.steps.get(key)
        if step is None or not secrets.compare_digest(step.token, str(body.get("token") or "")):
            raise StepLaunchError(f"no such step {key[0]}.{key[1]} here", 404, "not_found")
        if body.get("kill") and sig == signal.SIGKILL:
            self._kill_at_once(step)  # srun's -W, --quit-on-interrupt: Slurm's SIGKILL
        elif body.get("kill"):
            self._stop(step, "cancel", None)
        else:
            self._signal_step(step, sig)
        await _json(send, 200, {"ok": True})

    # --- preparing ----------------------------------------------------------------------

    def _prepare(self, body: dict[str, Any]) -> tuple[_Step, list[_Plan]]:
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
        groups = None
        if me == 0:
            try:
                import pwd

                name = pwd.getpwuid(uid).pw_name
                groups = os.getgrouplist(name, gid)
            except (KeyError, OSError):
                groups = [gid]
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
        index = nodes.index(self.node)
        job = grant.get("job") or {}
        launch = {
            "launch_host": body.get("launch_host"),
            "srun_port": body.get("srun_port"),
            "umask": body.get("umask"),
            "torch_env": body.get("torch_env", True) is not False,
            "preserve_env": body.get("preserve_env"),  # srun -E (taskenv keeps only counts)
        }
        append = body.get("open_mode") == "append"
        step = _Step(job_id, attempt, step_id, uid, self.node, secrets.token_hex(16),
                     float(body.get("kill_wait") or self.kill_wait), bool(job.get("interactive")))
        step.job = {
            "job_id": job_id, "restart_count": attempt, "uid": uid, "gid": gid,
            "user": str(grant.get("user") or ""), "partition": str(job.get("partition") or ""),
            "spec": {"name": str(job.get("name") or ""), "workdir": cwd},
            "alloc": [{"node": n} for n in nodes],
        }
        plans = []
        if self.state is not None:  # MUSTER_PROGRESS: this node's file for the job attempt
            env = {**env, **progress_env(self.state.root, step.job)}
        for local, task in enumerate(layout["tasks"][index]):
            def expand(pattern: str, task: int = task) -> str:
                # The same resolver as the batch script's output (core.outputs).
                fields = outputs.fields_for_task(grant, self.node, index, task)
                return os.path.normpath(os.path.join(cwd, outputs.expand_pattern(pattern, fields)))

            stdout = _stdio(body.get("stdout"), task, expand, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC))
            stderr_spec = body.get("stderr")
            if not stderr_spec and stdout.mode == "file":
                stderr = _Stdio("same")
            else:
                stderr = _stdio(stderr_spec, task, expand, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC))
            stdin = _stdio(body.get("stdin"), task, expand, os.O_RDONLY, default="null")
            if body.get("pty"):  # srun --pty: task 0 in a terminal, the others' output dropped
                if task == 0:
                    stdin = stdout = stderr = _Stdio("pty")
                else:
                    stdout, stderr = _Stdio("null"), _Stdio("same")
            own = task_argv.get(str(task))
            if own is not None and (not isinstance(own, list) or not own):
                raise StepLaunchError(f"malformed command line for task {task}")
            plans.append(_Plan(
                task=task, local=local, argv=argv if own is None else [str(a) for a in own],
                env=task_environment(env, grant, self.node, local, self.env_ctx, launch),
                cwd=cwd, uid=uid, gid=gid, groups=groups, umask=umask,
                stdin=stdin, stdout=stdout, stderr=stderr, node=self.node,
                pty_size=_pty_size(body.get("pty_size")) if stdin.mode == "pty" else None,
            ))
            step.tasks.append(_Task(task, local))
        self._pin(step, plans, grant, bind)
        limit = layout.get("time_limit")
        step.time_limit = float(limit) if limit else None
        self._launched[(job_id, attempt, step_id)] = self.clock.monotonic()
        return step, plans

    def _pin(self, step: _Step, plans: list[_Plan], grant: Mapping[str, Any], bind: CpuBind) -> None:
        """Choose each task's CPUs (when they are bound) among the job's CPUs here."""
        if not plans or (not bind.given and self.bind_default == "none"):
            return
        job, layout = grant.get("job") or {}, grant["step"]
        per_task = int(layout.get("cpus_per_task") or 1)
        job_nodes, job_cpus = list(job.get("nodes") or []), list(job.get("cpus") or [])
        if self.node in job_nodes and len(job_cpus) == len(job_nodes):
            count = int(job_cpus[job_nodes.index(self.node)])
        else:
            count = per_task * len(plans)
        sets = self.cpus.step_cpus(step.job_id, step.step_id, count, [per_task] * len(plans), bind, self.bind_default)
        step.pinned = True
        if not sets:
            return
        extra = binding_env(bind, sets)
        for plan, cpus in zip(plans, sets, strict=True):
            plan.cpus, plan.bind_verbose = cpus, bind.verbose
            plan.env.update(extra)

    def _prune_launched(self) -> None:
        cutoff = self.clock.monotonic() - 2 * GRANT_TTL
        for k, when in list(self._launched.items()):
            if when < cutoff:
                del self._launched[k]

    # --- starting -----------------------------------------------------------------------

    async def _spawn_all(self, step: _Step, plans: list[_Plan]) -> None:
        """Fork every task; a task that cannot start reports why on its stderr frame and
        ends with the errno as its exit code, as Slurm's do. Tasks sharing an output file
        start one after another, so that only the first truncates it."""
        shared = _shares_files(plans)
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

    async def _fork(self, step: _Step, plan: _Plan, task: _Task) -> None:
        loop = asyncio.get_running_loop()
        pipes: dict[int, tuple[int, int]] = {}
        terminal: tuple[int, int] | None = None
        if plan.stdin.mode == "pty":
            try:
                terminal = _open_terminal(plan)
            except OSError as e:
                raise StepLaunchError(f"cannot open a terminal on {self.node}: {e.strerror}", 500,
                                      "launch_failed") from None
        if plan.stdin.mode == "pipe":
            pipes[0] = os.pipe()
        if plan.stdout.mode == "pipe":
            pipes[1] = os.pipe()
        if plan.stderr.mode == "pipe":
            pipes[2] = os.pipe()
        err_r, err_w = os.pipe()
        spec = _child_spec(plan, pipes, terminal, close_first=(err_r,))
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
        task.start_ticks = proctree.process_start_ticks(pid)
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
        if failed is not None:
            # The child failed before exec: its stderr frame says why (it exits soon).
            self._emit(step, frame(b"e", task.task, f"slurmstepd-{self.node}: error: {failed[1]}\n".encode()))
        self._watch_exit(step, task)

    def _watch_exit(self, step: _Step, task: _Task) -> None:
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

    async def _poll_exit(self, step: _Step, task: _Task) -> None:
        while task.status is None:
            await asyncio.sleep(0.05)
            self._reap(step, task, block=False)

    def _reap(self, step: _Step, task: _Task, block: bool = True) -> None:
        try:
            pid, status, usage = os.wait4(task.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status, usage = task.pid, 0, None
        if pid == 0:
            return
        if usage is not None:  # the task and the children it waited for (sacct's MaxRSS, CPU)
            task.usage = {"rss": usage.ru_maxrss, "user": round(usage.ru_utime, 3),
                          "sys": round(usage.ru_stime, 3)}
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

    def _readable(self, step: _Step, task: _Task, fd: int, kind: bytes) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._emit(step, frame(kind, task.task, data))
            if step.buffered > HIGH_WATER and not step.paused:
                self._pause(step)
            return
        asyncio.get_running_loop().remove_reader(fd)
        _close(fd)
        task.read_fds.pop(fd, None)
        self._maybe_report(step, task)

    def _emit(self, step: _Step, data: bytes) -> None:
        step.buffered += len(data)
        step.queue.put_nowait(data)

    def _pause(self, step: _Step) -> None:
        step.paused = True
        loop = asyncio.get_running_loop()
        for t in step.tasks:
            for fd in t.read_fds:
                loop.remove_reader(fd)

    def _resume(self, step: _Step) -> None:
        step.paused = False
        loop = asyncio.get_running_loop()
        for t in step.tasks:
            for fd, kind in t.read_fds.items():
                loop.add_reader(fd, self._readable, step, t, fd, kind)

    def _maybe_report(self, step: _Step, task: _Task) -> None:
        if task.reported or task.status is None or task.read_fds:
            return
        task.reported = True
        code, sig = task.status
        self._emit(step, json_frame(b"x", task.task, {"code": code, "signal": sig, **(task.usage or {})}))
        if all(t.reported for t in step.tasks):
            step.finished = True
            if step.kill_handle is not None:
                step.kill_handle.cancel()
            for t in step.tasks:
                if t.stdin_fd is not None:
                    _close(t.stdin_fd)
                    t.stdin_fd = None
            step.queue.put_nowait(None)
            log.info("step %s: all tasks ended on %s", step.id_text, self.node)
            if step.orphaned:
                self._forget(step)
                self._report_gone(step)

    # --- signals --------------------------------------------------------------------------

    def _members(self, step: _Step) -> set[int]:
        """The living processes of the step's tasks: each task's session and process group
        and their descendants (see ``_task_members``)."""
        procs = self.proc_reader()
        children: dict[int, list[int]] = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
        out: set[int] = set()
        for t in step.tasks:
            out |= _task_members(procs, children, t)
        out.discard(os.getpid())
        out.discard(1)
        return out

    def _signal_step(self, step: _Step, sig: int) -> None:
        for pid in self._members(step):
            _kill(pid, sig)

    def _stop(self, step: _Step, reason: str, kill_wait: float | None) -> None:
        if step.finished:
            return
        if step.terminated is None:
            step.terminated = reason
            if reason not in ("cleanup", "srun"):
                when = format_timestamp(self.clock.now())
                line = (f"slurmstepd-{self.node}: error: *** STEP {step.id_text} ON {self.node} "
                        f"CANCELLED AT {when}{_REASON_WORDS.get(reason, '')} ***\n")
                self._emit(step, frame(b"e", -1, line.encode()))  # the node's, no task's
                self._emit(step, json_frame(b"m", -1, {"aborted": reason}))  # srun says so
            self._signal_step(step, signal.SIGTERM)
            self._signal_step(step, signal.SIGCONT)
            wait = step.kill_wait if kill_wait is None else kill_wait
            if reason == "cleanup":
                wait = 0.0  # the job is over already: nothing to wait for
            loop = asyncio.get_running_loop()
            step.kill_handle = loop.call_later(max(0.0, wait), self._kill_now, step)

    def _kill_at_once(self, step: _Step) -> None:
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

    def _kill_now(self, step: _Step) -> None:
        if step.finished:
            return
        self._signal_step(step, signal.SIGKILL)
        # Keep at it until everything is gone (a fork racing the kill).
        step.kill_handle = asyncio.get_running_loop().call_later(1.0, self._kill_now, step)

    def _kill_leftovers(self, step: _Step) -> None:
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
                    _kill(pid, signal.SIGKILL)

        asyncio.get_running_loop().call_later(0.2, sweep)

    def _report_gone(self, step: _Step) -> None:
        if self.report is None:
            return
        codes = [t.status for t in step.tasks if t.status is not None]
        body = {
            "node": self.node, "job_id": step.job_id, "attempt": step.attempt, "step_id": step.step_id,
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

    def _forget(self, step: _Step) -> None:
        if self.steps.get(step.key) is step:
            del self.steps[step.key]
        if self.state is not None and step.noted:
            step.noted = False
            self.state.drop_step(_record_key(step))
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
                _close(fd)
            t.read_fds.clear()
            if t.stdin_fd is not None:
                _close(t.stdin_fd)
                t.stdin_fd = None


# --- helpers ---------------------------------------------------------------------------------


def _task_members(
    procs: Mapping[int, proctree.ProcInfo], children: Mapping[int, list[int]], task: _Task
) -> set[int]:
    """One task's processes: its session and process group (the task leads both), and
    their descendants. Once the task is reaped its pid is ours only while some process
    still uses it as a session or group id (Linux reuses no such pid); a process that now
    has that pid but another start time is a stranger, and then nothing is ours."""
    leader = task.pid
    if not leader:
        return set()
    holder = procs.get(leader)
    if task.status is not None and holder is not None and holder.start_ticks != task.start_ticks:
        return set()
    found = {p.pid for p in procs.values() if p.sid == leader or p.pgid == leader}
    if task.status is None and holder is not None:
        found.add(leader)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _pty_size(value: Any) -> tuple[int, int] | None:
    try:
        rows, cols = (int(v) for v in value)
    except (TypeError, ValueError):
        return None
    return (rows, cols) if 0 < rows < 65536 and 0 < cols < 65536 else None


def _open_terminal(plan: _Plan) -> tuple[int, int]:
    """A pseudo-terminal for ``srun --pty``: (master, slave), the slave owned by the task's
    user (as a login terminal is) and sized like srun's."""
    master, slave = os.openpty()
    if os.geteuid() == 0:
        os.fchown(slave, plan.uid, plan.gid)
    if plan.pty_size:
        rows, cols = plan.pty_size
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return master, slave


def _record_key(step: _Step) -> str:
    return f"{step.job_id}.{step.attempt}.{step.step_id}"


def _stdio(spec: Any, task: int, expand: Callable[[str], str], flags: int, default: str = "pipe") -> _Stdio:
    """``{"mode": "stream"|"file"|"none", "tasks": [ids] or None, "path": pattern}``."""
    if not isinstance(spec, dict):
        return _Stdio(default)
    mode = spec.get("mode") or "stream"
    tasks = spec.get("tasks")
    if tasks is not None and task not in tasks:
        return _Stdio("null")
    if mode == "none":
        return _Stdio("null")
    if mode == "file":
        return _Stdio("file", expand(str(spec.get("path") or "")), flags)
    return _Stdio("pipe")


def _shares_files(plans: list[_Plan]) -> bool:
    seen: set[str] = set()
    for p in plans:
        for s in (p.stdout, p.stderr):
            if s.mode == "file":
                if s.path in seen:
                    return True
                seen.add(s.path)
    return False


TASK_WORDS = spawn.Wording(  # Slurm's names for the steps of a task's start
    session="setsid()",
    identity="switching to uid {uid}",
    chdir="chdir(): {cwd}",
    stdio="dup2()",
    exec="execve(): {exe}",
)


def _child_spec(plan: _Plan, pipes: dict[int, tuple[int, int]], terminal: tuple[int, int] | None,
                close_first: tuple[int, ...]) -> spawn.ChildSpec:
    """How a forked child becomes the task (``agent.spawn``): stdio from the agent's pipes,
    files opened as the user, a terminal or nothing; ``/tmp`` when the working directory
    cannot be entered; the errno as the exit code of a failed start."""
    streams = []
    for fd, stdio in ((0, plan.stdin), (1, plan.stdout), (2, plan.stderr)):
        if stdio.mode == "pipe":
            streams.append(spawn.Stream(fd=pipes[fd][0] if fd == 0 else pipes[fd][1]))
        elif stdio.mode == "file":
            streams.append(spawn.Stream(path=stdio.path, flags=stdio.flags, label=f"open(): {stdio.path}"))
        elif stdio.mode == "same":
            streams.append(spawn.Stream(same=True))
        elif stdio.mode == "pty":
            assert terminal is not None
            streams.append(spawn.Stream(fd=terminal[1]))
        else:
            streams.append(spawn.Stream(path=os.devnull, flags=os.O_RDWR, label=f"open(): {os.devnull}"))
    bind_note = None
    if plan.bind_verbose and plan.cpus:
        mask = mask_text(plan.cpus)

        def bind_note(pid: int) -> str:
            return f"cpu-bind=MASK - {plan.node}, task {plan.task:2d} {plan.local:2d} [{pid}]: mask {mask} set\n"

    return spawn.ChildSpec(
        exe=plan.argv[0], argv=plan.argv, env=plan.env,
        uid=plan.uid, gid=plan.gid, umask=plan.umask, cwd=plan.cwd,
        groups=plan.groups if plan.uid != os.geteuid() else None,  # already the user: as is
        stdin=streams[0], stdout=streams[1], stderr=streams[2], words=TASK_WORDS,
        reset=spawn.ignored_signals(), cpus=plan.cpus, bind_note=bind_note,
        cwd_fallback="/tmp", warn_fd=pipes[2][1] if 2 in pipes else 2,
        terminal=None if terminal is None else terminal[1],
        close_first=close_first if terminal is None else (*close_first, terminal[0]),
        close_after=tuple(fd for pair in pipes.values() for fd in pair),
        search_path=True, failure_exit=None,
    )


async def _write_all(fd: int, data: bytes) -> bool:
    """Write to a task's stdin pipe without blocking the agent; False once it is closed."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
            view = view[n:]
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(fd, _settle, ready)
            try:
                await ready
            finally:
                loop.remove_writer(fd)
        except OSError as e:
            if e.errno in (errno.EPIPE, errno.EBADF):
                return False
            raise
    return True


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _parse_json(raw: bytes) -> dict[str, Any]:
    import json

    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise StepLaunchError("request body is not JSON") from None
    if not isinstance(body, dict):
        raise StepLaunchError("request body must be a JSON object")
    return body


async def _json(send: Any, status: int, data: dict[str, Any]) -> None:
    import json

    payload = json.dumps(data).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
    })
    await send({"type": "http.response.body", "body": payload})
