"""The messages between the controller and its agents, as typed models.

Every message a daemon receives from another is validated against its model here before
any code reads it: a field that is missing, renamed, misspelled or of the wrong type is
refused (HTTP 400 naming the field) instead of silently falling back to a default. Fields
that an older or newer peer may not send are optional with the default written once, here.

Agent -> controller: ``Register`` (once per agent start, and after the controller was
away), ``Heartbeat`` (every HeartbeatInterval: what runs, what ended and is being reported,
faults of the node, its health, job progress), ``JobDone`` (one per ended run of a batch
script, retried until acknowledged).

Controller -> agent: ``LaunchRequest``, ``TerminateRequest``, ``SignalRequest``,
``UpdateRequest`` (``dispatch`` sends them; ``agent.app`` serves them).

The commands never import this module (it imports pydantic): their messages are in
``client`` and ``wirejson``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "Attempt",
    "Fault",
    "Health",
    "Heartbeat",
    "Heartbeats",
    "JobDone",
    "JobsDone",
    "LaunchRequest",
    "LaunchRequests",
    "Register",
    "SignalRequest",
    "TerminateRequest",
    "UpdateRequest",
    "Usage",
    "MessageError",
    "read",
]

# ``[job_id, restart_count]``: one run of a job (an attempt) on a node.
Attempt = tuple[int, int]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


M = TypeVar("M", bound=_Message)


class Register(_Message):
    node: str = Field(min_length=1)
    addr: str | None = None
    port: int | None = Field(None, ge=0, le=65535)
    # What the node has: found on the machine (``musterd --gpu-detect nvidia``) or, when the
    # agent emulates (``emulated``), the configuration's figures. None: not said.
    cpus: int | None = Field(None, ge=0)
    sockets: int | None = Field(None, ge=0)
    cores_per_socket: int | None = Field(None, ge=0)
    threads_per_core: int | None = Field(None, ge=0)
    real_memory: int | None = Field(None, ge=0)
    emulated: bool = False
    gpus: int | None = Field(None, ge=0)  # None: as configured
    gpu_type: str | None = None
    gpu_source: str | None = None
    gpu_list: list[Any] = []
    running: list[Attempt] = []
    agent_start_time: float | None = None
    boot_time: float | None = None
    version: str = ""


class Fault(_Message):
    """Something wrong with the node itself, found by its agent."""

    kind: str  # "prolog", "epilog", "gpu"
    reason: str = ""
    job_id: int | None = None
    attempt: int | None = None
    gpu: int | None = None  # the GPU's index, for a GPU fault


class Health(_Message):
    """The last HealthCheckProgram's verdict (``reason`` starts ``HealthCheck: ``)."""

    ok: bool
    reason: str = ""


class Heartbeat(_Message):
    node: str = Field(min_length=1)
    running: list[Attempt] = []
    ended: list[Attempt] = []  # ended here, reports on their way
    faults: list[Fault] = []
    health: Health | None = None
    # what jobs said of their progress since the last heartbeat (``ctld.training``)
    progress: list[dict[str, Any]] | None = None


class Heartbeats(_Message):
    """The heartbeats of the nodes one agent process hosts (``agent.host``), in one request."""

    heartbeats: list[Heartbeat]


class Usage(_Message):
    max_rss_kb: float = Field(ge=0)
    user_cpu: float = Field(ge=0)
    system_cpu: float = Field(ge=0)


class JobDone(_Message):
    """One ended run of a batch script (or a launch that failed), as its agent saw it."""

    job_id: int
    restart_count: int = Field(0, ge=0)
    node: str | None = None
    exit_code: int = 0
    signal: int = 0
    # why it ended when the agent ended it: cancel, timeout, requeue, node_fail, preempt...
    terminated_by: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    reason: str | None = None
    usage: Usage | None = None
    # a launch that failed, and whose fault it was: "node", "job", "prolog", "stale"
    launch_failure: str | None = None


class JobsDone(_Message):
    """The reports an agent has pending, in one request (committed together)."""

    reports: list[JobDone]


class LaunchRequest(_Message):
    job: dict[str, Any]  # ``Job.to_dict()``: the agent reads what it needs to start it
    cluster: str = ""
    ctld: str | None = None  # the sending controller's address (informative)
    kill_wait: float | None = None


class LaunchRequests(_Message):
    """Several launches to one node, in one request (those of one scheduling pass)."""

    launches: list[LaunchRequest]


class TerminateRequest(_Message):
    job_id: int
    restart_count: int | None = None  # None: whichever attempt runs
    reason: str = "cancel"
    kill_wait: float | None = None
    job: dict[str, Any] | None = None  # what the node's Epilog is told of the job


class SignalRequest(_Message):
    job_id: int
    signal: int | str = 15
    batch_only: bool = False
    # the batch shell too, at the same time as the tasks (preemption's warning, as Slurm
    # sends SIGTERM to the whole job): a trap in the script runs before its children die
    whole_job: bool = False


class UpdateRequest(_Message):
    job_id: int
    time_limit: int | None = None


class MessageError(ValueError):
    """A message that does not fit its model; ``str()`` names the field and the fault."""


def read(model: type[M], body: M | Mapping[str, Any]) -> M:
    """``body`` as a ``model`` (an already typed message passes as it is)."""
    if isinstance(body, model):
        return body
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise MessageError(f"invalid {model.__name__}: {where}: {first.get('msg', 'invalid value')}") from None
