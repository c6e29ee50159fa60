"""A run's end is stamped when its agent saw it end, bounded by what the controller knows."""

from __future__ import annotations

import math

from muster.ctld.launches import ended_at


def test_a_report_delivered_late_keeps_its_end() -> None:
    assert ended_at(1005.0, 1000.0, 1015.0) == 1005.0


def test_an_end_from_a_node_clock_ahead_or_behind_stays_within_the_run() -> None:
    assert ended_at(1020.0, 1000.0, 1015.0) == 1015.0  # not after now
    assert ended_at(990.0, 1000.0, 1015.0) == 1000.0  # not before the start


def test_without_a_time_the_end_is_now() -> None:
    assert ended_at(None, 1000.0, 1015.0) == 1015.0
    assert ended_at(math.nan, 1000.0, 1015.0) == 1015.0
    assert ended_at(1005.0, None, 1015.0) == 1005.0
