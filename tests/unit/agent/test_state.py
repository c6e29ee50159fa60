"""The agent's records on disk: atomic, ordered, and safe to find again after a crash."""

from __future__ import annotations

import os
import stat

from muster.agent.state import DELIVERED_KEEP, StateDir


def test_job_records_round_trip_and_are_private(tmp_path) -> None:
    state = StateDir(str(tmp_path / "s"))
    state.create()
    state.save_job({"job_id": 7, "pid": 123, "job": {"job_id": 7}})
    assert state.jobs() == [{"job_id": 7, "pid": 123, "job": {"job_id": 7}}]
    assert stat.S_IMODE(os.stat(os.path.join(state.jobs_dir, "7.json")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(state.jobs_dir).st_mode) == 0o700
    state.drop_job(7)
    state.drop_job(7)  # dropping twice is harmless
    assert state.jobs() == []


def test_reports_are_keyed_by_job_and_attempt_and_come_back_oldest_first(tmp_path) -> None:
    state = StateDir(str(tmp_path))
    state.create()
    k1 = state.save_report({"job_id": 3, "restart_count": 0, "exit_code": 0})
    k2 = state.save_report({"job_id": 1, "restart_count": 2, "exit_code": 1})
    os.utime(os.path.join(state.reports_dir, f"{k1}.json"), (1, 1))
    assert (k1, k2) == ("3.0", "1.2")
    assert [key for key, _ in state.reports()] == ["3.0", "1.2"]
    assert state.has_report(1, 2) and not state.has_report(1, 1)
    state.drop_report(k1)
    assert [key for key, _ in state.reports()] == ["1.2"]


def test_leftovers_of_an_interrupted_write_and_unreadable_files_are_ignored(tmp_path) -> None:
    state = StateDir(str(tmp_path))
    state.create()
    with open(os.path.join(state.jobs_dir, "9.json.tmp.123"), "w") as f:
        f.write('{"job_id": 9')
    with open(os.path.join(state.jobs_dir, "8.json"), "w") as f:
        f.write("not json")
    assert state.jobs() == []


def test_the_spool_is_per_job_and_removable(tmp_path) -> None:
    state = StateDir(str(tmp_path))
    state.create()
    spool = state.spool_for(42)
    assert spool.endswith("spool/job00042")
    os.makedirs(spool)
    state.clean_spool(42)
    assert not os.path.exists(spool)
    assert stat.S_IMODE(os.stat(state.spool_dir).st_mode) == 0o711


def test_a_private_state_dir_becomes_traversable_for_job_users(tmp_path) -> None:
    root = tmp_path / "private"
    root.mkdir(mode=0o700)
    state = StateDir(str(root))
    state.create()
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o711


def test_the_instance_name_is_random_and_kept(tmp_path) -> None:
    state = StateDir(str(tmp_path / "a"))
    state.create()
    name = state.instance_id()
    assert len(name) == 8 and state.instance_id() == name
    other = StateDir(str(tmp_path / "b"))
    other.create()
    assert other.instance_id() != name


def test_step_records_round_trip_and_are_private(tmp_path) -> None:
    state = StateDir(str(tmp_path))
    state.create()
    state.save_step("7.0.1", {"job_id": 7, "tasks": [[0, 123, 456]]})
    assert state.steps() == [("7.0.1", {"job_id": 7, "tasks": [[0, 123, 456]]})]
    assert stat.S_IMODE(os.stat(state.steps_dir).st_mode) == 0o700
    state.drop_step("7.0.1")
    state.drop_step("7.0.1")  # twice is harmless
    assert state.steps() == []


def test_a_delivered_report_leaves_a_mark_that_its_attempt_ended_here_until_pruned(tmp_path) -> None:
    # a launch of that attempt that comes late (a deposed controller resumed) finds it ended
    state = StateDir(str(tmp_path))
    state.create()
    key = state.save_report({"job_id": 5, "restart_count": 1, "exit_code": 0})
    state.drop_report(key)
    assert state.reports() == [] and state.ended() == []  # not reported again
    assert state.has_report(5, 1) and not state.has_report(5, 2)
    assert stat.S_IMODE(os.stat(state.delivered_dir).st_mode) == 0o700
    mark = os.path.join(state.delivered_dir, key)
    state.prune_delivered(os.stat(mark).st_mtime + 3600)  # recent: kept
    assert state.has_report(5, 1)
    state.prune_delivered(os.stat(mark).st_mtime + DELIVERED_KEEP + 1)
    assert not state.has_report(5, 1)
