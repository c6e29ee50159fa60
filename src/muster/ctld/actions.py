"""What the controller asks of its agents: decisions become these values, ``dispatch``
performs them. Nothing here does I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from muster.core.errors import InvalidRequest
from muster.core.job import Job
from muster.core.signals import parse_signal as core_parse_signal
from muster.protocol.messages import StepSignalRequest, dump


@dataclass(slots=True)
class Launch:
    job: Job


@dataclass(slots=True)
class Terminate:
    job_id: int
    attempt: int
    nodes: list[str]
    reason: str


@dataclass(slots=True)
class SignalJob:
    job_id: int
    nodes: list[str]
    signal: int
    batch_only: bool
    whole_job: bool = False  # the batch shell and the tasks at once (preemption)
    # a hang's evidence (``ctld.training``): each node reads its processes of the job and
    # sends ``signal`` only to those that catch it (``agent.hangevidence``)
    evidence: bool = False
    # a preempted job's deadline (epoch seconds): written where ``muster.progress`` reads it
    # before the signal is sent (the checkpoint handshake, ``ctld.preemption``)
    deadline: float | None = None


@dataclass(slots=True)
class NewLimit:
    """A running job's time limit changed: its batch host enforces the new one."""

    job_id: int
    node: str
    time_limit: int | None


@dataclass(slots=True)
class SuspendJob:
    """``scontrol suspend`` (``suspend``) or ``resume``: every node of the job freezes or
    thaws it (``ctld.suspend``)."""

    job_id: int
    nodes: list[str]
    suspend: bool


@dataclass(slots=True)
class NewAllocation:
    """A failed node of a running job was replaced (``ctld.replacement``): the job's other
    ``nodes`` are told its allocation now (``protocol.messages.AllocationRequest``)."""

    job_id: int
    attempt: int
    nodes: list[str]
    alloc: list[dict[str, object]]
    old: str
    new: str
    cause: str
    time: float


@dataclass(slots=True)
class StepSignal:
    """An action for ``dispatch``: signal (or, with ``kill``, stop) one step on its nodes."""

    job_id: int
    attempt: int
    step_id: int
    nodes: list[str]
    signal: int
    kill: bool

    def body(self) -> dict[str, Any]:
        """The agent's ``StepSignalRequest`` (``protocol.messages``), as it travels."""
        request = StepSignalRequest(
            job_id=self.job_id, attempt=self.attempt, step_id=self.step_id, signal=self.signal, kill=self.kill
        )
        return dump(request)


Action = Launch | Terminate | SignalJob | NewLimit | SuspendJob | NewAllocation | StepSignal


def parse_signal(text: str | int) -> int:
    """A signal by name or number, as scancel and the API take it."""
    try:
        return core_parse_signal(text)
    except ValueError:
        raise InvalidRequest(f"Invalid signal: {text}") from None
