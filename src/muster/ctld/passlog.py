"""One log line per scheduling pass, with its id, its phase times and its counts.

A pass that started a job, or whose counts differ from the pass before (a job arrived,
was planned, blocked or set aside), is logged at INFO; a pass like the one before (an
empty queue, or the same jobs waiting for the same reasons) at INFO at most once a minute,
otherwise at DEBUG, so a steady controller does not fill its log with one line every
``SchedulerInterval``. With
``LogFormat=json`` the same figures travel as fields (``pass_id``, ``seconds``,
``phases``, ``counts``).
"""

from __future__ import annotations

import logging

from muster.core.clock import Clock
from muster.sched.decisions import PassStats

__all__ = ["IDLE_EVERY", "PassLog"]

log = logging.getLogger("musterctld.sched")

IDLE_EVERY = 60.0  # seconds between two INFO lines for idle passes
_COUNTS = ("pending_seen", "examined", "started", "backfilled", "planned", "ineligible", "blocked")


class PassLog:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._last_idle: float | None = None
        self._last_counts: dict[str, int] | None = None

    def log(self, pass_id: int, stats: PassStats, seconds: float) -> int:
        """Log the pass; returns the level used."""
        counts = {name: getattr(stats, name) for name in _COUNTS}
        busy = bool(stats.started) or counts != self._last_counts
        self._last_counts = counts
        level = logging.INFO if busy else logging.DEBUG
        if not busy:
            mono = self.clock.monotonic()
            if self._last_idle is None or mono - self._last_idle >= IDLE_EVERY:
                self._last_idle = mono
                level = logging.INFO
        if not log.isEnabledFor(level):
            return level
        phases = {name: round(secs * 1000, 3) for name, secs in sorted(stats.phase_seconds.items())}
        log.log(
            level,
            "pass %d: %.2f ms (%s); %s",
            pass_id,
            seconds * 1000,
            " ".join(f"{k} {v:.2f}" for k, v in phases.items()),
            " ".join(f"{k}={v}" for k, v in counts.items()),
            extra={
                "pass_id": pass_id,
                "fields": {"seconds": round(seconds, 6), "phases_ms": phases, "counts": counts},
            },
        )
        return level
