"""The run-state table of the agent's batch scripts and steps (``agent.runstate``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    stopping = Tracked.adopted_from({"pid": 5, "terminated_by": "timeout"}, 7, 0, 30.0, 0.0, 0.0)
    assert stopping.state is T
    running = Tracked.adopted_from({"pid": 5}, 7, 0, 30.0, 0.0, 0.0)
    assert running.state is R
    running.exited()
    assert running.state is E
    with pytest.raises(IllegalRunTransition, match="job 7 attempt 0"):
        running.stop("cancel", 1.0)


def test_a_step_moves_through_its_states_and_knows_when_it_is_finished() -> None:
    step = Step(5, 0, 1, 1000, "node1", "token", 30.0)
    assert step.state is L and not step.finished
    step.advance(RunEvent.STARTED)
    assert step.stop("cancel") and not step.stop("timeout") and step.terminated == "cancel"
    step.advance(RunEvent.EXITED)
    assert step.state is E and step.finished
    step.advance(RunEvent.REPORTED)
    assert step.finished
    with pytest.raises(IllegalRunTransition, match="step 5.1 on node1"):
        step.advance(RunEvent.EXITED)


# --- the invariants of a run, kept by its transitions ----------------------------------------


def _batch() -> Tracked:
    return Tracked(job_id=7, restart_count=0, job={"job_id": 7}, uid=1000, kill_wait=30.0, started_at=0.0)


def test_a_stopping_batch_run_has_its_reason_and_sigkill_time_and_the_first_reason_wins() -> None:
    t = _batch()
    t.begin(4242, 99)
    assert (t.state, t.pid, t.terminated_by, t.kill_at) == (R, 4242, None, None)
    assert t.stop("timeout", kill_at=130.0)
    assert (t.state, t.terminated_by, t.kill_at) == (T, "timeout", 130.0)
    assert not t.stop("cancel", kill_at=200.0)  # later and another reason: nothing changes
    assert (t.terminated_by, t.kill_at) == ("timeout", 130.0)
    assert not t.stop("cancel", kill_at=110.0)  # sooner: the SIGKILL comes nearer
    assert (t.terminated_by, t.kill_at) == ("timeout", 110.0)
    t.exited()
    assert (t.state, t.terminated_by) == (E, "timeout")


def test_a_batch_run_taken_back_while_stopping_gets_a_sigkill_time_and_one_saved_before_its_fork_is_launching() -> None:
    stopping = Tracked.adopted_from({"pid": 5, "terminated_by": "cancel", "kill_wait": 10}, 7, 0, 30.0, 0.0, 50.0)
    assert (stopping.state, stopping.terminated_by, stopping.kill_at) == (T, "cancel", 60.0)
    unforked = Tracked.adopted_from({"pid": None}, 7, 0, 30.0, 0.0, 50.0)
    assert unforked.state is L and unforked.pid is None
    unforked.launch_failed()
    assert unforked.state is E


def test_the_batch_invariant_check_names_what_is_missing() -> None:
    t = _batch()
    t.state = R  # as a careless writer would (tests/unit/test_architecture.py forbids it in agent/)
    with pytest.raises(AssertionError, match="RUNNING without a pid"):
        t.check()
    t.state, t.terminated_by = T, "cancel"
    with pytest.raises(AssertionError, match="without a SIGKILL time"):
        t.check()
    t.state, t.kill_at = R, 1.0
    t.pid = 5
    with pytest.raises(AssertionError, match="with a reason to stop"):
        t.check()


def test_a_step_is_stopped_only_with_a_reason_and_ends_only_with_every_tasks_end_known() -> None:
    from muster.agent.localstep import Task

    step = Step(5, 0, 1, 1000, "node1", "token", 30.0)
    step.tasks = [Task(task=0, local=0), Task(task=1, local=1)]
    step.advance(RunEvent.STARTED)
    with pytest.raises(ValueError, match="Step.stop"):
        step.advance(RunEvent.STOP)
    assert step.state is R and step.terminated is None
    step.tasks[0].status = (0, 0)
    with pytest.raises(AssertionError, match="unknown"):
        step.advance(RunEvent.EXITED)
    assert step.state is R  # refused: nothing changed
    step.tasks[1].status = (0, 15)
    step.advance(RunEvent.EXITED)
    with pytest.raises(IllegalRunTransition):
        step.stop("cancel")
    assert (step.state, step.terminated) == (E, None)  # a refused stop leaves no reason behind


BATCH_MOVES = ["begin", "stop", "exited", "launch_failed"]


@given(st.lists(st.tuples(st.sampled_from(BATCH_MOVES), st.sampled_from(["cancel", "timeout"]), st.floats(0, 100))))
def test_any_sequence_of_batch_moves_keeps_the_invariants_and_a_refused_one_changes_nothing(
    moves: list[tuple[str, str, float]],
) -> None:
    t = _batch()
    for move, reason, when in moves:
        before = (t.state, t.pid, t.terminated_by, t.kill_at)
        try:
            if move == "begin":
                t.begin(4242, 1)
            elif move == "stop":
                t.stop(reason, when)
            elif move == "exited":
                t.exited()
            else:
                t.launch_failed()
        except IllegalRunTransition:
            assert (t.state, t.pid, t.terminated_by, t.kill_at) == before
        t.check()
        if t.state is T:
            assert t.terminated_by is not None and t.kill_at is not None
        if t.state is R:  # (a stop may overtake the launch: TERMINATING before its pid is known)
            assert t.pid == 4242
