"""A job step as this node runs it: its tasks (pid, stdin, end), its run state
(``agent.runstate``), its supervisor and the files it shares with it, its record on disk,
and which processes are its.

``Step`` and ``Task`` are the step runner's records (``agent.steps``); ``task_members``
and ``step_members`` are pure walks over a ``/proc`` snapshot (``agent.proctree``) that
find a task's processes without ever naming a stranger that reused a pid; ``record_key`` names a step's
record on disk (``StateDir.save_step``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from muster.agent import proctree, runstate
from muster.agent.runstate import RunEvent, RunState, advance, live

__all__ = ["Step", "Task", "close_quietly", "record_key", "step_members", "task_members"]


@dataclass(slots=True)
class Task:
    task: int
    local: int
    pid: int = 0
    start_ticks: int | None = None  # tells our task from a later process given its pid
    status: tuple[int, int] | None = None  # (exit code, signal) once reaped
    stdin_fd: int | None = None
    pty: bool = False  # its stdin_fd is a terminal's master (srun --pty)
    usage: dict[str, float] | None = None  # getrusage when reaped: rss (KB), user, sys (s)


@dataclass(slots=True)
class Step:
    job_id: int
    attempt: int
    step_id: int
    uid: int
    node: str
    token: str
    kill_wait: float
    interactive: bool = False  # the job is srun's or salloc's (no batch script)
    tasks: list[Task] = field(default_factory=list)
    # its run state (``agent.runstate``) and the reason of TERMINATING: set by ``advance``,
    # ``stop`` and ``step_from_record`` only (tests/test_architecture.py checks it)
    state: RunState = field(default=RunState.LAUNCHING, init=False)
    terminated: str | None = field(default=None, init=False)
    kill_handle: asyncio.TimerHandle | None = None
    pinned: bool = False  # holds the job's CPUs in the ledger
    time_limit: float | None = None  # ``srun -t`` inside an allocation: the step's own limit
    limit_at: float | None = None  # when that limit is reached (wall clock, for a restarted agent)
    limit_left: float | None = None  # its job suspended (``scontrol suspend``): the limit's seconds left
    limit_handle: asyncio.TimerHandle | None = None
    noted: bool = False  # its record is on disk (StateDir.save_step)
    orphaned: bool = False  # srun's stream is gone: the agent reports the step's end itself
    job: dict[str, Any] = field(default_factory=dict)  # what the Prolog/Epilog are told
    # its supervisor (``agent.stepd``) and the files it shares with the agent
    stepd_pid: int = 0
    stepd_ticks: int | None = None
    stepd_gone: bool = False  # the supervisor has exited (or was lost)
    log_fd: int = -1  # the step's log, read here
    bell_fd: int = -1  # rings when the log grows
    ctl_fd: int = -1  # the agent's lines to the supervisor
    pidfd: int = -1  # the supervisor's, readable once it exits
    scan_pos: int = 0  # bytes of the log read here (whole frames only)
    started: bool = False  # the log's ``p`` frame is read: the tasks' pids are known
    attached: int = 0  # srun streams open on the step here
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    claim_handle: asyncio.TimerHandle | None = None  # a taken-back step waits for its srun

    @property
    def finished(self) -> bool:
        """Every task here ended and its output is in the log."""
        return self.state in (RunState.ENDED, RunState.REPORTED)

    @property
    def name(self) -> str:
        return f"step {self.id_text} on {self.node}"

    def advance(self, event: RunEvent) -> None:
        """One move of its run state (a stop goes through ``stop``, which says why); a
        refused move (``IllegalRunTransition``, or an invariant broken) changes nothing."""
        if event is RunEvent.STOP:
            raise ValueError(f"{self.name}: a stop goes through Step.stop(reason)")
        before, self.state = self.state, advance(self.name, self.state, event)
        try:
            self.check()
        except AssertionError:
            self.state = before
            raise

    def stop(self, reason: str) -> bool:
        """-> TERMINATING for ``reason``; the first reason given wins. True for the first
        (then the runner sends TERM and arms the SIGKILL)."""
        after = advance(self.name, self.state, RunEvent.STOP)  # refused: nothing changes
        first = self.state is not RunState.TERMINATING
        if first:
            self.terminated = reason
        self.state = after
        self.check()
        return first

    def check(self) -> None:
        """The invariants of a step's run (``runstate.check``; an ended step knows every
        task's end) and: a reason to stop only once stopped."""
        statuses: list[object | None] = [] if live(self.state) else [t.status for t in self.tasks]
        runstate.check(self.name, self.state, reason=self.terminated, statuses=statuses)
        if self.terminated is not None and self.state in (RunState.LAUNCHING, RunState.RUNNING):
            raise AssertionError(f"{self.name}: {self.state} with a reason to stop ({self.terminated})")

    def wake(self) -> None:
        """Wake whoever waits for the step's log to grow or its end (``changed``)."""
        waiters, self.waiters = self.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def changed(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        await fut

    @property
    def key(self) -> tuple[int, int]:
        return (self.job_id, self.step_id)

    @property
    def id_text(self) -> str:
        return f"{self.job_id}.{self.step_id}"


def task_members(procs: Mapping[int, proctree.ProcInfo], children: Mapping[int, list[int]], task: Task) -> set[int]:
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


def step_members(procs: Mapping[int, proctree.ProcInfo], tasks: list[Task], exclude: int = 0) -> set[int]:
    """The processes of a step's tasks (``task_members`` of each), never pid 1 nor
    ``exclude`` (the agent itself)."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out: set[int] = set()
    for t in tasks:
        out |= task_members(procs, children, t)
    out -= {exclude, 1}
    return out


def record_key(step: Step) -> str:
    return f"{step.job_id}.{step.attempt}.{step.step_id}"


def close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


# The words of the CANCELLED line a stopped step's node writes, by why it stopped.
REASON_WORDS = {
    "timeout": " DUE TO TIME LIMIT",
    "node_fail": " DUE TO NODE FAILURE",
    "requeue": " DUE TO JOB REQUEUE",
    "preempt": " DUE TO PREEMPTION",
    "shutdown": " DUE TO MUSTERD SHUTDOWN",
}


def kill_quietly(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def step_from_record(rec: dict[str, Any], node: str) -> tuple[Step, list[Task]]:
    """A step a previous agent noted on disk (``StateDir.save_step``), and its tasks: its
    pids for a record of an agent older than the step supervisor (``"stepd"`` absent), the
    tasks' numbers otherwise (their pids are in the step's log). Raises KeyError,
    TypeError or ValueError for a malformed record. A supervised step comes back RUNNING, or
    TERMINATING when it was being stopped."""
    step = Step(int(rec["job_id"]), int(rec["attempt"]), int(rec["step_id"]), -1, node, "", 0.0)
    if not rec.get("stepd"):
        tasks = [Task(int(t), 0, int(pid), None if ticks is None else int(ticks)) for t, pid, ticks in rec["tasks"]]
        return step, tasks
    step.uid = int(rec["uid"])
    step.token = str(rec["token"])
    step.kill_wait = float(rec["kill_wait"])
    step.interactive = bool(rec.get("interactive"))
    step.job = dict(rec.get("job") or {})
    step.terminated = rec.get("terminated") or None
    # taken back in the state its record says (a restart invents no edge)
    step.state = RunState.RUNNING if step.terminated is None else RunState.TERMINATING
    step.limit_at = None if rec.get("limit_at") is None else float(rec["limit_at"])
    step.limit_left = None if rec.get("limit_left") is None else float(rec["limit_left"])
    step.orphaned = bool(rec.get("orphaned"))
    step.stepd_pid = int(rec.get("stepd_pid") or 0)
    step.stepd_ticks = None if rec.get("stepd_ticks") is None else int(rec["stepd_ticks"])
    tasks = [Task(int(t), int(local)) for t, local in rec["tasks"]]
    return step, tasks


def step_record(step: Step) -> dict[str, Any]:
    """What is noted on disk of a running step, for an agent restarted after this one
    (the tasks' pids and ends are in the step's log, written by its supervisor)."""
    return {
        "stepd": 1,
        "job_id": step.job_id,
        "attempt": step.attempt,
        "step_id": step.step_id,
        "uid": step.uid,
        "token": step.token,
        "kill_wait": step.kill_wait,
        "interactive": step.interactive,
        "job": step.job,
        "tasks": [[t.task, t.local] for t in step.tasks],
        "terminated": step.terminated,
        "limit_at": step.limit_at,
        "limit_left": step.limit_left,
        "orphaned": step.orphaned,
        "stepd_pid": step.stepd_pid,  # its supervisor (its ``p`` frame says it too)
        "stepd_ticks": step.stepd_ticks,
    }
