"""Slurm time formats: --time limits, displayed durations, timestamps and --begin times.

Calendar cases are written in local time and converted with ``time.mktime`` so they hold
in any time zone the tests run in.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from muster.core.timefmt import (
    TimeFormatError,
    format_duration,
    format_hms,
    format_sinfo_limit,
    format_timestamp,
    parse_time_limit,
    parse_timestamp,
)


def local(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))


# 2026-12-02T15:58:47 local, a Wednesday afternoon.
NOW = local(2026, 12, 2, 15, 58, 47)


# --- parse_time_limit ---


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("60", 3600),
        ("90", 5400),
        ("1:30", 90),
        ("1:00:00", 3600),
        ("36:00:00", 36 * 3600),
        ("1:90:00", 9000),
        ("2-3", 2 * 86400 + 3 * 3600),
        ("2-3:04", 2 * 86400 + 3 * 3600 + 4 * 60),
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
        ("7-0", 7 * 86400),
        (" 5 ", 300),
    ],
)
def test_time_limit_forms_are_read_as_seconds(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["UNLIMITED", "unlimited", "INFINITE", "infinite", "-1"])
def test_unlimited_words_mean_no_limit(text: str) -> None:
    assert parse_time_limit(text) is None


@pytest.mark.parametrize("text", ["", " ", "abc", "1:2:3:4", "-5", "1-", "1:", ":5", "1-2:3:4:5", "1.5", "1h", "--1"])
def test_malformed_time_limits_are_rejected(text: str) -> None:
    with pytest.raises(TimeFormatError, match="Invalid time specification"):
        parse_time_limit(text)


def test_time_format_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_time_limit("abc")


# --- formatting ---


@pytest.mark.parametrize(
    ("seconds", "squeue", "scontrol"),
    [
        (0, "0:00", "00:00:00"),
        (3, "0:03", "00:00:03"),
        (65, "1:05", "00:01:05"),
        (754, "12:34", "00:12:34"),
        (3600, "1:00:00", "01:00:00"),
        (3723, "1:02:03", "01:02:03"),
        (86400, "1-00:00:00", "1-00:00:00"),
        (2 * 86400 + 3 * 3600 + 4 * 60 + 5, "2-03:04:05", "2-03:04:05"),
        (None, "UNLIMITED", "UNLIMITED"),
        (-1, "INVALID", "INVALID"),
    ],
)
def test_durations_render_like_squeue_and_scontrol(seconds: int | None, squeue: str, scontrol: str) -> None:
    assert format_duration(seconds) == squeue
    assert format_hms(seconds) == scontrol


def test_sinfo_time_limit_says_infinite() -> None:
    assert format_sinfo_limit(None) == "infinite"
    assert format_sinfo_limit(3600) == "1:00:00"
    assert format_sinfo_limit(1800) == "30:00"


@given(st.integers(min_value=0, max_value=400 * 86400))
def test_formatted_durations_parse_back(seconds: int) -> None:
    # The squeue form is ambiguous for M:S versus --time's minutes, so compare via scontrol's.
    assert parse_time_limit(format_hms(seconds)) == seconds


def test_timestamps_are_local_iso_seconds() -> None:
    assert format_timestamp(NOW) == "2026-12-02T15:58:47"
    assert format_timestamp(NOW + 0.9) == "2026-12-02T15:58:47"


def test_missing_timestamps_say_unknown_or_the_given_word() -> None:
    assert format_timestamp(None) == "Unknown"
    assert format_timestamp(0) == "Unknown"
    assert format_timestamp(None, none="None") == "None"


# --- parse_timestamp ---


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("NOW", NOW),
        ("now+60", NOW + 60),
        ("now+1hour", NOW + 3600),
        ("now+2minutes", NOW + 120),
        ("now+1minute", NOW + 60),
        ("now+30seconds", NOW + 30),
        ("now+1days", NOW + 86400),
        ("now+1weeks", NOW + 7 * 86400),
        ("now-1hours", NOW - 3600),
        ("16:00", local(2026, 12, 2, 16, 0)),
        ("16:30:15", local(2026, 12, 2, 16, 30, 15)),
        ("15:00", local(2026, 12, 3, 15, 0)),  # already past today: tomorrow
        ("4:00pm", local(2026, 12, 2, 16, 0)),
        ("12:00am", local(2026, 12, 3, 0, 0)),
        ("midnight", local(2026, 12, 3)),
        ("noon", local(2026, 12, 3, 12)),
        ("teatime", local(2026, 12, 2, 16)),
        ("elevenses", local(2026, 12, 3, 11)),
        ("today", local(2026, 12, 2)),
        ("tomorrow", local(2026, 12, 3)),
        ("tomorrow 10:00", local(2026, 12, 3, 10)),
        ("noon tomorrow", local(2026, 12, 3, 12)),
        ("2027-01-15", local(2027, 1, 15)),
        ("2027-01-15T08:30", local(2027, 1, 15, 8, 30)),
        ("2027-01-15T08:30:05", local(2027, 1, 15, 8, 30, 5)),
        ("12/24", local(2026, 12, 24)),
        ("12/01", local(2027, 12, 1)),  # that day has passed this year: next year
        ("12/02", local(2026, 12, 2)),  # today's date, no time: today's midnight
        ("01/05/27", local(2027, 1, 5)),
        ("1224", local(2026, 12, 24)),
        ("010527", local(2027, 1, 5)),
        ("teatime 12/24", local(2026, 12, 24, 16)),
        # a date and a time joined by "T" or "-" (torchx sends "sacct -S 1970-01-01-00:00:01")
        ("1970-01-01-00:00:01", local(1970, 1, 1, 0, 0, 1)),
        ("1970-01-01T00:00:01", local(1970, 1, 1, 0, 0, 1)),
        ("2027-01-15-08:30", local(2027, 1, 15, 8, 30)),
        ("12/24-10:00", local(2026, 12, 24, 10)),
        ("12/24/27-10:00:05", local(2027, 12, 24, 10, 0, 5)),
        ("01.05.27-3:04", local(2027, 1, 5, 3, 4)),
        ("1224-10:00", local(2026, 12, 24, 10)),
        ("12/24T4:00pm", local(2026, 12, 24, 16)),
    ],
)
def test_begin_times_resolve_against_now(text: str, expected: float) -> None:
    assert parse_timestamp(text, NOW) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10:00", local(2026, 12, 2, 10)),  # this morning, not tomorrow's
        ("16:00", local(2026, 12, 1, 16)),  # not yet today: yesterday's
        ("midnight", local(2026, 12, 2)),
        ("12/24", local(2025, 12, 24)),  # not yet this year: last year's
        ("12/01", local(2026, 12, 1)),
        ("12/24-10:00", local(2025, 12, 24, 10)),
        ("2027-01-15", local(2027, 1, 15)),  # a full date is taken as written
        ("now-1days", NOW - 86400),
    ],
)
def test_past_times_look_back_as_sacct_does(text: str, expected: float) -> None:
    assert parse_timestamp(text, NOW, past=True) == expected


def test_time_of_day_rolls_over_month_and_year_ends() -> None:
    new_years_eve = local(2026, 12, 31, 23, 0)
    assert parse_timestamp("01:00", new_years_eve) == local(2027, 1, 1, 1, 0)
    assert parse_timestamp("tomorrow", new_years_eve) == local(2027, 1, 1)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("soon", "'soon'"),
        ("now+", "'now\\+'"),
        ("now+1fortnight", "unknown unit 'fortnight'"),
        ("now+1.5hours", "'now\\+1.5hours'"),
        ("25:00", "time of day out of range"),
        ("12:61", "time of day out of range"),
        ("13:00pm", "hour out of range"),
        ("2027-02-30", "no such day"),
        ("13/01", "date out of range"),
        ("today tomorrow", "Invalid time specification"),
        ("10:00 11:00", "Invalid time specification"),
        ("a b c", "Invalid time specification"),
        ("2027-01-15-25:00", "time of day out of range"),
        ("now-10:00", "Invalid time specification"),
        ("x-10:00", "Invalid time specification"),
        ("2027-01-15-08:30-09:00", "Invalid time specification"),
    ],
)
def test_bad_begin_times_are_rejected_with_a_reason(text: str, fragment: str) -> None:
    with pytest.raises(TimeFormatError, match=fragment):
        parse_timestamp(text, NOW)
