"""A batch script the agent runs, as it keeps it in memory and on disk, and the report of
its end.

``Tracked`` is the supervisor's record of one running attempt, whose life is one run state
(``agent.runstate``: LAUNCHING, RUNNING, TERMINATING, ENDED). The state and the facts that
belong to its moves (the pid once started; the reason and the SIGKILL time of TERMINATING)
change only through its transitions (``begin``, ``stop``, ``launch_failed``, ``exited``),
each of which checks the invariant (``check``); a refused move (``IllegalRunTransition``)
changes nothing. ``record()`` (as JSON:
``record_text()``) is what ``StateDir.save_job`` writes and ``Tracked.adopted_from`` what a restarted agent reads back
(see ``agent.supervisor``). ``report_body`` and ``end_report`` build the ``job_done`` report
the controller link delivers (``agent.link``): the node, the attempt, its exit code and
signal, who ended it (``terminated_by``) and, when they apply, why (``reason``), whose fault
a failed launch was (``launch_failure``) and the script's resource use (``usage``). Pure:
nothing here reads a clock or touches the disk.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from muster.agent import launcher, runstate
from muster.agent.runstate import RunEvent, RunState, advance

__all__ = ["LOST_STATUS", "Tracked", "cpus_on", "end_report", "report_body"]

LOST_STATUS = "exit status lost: musterd restarted while the job ran"


@dataclass(slots=True)
class Tracked:
    job_id: int
    restart_count: int
    job: dict[str, Any]
    uid: int
    kill_wait: float
    started_at: float
    start_ticks: int | None = None
    warned: bool = False  # the --signal warning was sent for the current time limit
    stderr_path: str | None = None
    pinned: bool = False  # holds CPUs in the ledger
    monitored: bool = False  # started through a monitor that records its exit status
    started: launcher.Started | None = field(default=None, repr=False)  # this agent's launch
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    job_text: str = field(default="", repr=False)  # ``job`` as JSON; "" once it changes
    # Set by the transitions below only (tests/test_architecture.py checks it):
    state: RunState = field(default=RunState.LAUNCHING, init=False)  # ``agent.runstate``
    pid: int | None = field(default=None, init=False)  # the script's (its group's) once started
    adopted: bool = field(default=False, init=False)  # taken back from a previous agent
    terminated_by: str | None = field(default=None, init=False)  # the reason of TERMINATING
    kill_at: float | None = field(default=None, init=False)  # monotonic: SIGKILL from then on

    @property
    def name(self) -> str:
        return f"job {self.job_id} attempt {self.restart_count}"

    def _move(self, event: RunEvent) -> None:
        self.state = advance(self.name, self.state, event)
        self.check()

    def begin(self, pid: int, start_ticks: int | None) -> None:
        """LAUNCHING -> RUNNING: its monitor forked the script as ``pid``."""
        after = advance(self.name, self.state, RunEvent.STARTED)
        self.pid, self.start_ticks, self.monitored, self.state = pid, start_ticks, True, after
        self.check()

    def launch_failed(self) -> None:
        """LAUNCHING -> ENDED: nothing was started."""
        self._move(RunEvent.LAUNCH_FAILED)

    def stop(self, reason: str, kill_at: float) -> bool:
        """-> TERMINATING for ``reason``, SIGKILL from ``kill_at`` (monotonic). The first
        reason given wins; a later stop only brings the SIGKILL nearer. True for the first."""
        after = advance(self.name, self.state, RunEvent.STOP)
        first = self.state is not RunState.TERMINATING
        if first:
            self.terminated_by, self.kill_at = reason, kill_at
        else:
            assert self.kill_at is not None
            self.kill_at = min(self.kill_at, kill_at)
        self.state = after
        self.check()
        return first

    def exited(self) -> None:
        """-> ENDED: the script ended (or is known gone)."""
        self._move(RunEvent.EXITED)

    def check(self) -> None:
        """The invariants of a batch run (``runstate.check``, and): a running one has its
        pid; a stopping one its reason and SIGKILL time; a reason only once stopped."""
        runstate.check(self.name, self.state, reason=self.terminated_by, statuses=[])
        if self.state is RunState.RUNNING and self.pid is None:
            raise AssertionError(f"{self.name}: RUNNING without a pid")
        if self.state is RunState.TERMINATING and self.kill_at is None:
            raise AssertionError(f"{self.name}: TERMINATING without a SIGKILL time")
        if self.terminated_by is not None and self.state in (RunState.LAUNCHING, RunState.RUNNING):
            raise AssertionError(f"{self.name}: {self.state} with a reason to stop ({self.terminated_by})")

    def record(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "restart_count": self.restart_count,
            "pid": self.pid,
            "pgid": self.pid,
            "start_ticks": self.start_ticks,
            "uid": self.uid,
            "kill_wait": self.kill_wait,
            "started_at": self.started_at,
            "terminated_by": self.terminated_by,
            "warned": self.warned,
            "stderr_path": self.stderr_path,
            "monitored": self.monitored,
            "job": self.job,
        }

    def record_text(self) -> str:
        """``record()`` as JSON, with ``job`` encoded once for all the saves of this run
        (it is most of the record; whoever changes ``job`` empties ``job_text``)."""
        if not self.job_text:
            self.job_text = json.dumps(self.job, separators=(",", ":"))
        head = self.record()
        del head["job"]
        return json.dumps(head, separators=(",", ":"))[:-1] + ',"job":' + self.job_text + "}"

    @classmethod
    def adopted_from(
        cls, rec: Mapping[str, Any], job_id: int, attempt: int, kill_wait: float, now: float, mono: float
    ) -> Tracked:
        """The record a previous agent saved (``record()``), for a restarted agent: RUNNING,
        TERMINATING (SIGKILL after its grace from ``mono`` on) when it was being stopped,
        LAUNCHING when saved before its fork. A restart invents no edge: the record says."""
        t = cls(
            job_id=job_id,
            restart_count=attempt,
            job=dict(rec.get("job") or {"job_id": job_id}),
            uid=int(rec.get("uid", -1)),
            kill_wait=float(rec.get("kill_wait") or kill_wait),
            started_at=float(rec.get("started_at") or now),
            start_ticks=rec.get("start_ticks"),
            warned=bool(rec.get("warned")),
            stderr_path=rec.get("stderr_path"),
            monitored=bool(rec.get("monitored")),
        )
        t.pid, t.adopted = rec.get("pid"), True
        reason = rec.get("terminated_by")
        if t.pid is None:  # saved before the fork: it got no further with that agent
            t.state = RunState.LAUNCHING
        elif reason is None:
            t.state = RunState.RUNNING
        else:
            t.state, t.terminated_by, t.kill_at = RunState.TERMINATING, str(reason), mono + t.kill_wait
        t.check()
        return t


def report_body(
    node: str,
    job_id: int,
    restart_count: int,
    exit_code: int,
    sig: int,
    terminated_by: str | None,
    start: float,
    end: float,
) -> dict[str, Any]:
    return {
        "node": node,
        "job_id": job_id,
        "restart_count": restart_count,
        "exit_code": exit_code,
        "signal": sig,
        "terminated_by": terminated_by,
        "start_time": start,
        "end_time": end,
    }


def end_report(
    node: str,
    t: Tracked,
    exit_code: int,
    sig: int,
    terminated_by: str | None,
    end: float,
    reason: str | None = None,
    usage: dict[str, float] | None = None,
    launch_failure: str | None = None,
) -> dict[str, Any]:
    """The report of ``t``'s end (or of its failed launch)."""
    report = report_body(node, t.job_id, t.restart_count, exit_code, sig, terminated_by, t.started_at, end)
    if reason:
        report["reason"] = reason
    if launch_failure:
        report["launch_failure"] = launch_failure  # whose fault: "node", "job", "stale"
    if usage:
        report["usage"] = usage  # the batch script's max RSS and CPU seconds (sacct)
    return report


def cpus_on(job: dict[str, Any], node: str) -> int:
    """The CPUs the job was allocated on ``node`` (1 when the record does not say)."""
    for a in job.get("alloc") or []:
        if a.get("node") == node:
            return int(a.get("cpus") or 1)
    return 1
