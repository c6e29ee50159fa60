"""A job step's supervisor on this node (slurmstepd's role for steps): forks the step's
tasks, writes everything they say and how they end into the step's log, and outlives the
agent (see docs/decisions/0001-step-supervisor.md).

The agent forks one supervisor per step and node (``agent.steps``), after it has made the
tasks' pipes (or terminal) and their ``spawn`` recipes; ``run`` is the supervisor's whole
life. It leads a session of its own, ignores the signals a ``systemctl restart`` or a
terminal sends, holds none of the agent's files (its listening sockets, its lock) and is
the child subreaper of the tasks' processes. It forks each task (``spawn.become``; one
after another when tasks share an output file), then loops on one ``select``:

* each task's stdout/stderr (pipes, or the terminal's master) -> an ``o``/``e`` frame
  appended to the log (``protocol.stream`` frames, ``O_APPEND``);
* ``SIGCHLD`` -> ``wait4`` of every ended child (its orphans too); once a task has ended
  and its output is read to the end, its ``x`` frame (code, signal, resource use: its
  max RSS from its cgroup's peak and its OOM kills, ``oom``, where it is confined,
  ``agent.memacct``; from ``getrusage`` where not);
* the control FIFO -> the agent's lines: ``{"ack": N}`` (bytes of the log delivered to
  srun: with more than ``HIGH_WATER`` undelivered the tasks' output is no longer read, so
  a step whose srun or agent is away blocks on its writes rather than fill the disk) and
  ``{"emit": [kind, task, text]}`` (the node's own words, such as the CANCELLED line).

The log begins with a ``p`` frame (the tasks' pids and start times, the supervisor's own)
that the agent keeps and never sends on. After every append a byte goes to the bell FIFO
(never waiting: a full FIFO already rings). When every task has ended, what is left of
their sessions and groups, and any other child, is killed (as slurmstepd does) and the
supervisor exits; the log stays until the agent has handed the step's end over.

The log is the one record of the step: an agent that restarts reads it from the start,
and an srun that reconnects says how many frames it has had. Nothing here logs (a fork of
a threaded agent must not take the logging lock) or reads a clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import select
import signal
from dataclasses import dataclass, field
from typing import NoReturn

from muster.agent import memacct, monitor, proctree, spawn
from muster.agent.localstep import Task, kill_quietly, step_members
from muster.protocol.stream import frame, json_frame

__all__ = ["HIGH_WATER", "StepFiles", "TaskStart", "frames_in", "run"]

HIGH_WATER = 4 << 20  # bytes of the log not yet delivered to srun before output is paused
EPILOG_WAIT = 5.0  # seconds a task epilog may run before it is killed (srun(1): "a few seconds")
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(slots=True)
class TaskStart:
    """One task as the agent prepared it: its recipe, its error pipe, the read ends of
    its output (fd -> frame kind) and the ends its child takes (closed here once forked)."""

    task: int
    spec: spawn.ChildSpec
    err: tuple[int, int]
    outputs: dict[int, bytes] = field(default_factory=dict)
    child_fds: tuple[int, ...] = ()


@dataclass(slots=True)
class StepFiles:
    """The supervisor's ends of the step's files: the log (append), the bell and the
    control FIFOs (both opened read-write, so neither side ever sees the other's end)."""

    log: int
    bell: int
    ctl: int


def run(node: str, files: StepFiles, starts: list[TaskStart], one_by_one: bool) -> NoReturn:
    """The supervisor (see the module docstring), in a freshly forked process."""
    try:
        _Supervisor(node, files, starts).run(one_by_one)
    finally:
        os._exit(0)


class _Supervisor:
    def __init__(self, node: str, files: StepFiles, starts: list[TaskStart]) -> None:
        self.node = node
        self.files = files
        self.starts = starts
        self.tasks = [Task(s.task, 0) for s in starts]
        self.by_pid: dict[int, Task] = {}
        self.specs: dict[int, spawn.ChildSpec] = {}  # a task's recipe, for its epilogs
        self.outputs: dict[int, tuple[Task, bytes]] = {}
        self.ended: set[int] = set()  # tasks whose x frame is written
        self.written = 0
        self.acked = 0
        self.ctl_buf = b""
        self.wake_r = -1

    # --- becoming the supervisor ---------------------------------------------------------

    def _detach(self) -> None:
        gc.disable()  # a collection would touch, and so copy, every page of the agent
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)  # the agent's event loop's: not ours
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        fn = monitor.prctl()
        if callable(fn):
            fn(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        wake_r, wake_w = os.pipe()
        keep = {self.files.log, self.files.bell, self.files.ctl, wake_r, wake_w}
        for s in self.starts:
            keep.update((*s.err, *s.outputs, *s.child_fds))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            if fd not in keep:
                os.dup2(null, fd)
        low = 3
        for fd in sorted(keep):  # the agent's sockets and lock go: a new agent takes them
            if fd >= low:
                os.closerange(low, fd)
                low = fd + 1
        os.closerange(low, os.sysconf("SC_OPEN_MAX"))
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select through wake_w
        self.wake_r = wake_r
        self.written = os.lseek(self.files.log, 0, os.SEEK_END)

    # --- the tasks -------------------------------------------------------------------------

    def run(self, one_by_one: bool) -> None:
        self._detach()
        # the tasks get back the signals ignored here (the agent's too: computed afresh)
        reset = spawn.ignored_signals()
        waiting: list[tuple[TaskStart, Task]] = []
        for s, t in zip(self.starts, self.tasks, strict=True):
            spec = dataclasses.replace(s.spec, reset=reset)
            pid = os.fork()
            if pid == 0:  # the task: never returns
                spawn.become(spec, s.err[1])
            t.pid = pid
            self.by_pid[pid] = t
            self.specs[pid] = spec
            for fd in (*s.child_fds, s.err[1]):
                os.close(fd)
            for fd, kind in s.outputs.items():
                os.set_blocking(fd, False)
                self.outputs[fd] = (t, kind)
            if one_by_one:  # it shares a file with the next: it has opened it before that starts
                self._started(s, t)
            else:
                waiting.append((s, t))
        for s, t in waiting:
            self._started(s, t)
        tasks = [[t.task, t.pid, t.start_ticks] for t in self.tasks]
        me = [os.getpid(), proctree.process_start_ticks(os.getpid())]
        self._append(json_frame(b"p", -1, {"tasks": tasks, "stepd": me}))
        self._loop()

    def _started(self, s: TaskStart, t: Task) -> None:
        """Wait for the task's exec (its error pipe closes) or its failure (said on the pipe)."""
        said = b""
        while True:
            try:
                chunk = os.read(s.err[0], 4096)
            except InterruptedError:
                continue
            if not chunk:
                break
            said += chunk
        os.close(s.err[0])
        t.start_ticks = proctree.process_start_ticks(t.pid)
        failed = spawn.failure(said)
        if failed is not None:
            self._append(frame(b"e", t.task, f"slurmstepd-{self.node}: error: {failed[1]}\n".encode()))

    # --- the loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        swept = False
        while len(self.ended) < len(self.tasks):
            watch = [self.wake_r, self.files.ctl]
            if self.written - self.acked <= HIGH_WATER:
                watch.extend(self.outputs)
            try:
                ready, _, _ = select.select(watch, [], [], 0.2 if swept else 5.0)
            except InterruptedError:
                ready = []
            if self.wake_r in ready:
                with contextlib.suppress(OSError):
                    os.read(self.wake_r, 4096)
            self._reap()
            if self.files.ctl in ready:
                self._control()
            for fd in ready:
                if fd in self.outputs:
                    self._read(fd)
            self._report()
            if not swept and all(t.status is not None for t in self.tasks):
                swept = True  # the last task ended: its sessions' and groups' leftovers go
                for t in self.tasks:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(t.pid, signal.SIGKILL)
            elif swept and not ready:
                self._sweep()  # a leftover that left its task's group still holds a pipe
        self._reap()

    def _reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            t = self.by_pid.get(pid)
            if t is None:
                continue  # an orphan of a task, reparented to us (the subreaper)
            t.usage = {"rss": usage.ru_maxrss, "user": round(usage.ru_utime, 3), "sys": round(usage.ru_stime, 3)}
            spec = self.specs.get(pid)
            mem = memacct.read(memacct.task_dirs(spec.cgroup_procs)) if spec is not None else None
            if mem is not None:  # confined: the task's cgroup's peak (all its processes), its OOM kills
                t.usage["rss"] = mem.peak_kb
                if mem.oom_kills:
                    t.usage["oom"] = mem.oom_kills
            if os.WIFSIGNALED(status):
                t.status = (0, os.WTERMSIG(status))
            else:
                t.status = (os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0, 0)
            self._epilogs(self.specs.pop(pid, None))

    def _epilogs(self, spec: spawn.ChildSpec | None) -> None:
        """A task that ended: its epilogs (srun --task-epilog, then TaskEpilog), each run as
        the task's user with its environment and directory, its output discarded, killed
        with its descendants after ``EPILOG_WAIT`` seconds."""
        if spec is None:
            return
        quiet = spawn.Stream(path=os.devnull, flags=os.O_RDWR, label=f"open(): {os.devnull}")
        for program in spec.task_epilogs:
            recipe = dataclasses.replace(
                spec,
                exe=program,
                argv=[program],
                stdin=quiet,
                stdout=quiet,
                stderr=quiet,
                close_first=(),
                close_after=(),
                terminal=None,
                make_dirs=(),
                cpus=None,
                bind_note=None,
                cwd_fallback=None,
                search_path=False,
                exec_as_root=False,
                hide=(),
                task_prologs=(),
                task_epilogs=(),
            )
            report_r, report_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the epilog: never returns
                os.close(report_r)
                spawn.become(recipe, report_w)
            os.close(report_w)
            os.close(report_r)
            try:
                handle = os.pidfd_open(pid)
                ended, _, _ = select.select([handle], [], [], EPILOG_WAIT)
                os.close(handle)
            except OSError:
                ended = [True]
            if not ended:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def _read(self, fd: int) -> None:
        t, kind = self.outputs[fd]
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: a terminal whose last holder closed it
            data = b""
        if data:
            self._append(frame(kind, t.task, data))
            return
        del self.outputs[fd]
        os.close(fd)

    def _report(self) -> None:
        """An ``x`` frame for each task that ended and whose output is all read."""
        held = {t.task for t, _ in self.outputs.values()}
        for t in self.tasks:
            if t.status is None or t.task in self.ended or t.task in held:
                continue
            self.ended.add(t.task)
            code, sig = t.status
            self._append(json_frame(b"x", t.task, {"code": code, "signal": sig, **(t.usage or {})}))

    def _sweep(self) -> None:
        try:
            members = step_members(proctree.read_proc(), self.tasks, exclude=os.getpid())
        except OSError:
            members = set()
        try:
            with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
                members.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
        for pid in members:
            kill_quietly(pid, signal.SIGKILL)

    # --- the agent's side --------------------------------------------------------------------

    def _control(self) -> None:
        try:
            data = os.read(self.files.ctl, 65536)
        except (BlockingIOError, InterruptedError):
            return
        self.ctl_buf += data
        *lines, self.ctl_buf = self.ctl_buf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
                if "ack" in msg:
                    self.acked = max(self.acked, int(msg["ack"]))
                if "emit" in msg:
                    kind, task, text = msg["emit"]
                    self._append(frame(str(kind).encode()[:1], int(task), str(text).encode()))
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # a line cut by a dying agent

    def _append(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.files.log, view)
                view = view[n:]
        except OSError:  # a full disk loses output, never the step; the log stays whole
            with contextlib.suppress(OSError):
                os.ftruncate(self.files.log, self.written)
            return
        self.written += len(data)
        with contextlib.suppress(OSError):
            os.write(self.files.bell, b"!")


def frames_in(data: bytes) -> tuple[list[tuple[bytes, int, bytes]], int]:
    """The whole frames at the start of ``data`` and how many bytes they take (a frame cut
    at the end is left for the next read). Raises ``ValueError`` on a malformed header."""
    out = []
    pos, n = 0, len(data)
    while pos < n:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        kind, task, length = data[pos:nl].split(b" ")
        end = nl + 1 + int(length)
        if end > n:
            break
        out.append((kind, int(task), data[nl + 1 : end]))
        pos = end
    return out, pos
