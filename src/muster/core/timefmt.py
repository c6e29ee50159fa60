"""Slurm's time formats: time limits, durations, timestamps and ``--begin`` times.

Contracts:

* Durations are whole seconds (``int``); ``None`` means no limit (Slurm's INFINITE).
* Nothing here reads the clock: ``parse_timestamp`` takes ``now`` and the formatters take
  the value to show. Calendar conversions use the process's local time zone, as Slurm does.
* Bad input raises ``TimeFormatError`` whose message names the offending text.
"""

from __future__ import annotations

import time

from muster.core.errors import InvalidRequest
from muster.core.timetext import (  # noqa: F401 - re-exported: timefmt is where callers look
    format_duration,
    format_hms,
    format_sinfo_limit,
    format_timestamp,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re

__all__ = [
    "MAX_TIME_LIMIT",
    "TimeFormatError",
    "format_duration",
    "format_hms",
    "format_sinfo_limit",
    "format_timestamp",
    "parse_time_limit",
    "parse_timestamp",
]

# The longest time limit Slurm can hold: its minutes in a 32-bit signed integer
# (``--time=99999999999`` is refused: "Invalid time limit specification").
MAX_TIME_LIMIT = (2**31 - 1) * 60

_UNLIMITED_WORDS = frozenset({"unlimited", "infinite", "-1"})

# Patterns are kept as strings and compiled on first use (re caches compiled patterns):
# compiling them at import would cost each CLI start-up a few milliseconds.
# Slurm's --time forms; the first field may be any size ("90" minutes, "36:00:00").
_LIMIT_RE = r"^(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)$"

_DAY = 86400
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": _DAY, "week": 7 * _DAY}
_NOW_RE = r"^now(?:([+-])(\d+)([a-z]*))?$"
_CLOCK_RE = r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(am|pm)?$"
_ISO_RE = r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:t(\d{1,2}):(\d{2})(?::(\d{2}))?)?$"
_SLASH_RE = r"^(\d{1,2})([/.])(\d{1,2})(?:\2(\d{2}|\d{4}))?$"
_MMDDYY_RE = r"^(\d{2})(\d{2})(\d{2})?$"
# A date and a time of day in one word, joined by "T" or "-" ("1970-01-01-00:00:01",
# "12/24-10:00", "2026-01-05T10:00"): the time is the part after the last such joint.
_JOINED_RE = r"^(.+)[t-](\d{1,2}:\d{2}(?::\d{2})?(?:am|pm)?)$"
# Slurm's named times of day (the last three come from at(1) folklore).
_NAMED_TIMES = {"midnight": 0, "elevenses": 11, "noon": 12, "fika": 15, "teatime": 16}


class TimeFormatError(InvalidRequest, ValueError):
    """A time limit, duration or timestamp that Slurm's grammar does not accept."""


def parse_time_limit(text: str) -> int | None:
    """Parse a Slurm ``--time`` value into seconds; ``None`` for UNLIMITED/INFINITE/-1.

    Accepted: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``. Fields after the
    first are not range checked (Slurm reads ``1:90:00`` as 2.5 hours). ``0`` is returned as
    0: whether zero means "no limit" is the caller's rule, not the grammar's.
    """
    import re  # on first use: it costs a command's start-up milliseconds

    value = text.strip()
    if value.lower() in _UNLIMITED_WORDS:
        return None
    m = re.compile(_LIMIT_RE).match(value)
    if m is None:
        raise TimeFormatError(f"Invalid time specification {text!r}")
    days, d_hours, d_minutes, d_seconds, first, second, third = m.groups()
    if days is not None:
        return int(days) * _DAY + int(d_hours) * 3600 + int(d_minutes or 0) * 60 + int(d_seconds or 0)
    if third is not None:  # H:M:S
        return int(first) * 3600 + int(second) * 60 + int(third)
    if second is not None:  # M:S
        return int(first) * 60 + int(second)
    return int(first) * 60  # M


def parse_timestamp(text: str, now: float, *, past: bool = False) -> float:
    """Parse a Slurm ``--begin``-style time into an epoch, relative to ``now``.

    Accepted (case-insensitive): ``now``, ``now+N[unit]`` / ``now-N[unit]`` with unit one of
    seconds (default), minutes, hours, days, weeks (singular or plural); ``HH:MM[:SS]`` with
    an optional AM/PM; ``midnight``, ``elevenses``, ``noon``, ``fika``, ``teatime``;
    ``today``, ``tomorrow``; ``YYYY-MM-DD[THH:MM[:SS]]``; ``MM/DD[/YY]``, ``MM.DD[.YY]``,
    ``MMDD[YY]``. A date and a time of day may be given together, separated by a space
    (``tomorrow 10:00``, ``teatime 12/24``), or joined to a date by ``T`` or ``-``
    (``1970-01-01T00:00:01``, ``1970-01-01-00:00:01``, ``12/24-10:00``, ``122426-10:00``).

    A time of day without a date means the next such moment: today, or tomorrow if it has
    passed. A date without a year means this year, or next year if that day has passed.
    A date without a time means its midnight. With ``past`` (sacct's ``-S``/``-E``, which
    look back) both rules look back instead: the last such moment, today's or yesterday's,
    and this year or last year.
    """
    import re  # on first use: it costs a command's start-up milliseconds

    raw = text
    text = text.strip().lower()
    if not text:
        raise TimeFormatError("Invalid time specification: empty")
    m = re.compile(_NOW_RE).match(text)
    if m is not None:
        return _parse_now(m, raw, now)

    words = []
    for word in text.split():
        joined = re.compile(_JOINED_RE).match(word)
        if joined is not None and joined.group(1) not in _NAMED_TIMES:
            words += [joined.group(1), joined.group(2)]
        else:
            words.append(word)
    date: tuple[int, int, int] | None = None  # (year, month, day); year -1 = unspecified
    clock: tuple[int, int, int] | None = None
    if len(words) > 2:
        raise TimeFormatError(f"Invalid time specification {raw!r}")
    for word in words:
        parsed_clock = _parse_clock(word)
        if parsed_clock is not None and clock is None:
            clock = parsed_clock
            continue
        iso = re.compile(_ISO_RE).match(word)
        if iso is not None and date is None and (clock is None or iso.group(4) is None):
            y, mo, d, hh, mm, ss = iso.groups()
            date = (int(y), int(mo), int(d))
            if hh is not None:
                clock = (int(hh), int(mm), int(ss or 0))
            continue
        parsed_date = _parse_date(word, now)
        if parsed_date is not None and date is None:
            date = parsed_date
            continue
        raise TimeFormatError(f"Invalid time specification {raw!r}")
    return _resolve(date, clock, now, raw, past)


