"""The series behind the pictures, and the pictures themselves."""

from __future__ import annotations

import pathlib

import pytest

from muster.sim.engine import JobOutcome
from muster.sim.plots import binned, lanes, timeline, write_plots


def o(job: int, submit: float, start: float, end: float, size: int) -> JobOutcome:
    return JobOutcome(job, str(job), size, submit, start, end, 0)


RUN = [o(1, 0, 0, 10, 2), o(2, 1, 10, 15, 4), o(3, 2, 2, 7, 2), o(4, 3, 15, 35, 1)]


def test_the_timeline_steps_at_every_change() -> None:
    times, busy, queued = timeline(RUN)
    assert times == [0, 1, 2, 3, 7, 10, 15, 35]
    assert busy == [2, 2, 4, 4, 2, 4, 1, 0]
    assert queued == [0, 1, 1, 2, 2, 1, 0, 0]


def test_binning_takes_the_time_weighted_mean() -> None:
    times, busy, _ = timeline(RUN)
    centres, means = binned(times, busy, 0, 40, 4)
    assert centres == [5, 15, 25, 35]
    # [0,10): 2*2 + 4*5 + 2*3 = 30 -> 3.0; [10,20): 4*5 + 1*5 = 25 -> 2.5; [20,30): 1;
    # [30,40): 1 until 35 -> 0.5
    assert means == [3.0, 2.5, 1.0, 0.5]
    assert binned(times, busy, 5, 5, 4) == ([], [])


def test_lanes_never_give_a_row_to_two_running_jobs() -> None:
    rows = lanes(RUN, 4)
    assert sorted(len(r) for r in rows.values()) == [1, 2, 2, 4]
    assert set(rows[1]).isdisjoint(rows[3])  # both run during [2, 7)
    assert rows[2] == [0, 1, 2, 3]


def test_pictures_are_written(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("matplotlib")
    paths = write_plots([("easy", RUN), ("fcfs", RUN)], 4, str(tmp_path / "out"), gantt_window=(0, 40))
    names = sorted(pathlib.Path(p).name for p in paths)
    assert names == ["gantt-easy.png", "gantt-fcfs.png", "utilisation.png", "wait_cdf.png"]
    assert all(pathlib.Path(p).stat().st_size > 1000 for p in paths)
