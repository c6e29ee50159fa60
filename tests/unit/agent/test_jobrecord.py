"""agent.jobrecord: a running batch script's record and the report of its end (pure)."""

from __future__ import annotations

import json

from muster.agent.jobrecord import Tracked, cpus_on, end_report
from muster.agent.runstate import RunState


def _tracked() -> Tracked:
    t = Tracked(
        job_id=7,
        restart_count=2,
        job={"job_id": 7, "time_limit": 60},
        uid=1000,
        kill_wait=5.0,
        started_at=100.0,
        warned=True,
        stderr_path="/tmp/err",
    )
    t.begin(4242, 99)
    t.stop("timeout", kill_at=130.0)
    return t


def test_a_restarted_agent_reads_back_what_was_saved() -> None:
    t = _tracked()
    back = Tracked.adopted_from(t.record(), 7, 2, kill_wait=30.0, now=500.0, mono=20.0)
    assert back.adopted and (back.pid, back.start_ticks, back.uid, back.kill_wait) == (4242, 99, 1000, 5.0)
    assert (back.terminated_by, back.warned, back.stderr_path, back.monitored) == ("timeout", True, "/tmp/err", True)
    assert back.started_at == 100.0 and back.job == t.job
    assert back.state is RunState.TERMINATING and back.kill_at == 25.0  # its own grace, from now on


def test_a_sparse_record_takes_the_agents_defaults() -> None:
    back = Tracked.adopted_from({"job_id": 3}, 3, 0, kill_wait=30.0, now=500.0, mono=0.0)
    assert (back.uid, back.kill_wait, back.started_at, back.job) == (-1, 30.0, 500.0, {"job_id": 3})


def test_the_end_report_names_the_attempt_and_only_the_extras_that_apply() -> None:
    report = end_report("n1", _tracked(), 0, 15, "timeout", 160.0)
    assert report == {
        "node": "n1",
        "job_id": 7,
        "restart_count": 2,
        "exit_code": 0,
        "signal": 15,
        "terminated_by": "timeout",
        "start_time": 100.0,
        "end_time": 160.0,
    }
    failed = end_report(
        "n1", _tracked(), 1, 0, None, 101.0, reason="boom", launch_failure="job", usage={"max_rss_kb": 1}
    )
    assert (failed["reason"], failed["launch_failure"], failed["usage"]) == ("boom", "job", {"max_rss_kb": 1})


def test_cpus_on_a_node_come_from_the_allocation() -> None:
    job = {"alloc": [{"node": "a", "cpus": 4}, {"node": "b"}]}
    assert (cpus_on(job, "a"), cpus_on(job, "b"), cpus_on(job, "c")) == (4, 1, 1)


def test_the_record_as_text_is_the_record_and_follows_a_changed_job() -> None:
    t = Tracked(job_id=3, restart_count=1, job={"job_id": 3, "time_limit": 5}, uid=7, kill_wait=30, started_at=1.0)
    assert json.loads(t.record_text()) == t.record()
    t.begin(42, 7)
    assert json.loads(t.record_text()) == t.record()
    t.job["time_limit"], t.job_text = 9, ""  # as the supervisor changes it
    assert json.loads(t.record_text())["job"]["time_limit"] == 9
