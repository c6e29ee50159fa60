"""A job suspended on this node (``scontrol suspend``/``resume``, ``POST /v1/suspend``):
its processes stopped where they stand and let go on, and its time limit kept fair.

* **How.** A node that tracks jobs by cgroup freezes the job's cgroup (v1
  ``freezer.state`` ``FROZEN``/``THAWED``, v2 ``cgroup.freeze`` 1/0): every process in it,
  its steps' tasks and whatever they forked, stops at once and nothing can fork its way
  out. A node without cgroups (``proctrack/linuxproc``) sends SIGSTOP to every process of
  the job it can find (the batch script's process tree, the tasks of its steps here) and
  SIGCONT to the same on resume. The kernel keeps either state: a job stays frozen (or
  stopped) while musterd restarts and the next agent resumes it.
* **Time.** ``account`` keeps, in the job's record the agent saves, when the current
  suspension began (``suspended_at``) and the seconds of earlier ones (``suspended_secs``);
  ``limits.deadline`` adds them, and no limit is enforced while the job is suspended:
  as in Slurm, time suspended does not count against the time limit.
* **Ending.** A job that is cancelled, requeued or killed while suspended is thawed first
  (``thaw_for_end``), so that its SIGTERM is seen and its processes can exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable, MutableMapping
from typing import Any

from muster.agent.cgroupfs import NodeCgroups

__all__ = ["account", "freeze", "signal_all", "thaw_for_end"]


def freeze(cgroups: NodeCgroups | None, job_id: int, on: bool) -> bool:
    """Freeze (``on``) or thaw the job's cgroup; False where it has none here."""
    if cgroups is None or not os.path.isdir(cgroups.job_dir(job_id)):
        return False
    cgroups.freeze(job_id, on)
    return True


def signal_all(pids: Iterable[int], on: bool) -> int:
    """SIGSTOP (``on``) or SIGCONT each process; how many were there to signal."""
    sig = signal.SIGSTOP if on else signal.SIGCONT
    sent = 0
    for pid in sorted(set(pids)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            sent += 1
    return sent


def account(job: MutableMapping[str, Any], on: bool, now: float) -> bool:
    """Note a suspension's start (``on``) or end in the job's record; False when nothing
    changed (a repeated request: the controller sends again what may not have arrived)."""
    since = job.get("suspended_at")
    if on:
        if since is not None:
            return False
        job["suspended_at"] = now
        return True
    if since is None:
        return False
    job["suspended_secs"] = float(job.get("suspended_secs") or 0.0) + max(0.0, now - float(since))
    job["suspended_at"] = None
    return True


def thaw_for_end(cgroups: NodeCgroups | None, job_id: int) -> None:
    """Before a job's end is carried out: a frozen cgroup could not act on its SIGTERM."""
    with contextlib.suppress(OSError):
        freeze(cgroups, job_id, False)
