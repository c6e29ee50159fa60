"""Pure rules about a job's end: time limits, ``--signal`` warnings, exit statuses.

* ``deadline(job, over_time)``: when the job must be stopped (start + limit + OverTimeLimit),
  or None for a job without a limit.
* ``parse_signal_spec("B:USR1@30")`` (from ``core.signals``): ``sbatch --signal``. ``B`` sends
  the warning to the batch shell only; without it the warning goes to every process of the
  job except the batch shell, and to its steps' tasks.
* ``exit_fields(status)``: a raw wait status as the report's ``(exit_code, signal)``:
  ``(WEXITSTATUS, 0)`` for an exit, ``(0, WTERMSIG)`` for a death by signal, as Slurm's
  ``ExitCode=code:signal``.
* ``banner(...)``: the line written into the job's error file when the agent stops it,
  worded like slurmstepd's so that people (and their greps) recognise it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from muster.core.signals import SignalSpec, parse_signal, parse_signal_spec

__all__ = ["SignalSpec", "banner", "deadline", "exit_fields", "parse_signal", "parse_signal_spec"]

_REASON_WORDS = {
    "timeout": " DUE TO TIME LIMIT",
    "node_fail": " DUE TO NODE FAILURE",
    "requeue": " DUE TO JOB REQUEUE",
    "preempt": " DUE TO PREEMPTION",
}


def deadline(job: Mapping[str, Any], started_at: float, over_time: float = 0.0) -> float | None:
    """Epoch second at which the job has used up its time limit; None when unlimited. The
    seconds it spent suspended (``scontrol suspend``: ``agent.suspend``) are not counted."""
    limit = job.get("time_limit")
    if limit is None:
        return None
    start = job.get("start_time")
    base = float(start) if start is not None else started_at
    return base + float(limit) + over_time + float(job.get("suspended_secs") or 0.0)


def exit_fields(status: int) -> tuple[int, int]:
    if os.WIFSIGNALED(status):
        return 0, os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), 0
    return 0, 0


def banner(node: str, job_id: int, reason: str, when: str) -> str:
    """Slurm's line: ``slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT <when> DUE TO
    TIME LIMIT ***`` (the prefix is slurmstepd's, as log parsers and users grep for it)."""
    return f"slurmstepd: error: *** JOB {job_id} ON {node} CANCELLED AT {when}{_REASON_WORDS.get(reason, '')} ***\n"