def _parse_now(m: re.Match[str], raw: str, now: float) -> float:
    sign, count, unit = m.groups()
    if sign is None:
        return now
    factor = 1
    if unit:
        factor = _UNIT_SECONDS.get(unit[:-1] if unit.endswith("s") else unit, 0)
        if not factor:
            raise TimeFormatError(
                f"Invalid time specification {raw!r}: unknown unit {unit!r} "
                "(use seconds, minutes, hours, days or weeks)"
            )
    offset = int(count) * factor
    return now + offset if sign == "+" else now - offset


def _parse_clock(word: str) -> tuple[int, int, int] | None:
    """``HH:MM[:SS][am|pm]`` or a named time of day; None if the word is not one."""
    import re  # on first use: it costs a command's start-up milliseconds

    if word in _NAMED_TIMES:
        return (_NAMED_TIMES[word], 0, 0)
    m = re.compile(_CLOCK_RE).match(word)
    if m is None:
        return None
    hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    meridiem = m.group(4)
    if meridiem:
        if not 1 <= hour <= 12:
            raise TimeFormatError(f"Invalid time specification {word!r}: hour out of range")
        hour = hour % 12 + (12 if meridiem == "pm" else 0)
    return (hour, minute, second)


def _parse_date(word: str, now: float) -> tuple[int, int, int] | None:
    """A date word as (year, month, day), year -1 when not given; None if not a date."""
    import re  # on first use: it costs a command's start-up milliseconds

    today = time.localtime(now)
    if word == "today":
        return (today.tm_year, today.tm_mon, today.tm_mday)
    if word == "tomorrow":
        # Calendar arithmetic through mktime, so a DST change cannot skip or repeat a day.
        t = time.localtime(time.mktime((today.tm_year, today.tm_mon, today.tm_mday + 1, 12, 0, 0, 0, 0, -1)))
        return (t.tm_year, t.tm_mon, t.tm_mday)
    m = re.compile(_SLASH_RE).match(word)
    if m is not None:
        month, day, year = m.group(1), m.group(3), m.group(4)
    else:
        m = re.compile(_MMDDYY_RE).match(word)
        if m is None:
            return None
        month, day, year = m.group(1), m.group(2), m.group(3)
    if year is None:
        return (-1, int(month), int(day))
    full_year = int(year) + (2000 if len(year) == 2 else 0)
    return (full_year, int(month), int(day))


def _resolve(
    date: tuple[int, int, int] | None,
    clock: tuple[int, int, int] | None,
    now: float,
    raw: str,
    past: bool = False,
) -> float:
    hour, minute, second = clock if clock is not None else (0, 0, 0)
    if not (0 <= hour <= 23 and 0 <= minute <= 59 and 0 <= second <= 59):
        raise TimeFormatError(f"Invalid time specification {raw!r}: time of day out of range")
    today = time.localtime(now)
    if date is None:
        # A bare time of day: the next time the clock shows it.
        when = _mktime(today.tm_year, today.tm_mon, today.tm_mday, hour, minute, second, raw)
        if past and when > now:
            when = _mktime(today.tm_year, today.tm_mon, today.tm_mday - 1, hour, minute, second, raw)
        elif not past and when < now:
            when = _mktime(today.tm_year, today.tm_mon, today.tm_mday + 1, hour, minute, second, raw)
        return when
    year, month, day = date
    if not (1 <= month <= 12 and 1 <= day <= 31):
        raise TimeFormatError(f"Invalid time specification {raw!r}: date out of range")
    if year == -1:
        year = today.tm_year
        if past and (month, day) > (today.tm_mon, today.tm_mday):
            year -= 1
        elif not past and (month, day) < (today.tm_mon, today.tm_mday):
            year += 1
    _check_day_exists(year, month, day, raw)
    return _mktime(year, month, day, hour, minute, second, raw)


def _check_day_exists(year: int, month: int, day: int, raw: str) -> None:
    # mktime silently normalises Feb 30 to Mar 2; a user who typed it made a mistake.
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days_in_month = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    if day > days_in_month[month - 1]:
        raise TimeFormatError(f"Invalid time specification {raw!r}: no such day")


def _mktime(year: int, month: int, day: int, hour: int, minute: int, second: int, raw: str) -> float:
    try:
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    except (OverflowError, ValueError) as exc:
        raise TimeFormatError(f"Invalid time specification {raw!r}: {exc}") from None
