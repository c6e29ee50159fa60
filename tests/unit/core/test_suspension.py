"""``scontrol suspend``/``resume`` in the lifecycle: a suspended job stays RUNNING in the
table (its resources held), is shown SUSPENDED, and its suspended time counts neither as
run time nor against its time limit."""

from __future__ import annotations

import pytest

from muster.core import lifecycle
from muster.core.errors import IllegalTransition
from muster.core.job import Job, JobSpec, NodeAlloc, Shape
from muster.core.lifecycle import JobEvent
from muster.core.states import JobState


def running_job() -> Job:
    job = Job(1, JobSpec(), Shape(), "alice", 1000, "alice", 1000, submit_time=0.0, time_limit=60)
    lifecycle.start(job, [NodeAlloc("n1", 1, 100)], now=100.0)
    return job


def test_a_suspended_job_is_shown_suspended_and_keeps_its_resources() -> None:
    job = running_job()
    lifecycle.suspend(job, 110.0)
    assert job.state is JobState.RUNNING and job.is_active and job.nodes == ["n1"]
    assert job.display_state is JobState.SUSPENDED and job.display_state.short == "S"
    assert job.suspend_time == 110.0
    assert job.run_seconds(150.0) == 10.0  # it ran 10 s, then was suspended


def test_resume_adds_the_suspension_to_the_time_not_counted() -> None:
    job = running_job()
    lifecycle.suspend(job, 110.0)
    lifecycle.resume(job, 140.0)
    assert job.display_state is JobState.RUNNING and job.suspended_secs == 30.0 and job.suspend_time == 140.0
    assert job.expected_end() == 100.0 + 60 + 30
    assert job.run_seconds(150.0) == 20.0
    lifecycle.suspend(job, 150.0)
    lifecycle.resume(job, 155.0)
    assert job.suspended_secs == 35.0


@pytest.mark.parametrize("event", [JobEvent.CANCEL, JobEvent.NODE_FAIL])
def test_a_suspended_job_that_ends_ends_its_suspension(event: JobEvent) -> None:
    job = running_job()
    lifecycle.suspend(job, 110.0)
    lifecycle.end(job, event, 130.0, completing=True)
    assert job.suspended_at is None and job.suspended_secs == 20.0
    assert job.display_state is job.state and job.state.is_terminal
    assert job.run_seconds(999.0) == 10.0


def test_a_requeued_suspended_job_starts_afresh() -> None:
    job = running_job()
    lifecycle.suspend(job, 110.0)
    lifecycle.requeue(job, 120.0)
    assert job.state is JobState.PENDING and job.suspended_at is None
    lifecycle.start(job, [NodeAlloc("n1", 1, 100)], now=200.0)
    assert job.suspended_secs == 0.0 and job.suspend_time is None


def test_only_a_running_job_is_suspended_and_only_a_suspended_one_resumed() -> None:
    pending = Job(2, JobSpec(), Shape(), "alice", 1000, "alice", 1000, submit_time=0.0)
    with pytest.raises(IllegalTransition, match="job 2: cannot suspend in state PENDING"):
        lifecycle.suspend(pending, 1.0)
    job = running_job()
    with pytest.raises(IllegalTransition, match="cannot resume in state RUNNING"):
        lifecycle.resume(job, 1.0)
    lifecycle.suspend(job, 110.0)
    with pytest.raises(IllegalTransition, match="cannot suspend in state SUSPENDED"):
        lifecycle.suspend(job, 111.0)


def test_suspension_round_trips_through_the_dict_form() -> None:
    job = running_job()
    lifecycle.suspend(job, 110.0)
    back = Job.from_dict(job.to_dict())
    assert back.suspended_at == 110.0 and back.display_state is JobState.SUSPENDED


def test_a_job_sent_sigstop_is_shown_stopped_and_a_suspension_shows_first() -> None:
    job = running_job()
    job.stopped = True
    assert job.display_state is JobState.STOPPED and job.display_state.short == "ST"
    assert not JobState.STOPPED.is_terminal and job.is_active
    lifecycle.suspend(job, 110.0)
    assert job.display_state is JobState.SUSPENDED
    lifecycle.requeue(job, 120.0)
    lifecycle.start(job, [NodeAlloc("n1", 1, 100)], now=200.0)
    assert not job.stopped and job.display_state is JobState.RUNNING
