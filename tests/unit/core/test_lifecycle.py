from __future__ import annotations

import pytest

from muster.core import lifecycle
from muster.core.errors import IllegalTransition
from muster.core.job import Job, JobSpec, NodeAlloc, Shape
from muster.core.lifecycle import TRANSITIONS, JobEvent
from muster.core.states import JobState, Reason


def make_job(job_id: int = 1) -> Job:
    return Job(job_id=job_id, spec=JobSpec(), shape=Shape(), user="u", uid=1000, group="g", gid=1000, submit_time=0.0)


def running_job() -> Job:
    job = make_job()
    lifecycle.start(job, [NodeAlloc("n1", 1, 0, [0])], now=10.0)
    return job


def test_a_started_job_runs_on_its_allocation() -> None:
    job = running_job()
    assert job.state is JobState.RUNNING
    assert job.nodes == ["n1"] and job.start_time == 10.0


@pytest.mark.parametrize(
    ("exit_code", "signal", "state"),
    [(0, 0, JobState.COMPLETED), (3, 0, JobState.FAILED), (0, 9, JobState.FAILED)],
)
def test_a_job_that_exits_completes_or_fails_by_its_exit_status(exit_code: int, signal: int, state: JobState) -> None:
    job = running_job()
    lifecycle.finish(job, exit_code, signal, now=20.0)
    assert job.state is state
    assert (job.exit_code, job.exit_signal, job.end_time) == (exit_code, signal, 20.0)


@pytest.mark.parametrize(
    ("exit_code", "signal", "reason"),
    [(0, 0, Reason.NONE), (3, 0, Reason.NON_ZERO_EXIT), (0, 9, Reason.RAISED_SIGNAL)],
)
def test_an_ended_job_says_why_as_slurm_does(exit_code: int, signal: int, reason: Reason) -> None:
    job = running_job()
    lifecycle.finish(job, exit_code, signal, 10.0)
    assert job.reason is reason
    for event, why in (
        (JobEvent.TIMEOUT, Reason.TIME_LIMIT),
        (JobEvent.NODE_FAIL, Reason.NODE_DOWN),
        (JobEvent.CANCEL, Reason.NONE),
    ):
        job = running_job()
        lifecycle.end(job, event, 10.0, completing=True)
        assert job.reason is why


def test_cancelling_a_running_job_keeps_it_completing_until_cleaned() -> None:
    job = running_job()
    lifecycle.end(job, JobEvent.CANCEL, now=15.0, completing=True)
    assert job.state is JobState.CANCELLED and job.completing and job.is_active
    lifecycle.cleaned(job, 0, 15)
    assert not job.completing and not job.is_active


def test_cancelling_a_pending_job_ends_it_at_once() -> None:
    job = make_job()
    lifecycle.end(job, JobEvent.CANCEL, now=5.0, completing=True)
    assert job.state is JobState.CANCELLED and not job.completing


def test_requeue_returns_to_pending_under_the_same_id_and_counts_the_restart() -> None:
    job = running_job()
    lifecycle.end(job, JobEvent.NODE_FAIL, now=12.0, completing=False)
    lifecycle.requeue(job, now=13.0)
    assert job.state is JobState.PENDING and job.restart_count == 1 and job.alloc == []


def test_an_illegal_transition_names_the_job_state_and_event() -> None:
    job = make_job(42)
    with pytest.raises(IllegalTransition, match=r"job 42: event 'complete' is not allowed in state PENDING"):
        lifecycle.finish(job, 0, 0, now=1.0)


def test_cancelled_jobs_cannot_be_requeued_and_ended_jobs_cannot_start() -> None:
    assert (JobState.CANCELLED, JobEvent.REQUEUE) not in TRANSITIONS
    for state in JobState:
        if state.is_terminal:
            assert (state, JobEvent.START) not in TRANSITIONS


def test_job_round_trips_through_its_dict_form() -> None:
    job = running_job()
    assert Job.from_dict(job.to_dict()) == job
