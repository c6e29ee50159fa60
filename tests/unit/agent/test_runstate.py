"""The run-state table of the agent's batch scripts and steps (``agent.runstate``)."""

from __future__ import annotations

import pytest

from muster.agent.jobrecord import Tracked
from muster.agent.localstep import Step
from muster.agent.runstate import TRANSITIONS, IllegalRunTransition, RunEvent, RunState, advance, check, live

L, R, T, E, D = RunState.LAUNCHING, RunState.RUNNING, RunState.TERMINATING, RunState.ENDED, RunState.REPORTED

ALLOWED = [
    (L, RunEvent.STARTED, R),
    (L, RunEvent.LAUNCH_FAILED, E),
    (L, RunEvent.STOP, T),
    (T, RunEvent.STARTED, T),
    (R, RunEvent.STOP, T),
    (T, RunEvent.STOP, T),
    (R, RunEvent.EXITED, E),
    (T, RunEvent.EXITED, E),
    (E, RunEvent.REPORTED, D),
]


@pytest.mark.parametrize(("state", "event", "after"), ALLOWED)
def test_a_legal_move_gives_its_next_state(state: RunState, event: RunEvent, after: RunState) -> None:
    assert advance("step 5.0", state, event) is after


def test_the_table_has_exactly_the_documented_moves() -> None:
    assert {(s, e): a for s, e, a in ALLOWED} == TRANSITIONS


REFUSED = [(s, e) for s in RunState for e in RunEvent if (s, e) not in TRANSITIONS]


@pytest.mark.parametrize(("state", "event"), REFUSED)
def test_every_other_move_is_refused_naming_the_run_the_state_and_the_event(state: RunState, event: RunEvent) -> None:
    with pytest.raises(IllegalRunTransition) as info:
        advance("job 7", state, event)
    assert "job 7" in str(info.value) and str(state) in str(info.value) and str(event) in str(info.value)


def test_an_ended_run_is_never_started_stopped_or_ended_again() -> None:
    for state in (E, D):
        for event in (RunEvent.STARTED, RunEvent.STOP, RunEvent.EXITED, RunEvent.LAUNCH_FAILED):
            with pytest.raises(IllegalRunTransition):
                advance("step 1.0", state, event)


def test_only_launching_running_and_terminating_runs_are_live() -> None:
    assert [s for s in RunState if live(s)] == [L, R, T]


def test_the_invariants_hold_for_runs_that_keep_them_and_fail_for_those_that_do_not() -> None:
    check("s", R, reason=None, statuses=[None, (0, 0)])
    check("s", T, reason="cancel", statuses=[None])
    check("s", E, reason=None, statuses=[(0, 0), (1, 0)])
    check("s", L, reason=None, statuses=[])
    with pytest.raises(AssertionError, match="without a reason"):
        check("s", T, reason=None, statuses=[None])
    with pytest.raises(AssertionError, match="unknown"):
        check("s", E, reason=None, statuses=[(0, 0), None])
    with pytest.raises(AssertionError, match="every exit status"):
        check("s", R, reason=None, statuses=[(0, 0)])


def test_a_batch_script_taken_back_is_running_or_terminating_as_its_record_says() -> None:
    stopping = Tracked.adopted_from({"pid": 5, "terminated_by": "timeout"}, 7, 0, 30.0, 0.0)
    assert stopping.state is T
    running = Tracked.adopted_from({"pid": 5}, 7, 0, 30.0, 0.0)
    assert running.state is R
    running.advance(RunEvent.EXITED)
    assert running.state is E
    with pytest.raises(IllegalRunTransition, match="job 7 attempt 0"):
        running.advance(RunEvent.STOP)


def test_a_step_moves_through_its_states_and_knows_when_it_is_finished() -> None:
    step = Step(5, 0, 1, 1000, "node1", "token", 30.0)
    assert step.state is L and not step.finished
    for event in (RunEvent.STARTED, RunEvent.STOP, RunEvent.EXITED):
        step.advance(event)
    assert step.state is E and step.finished
    step.advance(RunEvent.REPORTED)
    assert step.finished
    with pytest.raises(IllegalRunTransition, match="step 5.1 on node1"):
        step.advance(RunEvent.EXITED)
