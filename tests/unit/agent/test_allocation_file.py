"""The repaired allocation the agent leaves beside a job's progress file when a failed node
of the job was replaced (docs/recovery.md), and what ``muster.progress.allocation()`` makes of it."""

from __future__ import annotations

import os
import pathlib
import stat

import pytest

from muster import progress
from muster.agent.progress import ProgressWatch, allocation_path, prepare, save_allocation

TOLD = {"nodes": ["n1", "n4"], "nodelist": "n[1,4]", "replaced": {"old": "n2", "new": "n4", "cause": "gpu_fault"}}


def test_a_job_reads_its_new_allocation_once_the_agent_wrote_it(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = prepare(str(tmp_path), 12, 0, -1, -1)
    monkeypatch.setenv("MUSTER_PROGRESS", path)
    assert progress.allocation() is None
    save_allocation(str(tmp_path), 12, 0, TOLD)
    assert progress.allocation() == TOLD
    assert stat.S_IMODE(os.stat(allocation_path(path)).st_mode) == 0o644
    with open(allocation_path(path), "w") as f:
        f.write("{half")
    assert progress.allocation() is None
    monkeypatch.delenv("MUSTER_PROGRESS")
    assert progress.allocation() is None


def test_the_allocation_file_goes_with_the_files_of_an_ended_attempt(tmp_path: pathlib.Path) -> None:
    path = prepare(str(tmp_path), 5, 0, -1, -1)
    save_allocation(str(tmp_path), 5, 0, TOLD)
    watch = ProgressWatch(str(tmp_path))
    later = os.stat(path).st_mtime + 61
    assert watch.poll(later, set()) == []  # no progress file of its own
    assert not os.path.exists(path) and not os.path.exists(allocation_path(path))
