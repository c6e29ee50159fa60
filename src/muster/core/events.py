"""The event log's vocabulary: every kind of event the controller records of a job
(``EventKind``), the ``kind`` column of the store's ``events`` table.

Each event row says what happened to a job, next to the job's new projection, in the same
transaction (``ctld.store.Store.record``). The kinds were free strings written in a dozen
rooms; they are one enum now, so that a reader (accounting's projection, the mail notes,
the statistics, ``sacct``'s history) and a writer cannot drift apart, and ``mypy`` refuses
a kind nobody declared. The values are the strings stored since the first schema: an old
store reads the same. The changes themselves go through ``core.lifecycle`` (its
``JobEvent``); a kind here names what is recorded of one, or of a fact that changes no
state (progress, evidence, an update). The step rows (``step_<kind>``) and the failure
ledger's rows (``ledger``) have their own writers in ``ctld.store``.

Pure and import-free beyond ``enum``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EventKind", "ended_kind"]


class EventKind(StrEnum):
    SUBMIT = "submit"
    START = "start"
    # the batch script ended: the job's final state, in lower case
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    CANCELLED = "cancelled"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"  # a victim's grace is over: requeued or cancelled
    DEADLINE = "deadline"
    CANCEL = "cancel"  # scancel, an invalid dependency
    CLEANED = "cleaned"  # its processes are gone: its resources are free
    REQUEUE = "requeue"
    LAUNCH_FAILED = "launch_failed"
    HUNG = "hung"  # judged hung and requeued (``ctld.training``)
    HOLD = "hold"
    RELEASE = "release"
    HOLD_NODES = "hold_nodes"  # a preemptor holds its nodes
    UPDATE = "update"  # scontrol update job
    SUSPEND = "suspend"
    RESUME = "resume"
    STOPPED = "stopped"  # scancel --signal=STOP
    CONTINUED = "continued"  # scancel --signal=CONT
    PREEMPT = "preempt"  # a victim told to checkpoint and leave
    PREEMPT_ANSWERED = "preempt_answered"  # it checkpointed in its grace time
    LOST_NODE = "lost_node"  # --no-kill: it goes on without a failed node
    REPLACED = "replaced"  # a failed node replaced in the allocation (``ctld.replacement``)
    PROGRESS = "progress"  # what a training job reported, a hang's evidence handled
    HANG_JUDGED = "hang_judged"
    HANG_EVIDENCE = "hang_evidence"
    STRAGGLER = "straggler"
    ATTEMPTS = "attempts"  # its attempts' summaries rewritten (goodput)


def ended_kind(state: str) -> EventKind:
    """The kind recorded when a running job's batch script ended in ``state`` (a job
    state's name: ``COMPLETED`` -> ``completed``). ``ValueError`` for a state no end
    records."""
    return EventKind(state.lower())
