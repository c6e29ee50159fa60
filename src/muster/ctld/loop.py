"""One scheduling pass of the controller: build the snapshot from memory, let the pure
scheduler decide, apply the decisions (``sched.apply.apply_decisions``, the same function
the simulator applies its passes with), and hand back the actions to perform.

Accounting takes part on both sides of the decision: before it, usage is charged and jobs
over an association or QOS limit are set aside with the limit as their reason
(``Accounting.before_pass``); after it, each start is admitted against the limits in turn
(``Accounting.admit``). A start whose commit fails starts nothing (``StorageError`` goes
to the caller, which tries again next pass). Preemption victims whose grace time is over
are ended first (``ctld.preemption``), and the pass's preemptions are carried out with
its starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from muster.core.job import Job
from muster.core.states import Reason
from muster.ctld.actions import Action
from muster.ctld.controller import Controller
from muster.ctld.view import build_snapshot
from muster.sched import schedule
from muster.sched.apply import apply_decisions
from muster.sched.config import SchedConfig
from muster.sched.decisions import Decisions, Preemption, Start

__all__ = ["PassResult", "run_pass"]


@dataclass(slots=True)
class PassResult:
    decisions: Decisions
    actions: list[Action] = field(default_factory=list)


class _ControllerBook:
    """The controller's side of ``apply_decisions``: starts are admitted, committed and
    turned into launches."""

    def __init__(self, ctl: Controller, result: PassResult) -> None:
        self.ctl = ctl
        self.result = result
        self.waiting: Mapping[int, Job] = ctl.jobs
        self.planned = ctl.planned

    def start(self, starts: list[Start], now: float) -> None:
        ctl = self.ctl
        if ctl.accounting is not None:  # association and QOS limits, start by start
            starts = ctl.accounting.admit(starts, ctl.jobs, now)
        self.result.actions += ctl.launches.apply_starts(starts, now)

    def preempt(self, preemptions: list[Preemption], holds: dict[int, list[str]], now: float) -> None:
        self.result.actions += self.ctl.preemption.apply(preemptions, holds, now)


def run_pass(ctl: Controller, config: SchedConfig, now: float, timer: Callable[[], float] | None = None) -> PassResult:
    """One pass; with a ``timer`` (the controller's monotonic clock) the scheduler times
    its numbered phases into ``decisions.stats.phase_seconds``, and the controller's own
    steps around it are timed as ``0.snapshot`` and ``5.apply``."""
    t0 = timer() if timer else 0.0
    ctl.queue.expire_deadlines(now)
    expired = ctl.preemption.expire(now)  # victims whose grace time is over leave first
    expired += ctl.preemption.resume_victims(now)  # suspended victims whose preemptor ended
    snapshot = build_snapshot(ctl)
    if ctl.accounting is not None:
        ctl.accounting.before_pass(ctl, snapshot, now)
    t1 = timer() if timer else 0.0
    decisions = schedule(snapshot, now, config, timer, ctl.sched_memo)
    t2 = timer() if timer else 0.0
    result = PassResult(decisions, expired)
    apply_decisions(decisions, _ControllerBook(ctl, result), now)
    # A dependency never met makes its job one that can never run (``never``): when no job
    # is, the reasons of every waiting job (held ones too) need not be read again.
    never = decisions.never
    if never and ctl.mail is not None:  # --mail-type=INVALID_DEPEND, before a kill's END
        ctl.mail.dependency_never(i for i in never if decisions.reasons.get(i) is Reason.DEPENDENCY_NEVER)
    ctl.queue.kill_invalid_dependencies({i: r for i, r in decisions.reasons.items() if i in never} if never else {})
    if timer is not None:
        decisions.stats.phase_seconds["0.snapshot"] = t1 - t0
        decisions.stats.phase_seconds["5.apply"] = timer() - t2
    return result
