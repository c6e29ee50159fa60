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


# --- apply: the one writer of a job's changes ------------------------------------------


def held_job() -> Job:
    job = make_job()
    lifecycle.hold(job, "admin", now=1.0)
    return job


def _every_change() -> list[lifecycle.Change]:
    c = lifecycle.Change
    return [
        c(JobEvent.START, alloc=(NodeAlloc("n1", 1, 0, []),)),
        c(JobEvent.COMPLETE, exit_code=0, signal=0),
        c(JobEvent.FAIL, exit_code=1, signal=0),
        *(c(e) for e in (JobEvent.CANCEL, JobEvent.TIMEOUT, JobEvent.NODE_FAIL, JobEvent.OUT_OF_MEMORY)),
        c(JobEvent.PREEMPT),
        c(JobEvent.DEADLINE),
        c(JobEvent.REQUEUE),
        c(JobEvent.WAIT, reason=Reason.RESOURCES),
        c(JobEvent.PLAN, start=50.0, nodes=("n2",)),
        c(JobEvent.UNPLAN),
        c(JobEvent.HOLD_NODES, nodes=("n3",), until=60.0, expedite=True),
        c(JobEvent.HOLD, hold="user"),
        c(JobEvent.RELEASE),
        c(JobEvent.SUSPEND),
        c(JobEvent.RESUME),
        c(JobEvent.CLEANED, exit_code=0, signal=0),
    ]


def test_every_event_has_a_change_to_ask_it_with() -> None:
    assert {ch.event for ch in _every_change()} == set(JobEvent)


def test_every_event_is_an_edge_or_a_change_within_a_state_never_both() -> None:
    edges = {event for _state, event in TRANSITIONS}
    assert edges.isdisjoint(lifecycle.AMENDS)
    assert edges | set(lifecycle.AMENDS) == set(JobEvent)


def _jobs_in_every_state() -> list[Job]:
    pending, held = make_job(), held_job()
    running, suspended = running_job(), running_job()
    lifecycle.suspend(suspended, 11.0)
    ended = []
    for event in (JobEvent.COMPLETE, JobEvent.CANCEL, JobEvent.TIMEOUT, JobEvent.NODE_FAIL, JobEvent.PREEMPT):
        job = running_job()
        lifecycle.apply(job, lifecycle.Change(event, exit_code=0, signal=0, completing=True), 12.0)
        ended.append(job)
    deadline = make_job()
    lifecycle.end(deadline, JobEvent.DEADLINE, 3.0, completing=False)
    return [pending, held, running, suspended, *ended, deadline]


@pytest.mark.parametrize("change", _every_change(), ids=lambda c: str(c.event))
def test_a_change_not_allowed_in_the_jobs_state_is_refused_and_the_job_is_untouched(
    change: lifecycle.Change,
) -> None:
    for job in _jobs_in_every_state():
        before = Job.from_dict(job.to_dict())
        if lifecycle.can(job, change.event) and not (
            (change.event is JobEvent.SUSPEND and job.suspended_at is not None)
            or (change.event is JobEvent.RESUME and job.suspended_at is None)
        ):
            outcome = lifecycle.apply(job, change, 30.0)
            assert (outcome.job_id, outcome.event, outcome.before) == (job.job_id, change.event, before.state)
            assert outcome.after is job.state
            continue
        with pytest.raises(IllegalTransition, match=f"job {job.job_id}: "):
            lifecycle.apply(job, change, 30.0)
        assert job == before


def test_the_scheduler_plans_a_pending_job_and_a_stale_plan_is_cleared_in_any_state() -> None:
    job = make_job()
    lifecycle.plan(job, 100.0, ["n1", "n2"], now=5.0)
    assert (job.planned_start, job.planned_nodes) == (100.0, ["n1", "n2"])
    lifecycle.end(job, JobEvent.CANCEL, 6.0, completing=False)
    with pytest.raises(IllegalTransition, match="event 'plan' is not allowed in state CANCELLED"):
        lifecycle.plan(job, 200.0, ["n3"], now=7.0)
    lifecycle.plan(job, None, [], now=7.0)
    assert (job.planned_start, job.planned_nodes) == (None, [])


def test_a_pending_job_waits_for_a_reason_and_a_hold_sets_its_own() -> None:
    job = make_job()
    outcome = lifecycle.wait(job, Reason.PRIORITY, now=2.0)
    assert job.reason is Reason.PRIORITY and outcome.before is outcome.after is JobState.PENDING
    lifecycle.hold(job, "user", now=3.0)
    assert (job.hold, job.reason) == ("user", Reason.HELD_USER)
    lifecycle.release(job, now=4.0)
    assert (job.hold, job.reason) == (None, Reason.NONE)


def test_a_hold_of_an_unknown_kind_is_refused_with_the_job_untouched() -> None:
    job = make_job()
    with pytest.raises(IllegalTransition, match="no hold of kind 'boss'"):
        lifecycle.hold(job, "boss", now=1.0)
    assert job.hold is None and job.reason is Reason.NONE


def test_nodes_held_for_a_job_become_its_own_when_it_starts() -> None:
    job = make_job()
    lifecycle.hold_nodes(job, ["n1"], until=90.0, now=5.0, expedite=True)
    assert (job.held_nodes, job.hold_until, job.expedited) == (["n1"], 90.0, True)
    lifecycle.start(job, [NodeAlloc("n1", 1, 0, [])], now=10.0)
    assert (job.held_nodes, job.hold_until, job.expedited) == ([], None, False)


def test_an_end_or_a_requeue_may_give_another_reason_than_the_usual() -> None:
    job = make_job()
    lifecycle.end(job, JobEvent.DEADLINE, 5.0, completing=False, reason=Reason.DEADLINE)
    assert job.reason is Reason.DEADLINE
    job = running_job()
    lifecycle.requeue(job, 20.0, hold="user", reason=Reason.HOLD_MAX_REQUEUE)
    assert (job.state, job.hold, job.reason) == (JobState.PENDING, "user", Reason.HOLD_MAX_REQUEUE)


def test_an_outcome_says_when_a_running_job_ended() -> None:
    job = running_job()
    assert lifecycle.end(job, JobEvent.TIMEOUT, 20.0, completing=True).ended
    assert not lifecycle.end(make_job(), JobEvent.CANCEL, 20.0, completing=False).ended


def test_end_refuses_an_event_that_is_no_end() -> None:
    job = make_job()
    with pytest.raises(IllegalTransition, match="is not an end"):
        lifecycle.end(job, JobEvent.START, 1.0, completing=False)
    assert job.state is JobState.PENDING
