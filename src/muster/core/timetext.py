"""Slurm's time texts for output: durations (``1-02:03:04``), time limits and timestamps.

The formatting half of ``muster.core.timefmt`` (which re-exports it), apart so that the
commands that print times (squeue, sinfo, scontrol) import neither the parsers nor the
errors they raise: start-up time. Pure: a timestamp is formatted from the epoch given.
"""

# No ``from __future__ import annotations``: the commands that print times import this
# module, and ``__future__`` would cost them ~0.1 ms.
import time


def format_duration(seconds: int | float | None) -> str:
    """squeue/sinfo style: ``0:00``, ``12:34``, ``1:02:03``, ``2-03:04:05``, ``UNLIMITED``."""
    return _clock(seconds, hours_always=False)


def format_hms(seconds: int | float | None) -> str:
    """scontrol/sacct style: ``00:00:03``, ``01:00:00``, ``1-02:03:04``, ``UNLIMITED``."""
    return _clock(seconds, hours_always=True)


def _clock(seconds: int | float | None, hours_always: bool) -> str:
    if seconds is None:
        return "UNLIMITED"
    if seconds < 0:
        return "INVALID"
    days, hours, minutes, secs = _split(int(seconds))
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours_always:
        return f"{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def format_sinfo_limit(seconds: int | float | None) -> str:
    """sinfo TIMELIMIT: ``infinite`` for no limit, otherwise like ``format_duration``."""
    return "infinite" if seconds is None else format_duration(seconds)


def format_timestamp(epoch: float | None, none: str = "Unknown") -> str:
    """``2026-12-02T15:58:47`` in local time; ``none`` (default ``Unknown``) for None or 0."""
    if not epoch:
        return none
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def _split(seconds: int) -> tuple[int, int, int, int]:
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return days, hours, minutes, secs
