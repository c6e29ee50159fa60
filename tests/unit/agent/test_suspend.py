"""The node's side of ``scontrol suspend``: a real process stopped and continued by signal
(the fallback without cgroups), and the time bookkeeping the agent keeps in the job's
record, which its time limit reads."""

from __future__ import annotations

import subprocess
import sys

from muster.agent import limits, suspend
from waiting import wait_for


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_signal_all_stops_and_continues_a_real_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
    try:
        assert suspend.signal_all([proc.pid, proc.pid], True) == 1
        wait_for(lambda: _state(proc.pid) == "T", 10, what="the process stopped")
        assert suspend.signal_all([proc.pid], False) == 1
        wait_for(lambda: _state(proc.pid) in ("S", "R"), 10, what="the process continued")
    finally:
        proc.kill()
        proc.wait()
    assert suspend.signal_all([proc.pid], True) == 0  # gone: nothing to signal


def test_account_notes_each_suspension_once_and_the_deadline_moves_by_it() -> None:
    job: dict[str, object] = {"time_limit": 60, "start_time": 100.0}
    assert suspend.account(job, True, 110.0)
    assert not suspend.account(job, True, 115.0)  # sent again: the first start stands
    assert suspend.account(job, False, 140.0)
    assert not suspend.account(job, False, 141.0)
    assert job["suspended_secs"] == 30.0 and job["suspended_at"] is None
    assert limits.deadline(job, 100.0) == 100.0 + 60 + 30


def test_freeze_without_cgroups_says_so() -> None:
    assert suspend.freeze(None, 7, True) is False
    suspend.thaw_for_end(None, 7)  # nothing to thaw: no error
