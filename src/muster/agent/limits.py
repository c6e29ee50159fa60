"""Pure rules about a job's end: time limits, ``--signal`` warnings, exit statuses.

* ``deadline(job, over_time)``: when the job must be stopped (start + limit + OverTimeLimit),
  or None for a job without a limit.
* ``parse_signal_spec("B:USR1@30")``: ``sbatch --signal=[{R|B}:]SIG[@TIME]``; TIME defaults
  to 60 s as in Slurm. ``B`` sends the warning to the batch shell only; without it the
  warning goes to every process of the job except the batch shell (where Slurm would
  signal the job's steps: under muster those are the batch shell's children).
* ``exit_fields(status)``: a raw wait status as the report's ``(exit_code, signal)``:
  ``(WEXITSTATUS, 0)`` for an exit, ``(0, WTERMSIG)`` for a death by signal, as Slurm's
  ``ExitCode=code:signal``.
* ``banner(...)``: the line written into the job's error file when the agent stops it,
  worded like slurmstepd's so that people (and their greps) recognise it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SignalSpec", "banner", "deadline", "exit_fields", "parse_signal", "parse_signal_spec"]

DEFAULT_WARN_SECONDS = 60

_REASON_WORDS = {
    "timeout": " DUE TO TIME LIMIT",
    "node_fail": " DUE TO NODE FAILURE",
    "requeue": " DUE TO JOB REQUEUE",
    "preempt": " DUE TO PREEMPTION",
}


@dataclass(frozen=True, slots=True)
class SignalSpec:
    signal: int
    seconds: int = DEFAULT_WARN_SECONDS
    batch_only: bool = False


def parse_signal(text: str | int) -> int:
    """``USR1``, ``SIGUSR1``, ``10`` -> 10. Raises ValueError on anything else."""
    if isinstance(text, int):
        number = text
    else:
        t = text.strip().upper()
        if t.isdigit():
            number = int(t)
        else:
            name = t if t.startswith("SIG") else f"SIG{t}"
            try:
                number = int(signal.Signals[name])
            except KeyError:
                raise ValueError(f"invalid signal {text!r}") from None
    if not 0 < number < signal.NSIG:
        raise ValueError(f"invalid signal {text!r}")
    return number


def parse_signal_spec(text: str | None) -> SignalSpec | None:
    if not text:
        return None
    flags, sep, rest = text.partition(":")
    if not sep:
        flags, rest = "", text
    if flags and set(flags.upper()) - {"B", "R"}:
        raise ValueError(f"invalid --signal specification {text!r}")
    name, at, secs = rest.partition("@")
    seconds = DEFAULT_WARN_SECONDS
    if at:
        if not secs.strip().isdigit():
            raise ValueError(f"invalid --signal specification {text!r}")
        seconds = int(secs)
    return SignalSpec(parse_signal(name), seconds, "B" in flags.upper())


def deadline(job: Mapping[str, Any], started_at: float, over_time: float = 0.0) -> float | None:
    """Epoch second at which the job has used up its time limit; None when unlimited."""
    limit = job.get("time_limit")
    if limit is None:
        return None
    start = job.get("start_time")
    base = float(start) if start is not None else started_at
    return base + float(limit) + over_time


def exit_fields(status: int) -> tuple[int, int]:
    if os.WIFSIGNALED(status):
        return 0, os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), 0
    return 0, 0


def banner(node: str, job_id: int, reason: str, when: str) -> str:
    return f"musterd-{node}: error: *** JOB {job_id} ON {node} CANCELLED AT {when}{_REASON_WORDS.get(reason, '')} ***\n"
