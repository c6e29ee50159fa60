"""The life of one run on this node (a batch script's attempt, or a job step's part here):
one state, an explicit transition table, and an invariant check.

=============  =======================================================================
``LAUNCHING``  accepted; its processes are being forked (Prolog, spool, supervisor)
``RUNNING``    its processes run under their supervisor (a batch monitor, a step's
               ``agent.stepd``), which outlives the agent
``TERMINATING``  asked to stop (cancel, time limit, node drain, srun gone): TERM sent,
               KILL after KillWait; the reason is kept with the run
``ENDED``      every process has ended and its exit status is known (and kept on disk
               until reported)
``REPORTED``   its end was handed over: to the controller (batch) or to srun / the
               controller (step); nothing is left of it here
=============  =======================================================================

A restarted agent takes a run back in the state its records say (``RUNNING``,
``TERMINATING`` or ``ENDED``); it never invents an edge. Modelled on ``core.lifecycle``
(jobs): a move missing from ``TRANSITIONS`` raises ``IllegalRunTransition`` naming the
run, its state and the event. Pure: no I/O, no clock.
"""

from __future__ import annotations

from enum import StrEnum

from muster.core.errors import IllegalTransition

__all__ = ["TRANSITIONS", "IllegalRunTransition", "RunEvent", "RunState", "advance", "check", "live"]


class RunState(StrEnum):
    LAUNCHING = "LAUNCHING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    ENDED = "ENDED"
    REPORTED = "REPORTED"


class RunEvent(StrEnum):
    STARTED = "started"  # its processes were forked (exec'd or failed: their exits tell)
    LAUNCH_FAILED = "launch_failed"  # nothing could be started: it ends at once
    STOP = "stop"  # cancel, time limit, drain, srun gone (again: KILL comes sooner)
    EXITED = "exited"  # the last process ended and its status is kept
    REPORTED = "reported"  # its end was handed over


_L, _R, _T, _E = RunState.LAUNCHING, RunState.RUNNING, RunState.TERMINATING, RunState.ENDED

TRANSITIONS: dict[tuple[RunState, RunEvent], RunState] = {
    (_L, RunEvent.STARTED): _R,
    (_L, RunEvent.LAUNCH_FAILED): _E,
    # a stop that overtakes the launch: the run starts, and is stopped at once
    (_L, RunEvent.STOP): _T,
    (_T, RunEvent.STARTED): _T,
    (_R, RunEvent.STOP): _T,
    (_T, RunEvent.STOP): _T,
    (_R, RunEvent.EXITED): _E,
    (_T, RunEvent.EXITED): _E,
    (_E, RunEvent.REPORTED): RunState.REPORTED,
}

LIVE = frozenset({_L, _R, _T})


class IllegalRunTransition(IllegalTransition):
    """A run was asked to move along an edge ``TRANSITIONS`` does not have."""


def advance(name: str, state: RunState, event: RunEvent) -> RunState:
    """The state after ``event``; ``IllegalRunTransition`` (naming ``name``) if none."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalRunTransition(f"{name}: event '{event}' is not allowed in state {state}") from None


def live(state: RunState) -> bool:
    """Whether a run in ``state`` may still have processes."""
    return state in LIVE


def check(name: str, state: RunState, *, reason: str | None, statuses: list[object | None]) -> None:
    """The invariants of a run: a stopping run says why; an ended run knows every exit
    status, a live one past its launch has not them all. Raises ``AssertionError``."""
    if state is RunState.TERMINATING and not reason:
        raise AssertionError(f"{name}: TERMINATING without a reason")
    if state in (RunState.ENDED, RunState.REPORTED) and any(s is None for s in statuses):
        raise AssertionError(f"{name}: {state} with an exit status unknown")
    if state in (RunState.RUNNING, RunState.TERMINATING) and statuses and all(s is not None for s in statuses):
        raise AssertionError(f"{name}: {state} though every exit status is known")
