"""Job progress: muster.progress writes lines, the agent's watch reads what changed."""

from __future__ import annotations

import os
import pathlib

import pytest

from muster import progress
from muster.agent.progress import ProgressWatch, parse_lines, prepare, progress_env


def test_lines_parse_with_or_without_a_time_and_junk_is_ignored() -> None:
    lines = parse_lines("step 3 1000.5\ncheckpoint 2\nckpt 4 5000\nhello\nstep x\nstep 5 soon\n", 2000.0)
    assert lines == [
        ("step", 3, 1000.5),
        ("checkpoint", 2, 2000.0),
        ("checkpoint", 4, 2000.0),
        ("step", 5, 2000.0),
    ]  # a time in the future is the reader's


def test_the_module_writes_where_the_agent_reads(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path)
    path = prepare(root, 12, 1, -1, -1)
    assert progress_env(root, {"job_id": 12, "restart_count": 1}) == {"MUSTER_PROGRESS": path}
    monkeypatch.setenv("MUSTER_PROGRESS", path)
    watch = ProgressWatch(root)
    assert watch.poll(1e10, {(12, 1)}) == []
    assert progress.step(1) and progress.step(2) and progress.checkpoint(2)
    (r,) = watch.poll(1e10, {(12, 1)})
    assert (r["job_id"], r["attempt"], r["step"], r["ckpt_step"]) == (12, 1, 2, 2)
    assert r["first"] is not None and r["first"] <= r["step_time"]
    assert watch.poll(1e10, {(12, 1)}) == []  # nothing new
    with open(path, "a") as f:
        f.write("step 3\nstep 4")  # the last line is still being written
    (r,) = watch.poll(1e10, {(12, 1)})
    assert r["step"] == 3


def test_the_file_of_an_ended_attempt_is_removed_after_its_last_report(tmp_path: pathlib.Path) -> None:
    path = prepare(str(tmp_path), 5, 0, -1, -1)
    with open(path, "a") as f:
        f.write("step 9\n")
    watch = ProgressWatch(str(tmp_path))
    later = os.stat(path).st_mtime + 61
    assert [r["step"] for r in watch.poll(later, set())] == [9]  # still handed out once
    assert watch.poll(later, set()) == [] and not os.path.exists(path)


def test_the_file_of_an_attempt_still_being_launched_is_kept(tmp_path: pathlib.Path) -> None:
    path = prepare(str(tmp_path), 6, 1, -1, -1)  # created by the launch; not running yet
    watch = ProgressWatch(str(tmp_path))
    assert watch.poll(os.stat(path).st_mtime + 1, set()) == [] and os.path.exists(path)
    with open(path, "a") as f:
        f.write("step 4\n")
    assert [r["step"] for r in watch.poll(os.stat(path).st_mtime + 1, {(6, 1)})] == [4]


def test_outside_a_job_reports_do_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSTER_PROGRESS", raising=False)
    assert progress.step(1) is False
    assert progress.main(["step", "1"]) == 0
    assert progress.main(["stride", "1"]) == 2


def test_a_flood_keeps_only_its_tail(tmp_path: pathlib.Path) -> None:
    path = prepare(str(tmp_path), 1, 0, -1, -1)
    with open(path, "a") as f:
        f.writelines(f"step {i}\n" for i in range(20000))
    (r,) = ProgressWatch(str(tmp_path)).poll(100.0, {(1, 0)})
    assert r["step"] == 19999


def test_each_rank_is_timed_apart_and_its_median_reported(tmp_path: pathlib.Path) -> None:
    """Stragglers' input: a rolling median of each rank's step durations (busy time when
    the rank says it), ranks interleaved in one file; a line without a rank is rank ''."""
    from muster.agent.progress import PACE_WINDOW, parse_records

    assert parse_records("step 3 10.0 rank=2 busy=0.5\nstep 4 rank=1\n", 20.0) == [
        ("step", 3, 10.0, {"rank": "2", "busy": "0.5"}),
        ("step", 4, 20.0, {"rank": "1"}),
    ]
    path = prepare(str(tmp_path), 7, 0, -1, -1)
    with open(path, "a") as f:
        for i in range(12):
            f.write(f"step {i} {1000 + i * 1.0:.3f} rank=0\n")
            f.write(f"step {i} {1000 + i * 1.5:.3f} rank=1\n")
            f.write(f"step {i} {1000 + i * 3.0:.3f} rank=2 busy=0.25\n")
        f.write("step 2 1100.0\nstep 4 1102.0\nstep 3 1103.0\n")  # no rank: a late line is skipped
    (r,) = ProgressWatch(str(tmp_path)).poll(2000.0, {(7, 0)})
    assert r["step"] == 11
    ranks = r["ranks"]
    assert ranks["0"] == [11, 1011.0, 1.0, PACE_WINDOW]
    assert ranks["1"] == [11, 1016.5, 1.5, PACE_WINDOW]
    assert ranks["2"] == [11, 1033.0, 0.25, PACE_WINDOW]
    assert ranks[""] == [4, 1102.0, 1.0, 1]


def test_the_module_says_its_rank_and_busy_time(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = prepare(str(tmp_path), 8, 0, -1, -1)
    monkeypatch.setenv("MUSTER_PROGRESS", path)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert progress.step(1) and progress.step(2, busy=0.5)
    monkeypatch.setenv("RANK", "5")
    assert progress.main(["step", "3"]) == 0
    lines = pathlib.Path(path).read_text().splitlines()
    assert lines[0].endswith(" rank=3") and lines[1].endswith(" rank=3 busy=0.5000")
    assert lines[2].endswith(" rank=5")
