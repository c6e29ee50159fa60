"""The preemption deadline the agent leaves beside a job's progress file, and what
``muster.progress`` makes of it (the checkpoint handshake, docs/preemption.md)."""

from __future__ import annotations

import os
import pathlib
import stat

import pytest

from muster import progress
from muster.agent.progress import ProgressWatch, deadline_path, prepare, save_deadline


def test_a_job_reads_its_deadline_once_the_agent_wrote_it(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = prepare(str(tmp_path), 12, 1, -1, -1)
    monkeypatch.setenv("MUSTER_PROGRESS", path)
    assert progress.preempt_deadline() is None and not progress.should_checkpoint()
    save_deadline(str(tmp_path), 12, 1, 1234567890.5)
    assert progress.preempt_deadline() == 1234567890.5 and progress.should_checkpoint()
    assert stat.S_IMODE(os.stat(deadline_path(path)).st_mode) == 0o644
    save_deadline(str(tmp_path), 12, 0, 99.0)  # another attempt's: not this one's
    assert progress.preempt_deadline() == 1234567890.5


def test_outside_a_job_or_with_junk_there_is_no_deadline(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSTER_PROGRESS", raising=False)
    assert progress.preempt_deadline() is None
    path = prepare(str(tmp_path), 3, 0, -1, -1)
    monkeypatch.setenv("MUSTER_PROGRESS", path)
    with open(deadline_path(path), "w") as f:
        f.write("soon\n")
    assert progress.preempt_deadline() is None


def test_the_deadline_goes_with_the_files_of_an_ended_attempt(tmp_path: pathlib.Path) -> None:
    path = prepare(str(tmp_path), 5, 0, -1, -1)
    save_deadline(str(tmp_path), 5, 0, 10.0)
    watch = ProgressWatch(str(tmp_path))
    later = os.stat(path).st_mtime + 61
    assert watch.poll(later, set()) == []  # the deadline file is no progress file of its own
    assert not os.path.exists(path) and not os.path.exists(deadline_path(path))
