"""PriorityUsageResetPeriod: where each period starts, and bad values."""

from __future__ import annotations

from datetime import datetime

import pytest

from muster.core.config import ConfigError
from muster.ctld.reset_period import parse_reset_period, usage_epoch


def _local(*args: int) -> float:
    return datetime(*args).timestamp()


@pytest.mark.parametrize(
    ("period", "expected"),
    [
        ("DAILY", (2026, 12, 3)),
        ("WEEKLY", (2026, 11, 29)),  # the Sunday before Thursday 3 December
        ("MONTHLY", (2026, 12, 1)),
        ("QUARTERLY", (2026, 10, 1)),
        ("YEARLY", (2026, 1, 1)),
    ],
)
def test_reset_periods_start_at_local_midnight(period: str, expected: tuple[int, int, int]) -> None:
    now = _local(2026, 12, 3, 15, 30)
    assert usage_epoch(period, now, started=0.0) == _local(*expected)


def test_reset_none_now_and_bad_values() -> None:
    assert usage_epoch("NONE", 1e9, 5.0) is None
    assert usage_epoch("NOW", 1e9, 5.0) == 5.0
    assert parse_reset_period(None) == "NONE" and parse_reset_period(" weekly ") == "WEEKLY"
    with pytest.raises(ConfigError, match="PriorityUsageResetPeriod='FORTNIGHTLY'"):
        parse_reset_period("FORTNIGHTLY")
