"""``PriorityUsageResetPeriod``: when fair-share usage starts again from nothing.

DAILY, WEEKLY, MONTHLY, QUARTERLY, YEARLY clear usage at each period's start, local time
(weeks start on Sunday, as in Slurm): usage then counts only what ran since
(``usage_epoch``). NOW clears it when the controller starts; NONE (the default) never.
The calendar is the controller's business (local time zone), so this lives in ``ctld``
while the usage itself is ``sched.fairshare.Usage``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from muster.core.config import ConfigError

RESET_PERIODS = ("NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY")


def parse_reset_period(text: str | None) -> str:
    """``PriorityUsageResetPeriod``'s value, upper case; ConfigError for an unknown one."""
    value = (text or "NONE").strip().upper()
    if value not in RESET_PERIODS:
        raise ConfigError(f"PriorityUsageResetPeriod={text!r} is not one of {', '.join(RESET_PERIODS)}")
    return value


def usage_epoch(period: str, now: float, started: float) -> float | None:
    """When the current reset period began (local time), None for NONE; ``started`` (the
    controller's start) for NOW."""
    if period == "NONE":
        return None
    if period == "NOW":
        return started
    t = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "WEEKLY":
        t -= timedelta(days=(t.weekday() + 1) % 7)  # back to Sunday
    elif period == "MONTHLY":
        t = t.replace(day=1)
    elif period == "QUARTERLY":
        t = t.replace(day=1, month=(t.month - 1) // 3 * 3 + 1)
    elif period == "YEARLY":
        t = t.replace(day=1, month=1)
    return t.timestamp()
