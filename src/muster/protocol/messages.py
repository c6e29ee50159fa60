"""The messages between the controller and its agents, as typed models.

Every message a daemon receives from another is validated against its model here before
any code reads it: a field that is missing, renamed, misspelled or of the wrong type is
refused (HTTP 400 naming the field) instead of silently falling back to a default. Fields
that an older or newer peer may not send are optional with the default written once, here;
a field this build does not know (a newer peer's) is ignored. ``dump`` writes a message for
a peer's protocol (``versions``): what that protocol's reader does not know stays out.

Agent -> controller: ``Register`` (once per agent start, and after the controller was
away), ``Heartbeat`` (every HeartbeatInterval: what runs, what ended and is being reported,
faults of the node, its health, job progress), ``JobDone`` (one per ended run of a batch
script, retried until acknowledged).

Controller -> agent: ``LaunchRequest``, ``TerminateRequest``, ``SignalRequest``,
``StepSignalRequest``, ``UpdateRequest``, ``RegisterAgainRequest`` (``dispatch`` sends them; ``agent.app`` serves them).

The commands never import this module (it imports pydantic): their messages are in
``client`` and ``wirejson``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from muster.protocol.versions import PROTOCOL

__all__ = [
    "AllocationRequest",
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
    "RegisterAgainRequest",
    "SignalRequest",
    "StepSignalRequest",
    "SuspendRequest",
    "TerminateRequest",
    "UpdateRequest",
    "Usage",
    "EpilogAlloc",
    "EpilogJob",
    "EpilogSpec",
    "LaunchAlloc",
    "LaunchJob",
    "LaunchShape",
    "LaunchSpec",
    "MessageError",
    "dump",
    "read",
]

# ``[job_id, restart_count]``: one run of a job (an attempt) on a node.
Attempt = tuple[int, int]


class _Message(BaseModel):
    # A newer peer of a protocol this build accepts may send fields it does not know:
    # they are ignored, never refused (``versions``). Fields a protocol added are listed in
    # ``since`` (field -> the protocol that added it): ``dump`` leaves them out for a peer
    # of an older protocol, whose reader (muster 0.2.0's) refuses unknown fields.
    model_config = ConfigDict(extra="ignore", frozen=True)

    since: ClassVar[dict[str, int]] = {}
    keep_none: ClassVar[bool] = False  # None values travel (else: left out, the reader's default)


M = TypeVar("M", bound=_Message)


class Register(_Message):
    since: ClassVar[dict[str, int]] = {
        "sockets": 3,
        "cores_per_socket": 3,
        "threads_per_core": 3,
        "emulated": 3,
        "config_hash": 3,
        "containment": 3,
    }

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
    # ``core.confhash`` of the agent's muster.conf; None: not said (muster 0.2.0)
    config_hash: str | None = None
    # What confines the node's jobs (``agent.cgroups.containment``): ``cgroup/v1:freezer,
    # memory,...``, ``none``, or ``unusable: <why>``; None: not said (muster 0.2.0)
    containment: str | None = None


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
    since: ClassVar[dict[str, int]] = {"config_hash": 3}

    node: str = Field(min_length=1)
    running: list[Attempt] = []
    ended: list[Attempt] = []  # ended here, reports on their way
    faults: list[Fault] = []
    health: Health | None = None
    # what jobs said of their progress since the last heartbeat (``ctld.training``)
    progress: list[dict[str, Any]] | None = None
    config_hash: str | None = None  # as in ``Register``: a file changed since is seen


class Heartbeats(_Message):
    """The heartbeats of the nodes one agent process hosts (``agent.host``), in one request."""

    heartbeats: list[Heartbeat]


class Usage(_Message):
    max_rss_kb: float = Field(ge=0)
    user_cpu: float = Field(ge=0)
    system_cpu: float = Field(ge=0)


class JobDone(_Message):
    """One ended run of a batch script (or a launch that failed), as its agent saw it."""

    keep_none: ClassVar[bool] = True  # every field said, as 0.2.0's agents wrote reports

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


class LaunchSpec(_Message):
    """What the user asked for (``core.job.JobSpec``'s fields), as the agent reads it."""

    since: ClassVar[dict[str, int]] = {"mail_type": 3, "mail_user": 3, "rlimits": 3, "preflight": 3}

    name: str = "sbatch"
    script: str | None = None
    argv: list[str] = []
    workdir: str = "/"
    stdout: str | None = None
    stderr: str | None = None
    stdin: str | None = None
    environment: dict[str, str] = {}
    partitions: list[str] = []
    min_nodes: int | None = None
    max_nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    mem_per_node: int | None = None
    mem_per_cpu: int | None = None
    mem_per_gpu: int | None = None
    gpus_per_node: int = 0
    gpu_type: str | None = None
    gpus: int | None = None
    gpus_per_task: int | None = None
    time_limit: int | None = None
    time_min: int | None = None
    exclusive: bool = False
    nodelist: list[str] = []
    exclude: list[str] = []
    constraint: str | None = None
    begin_time: float | None = None
    hold: bool = False
    requeue: bool | None = None
    nice: int = 0
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    dependency: str | None = None
    comment: str | None = None
    open_mode: str | None = None
    signal: str | None = None
    array: str | None = None
    kill_on_invalid_dep: bool = False
    interactive: bool = False
    hang_timeout: int | None = None
    switches: int | None = None
    switch_wait: int | None = None
    segment: int | None = None
    exclusive_topo: bool = False
    min_cpus: int | None = None
    tmp_disk: int | None = None
    overcommit: bool = False
    deadline: float | None = None
    no_kill: bool = False
    expedite: bool = False
    mail_type: list[str] = []
    mail_user: str | None = None
    # The submit shell's soft limits to set in the job's processes (``core.rlimits``:
    # name -> value, -1 unlimited); None: none. Not sent to a protocol 2 agent (``since``).
    rlimits: dict[str, int] | None = None
    # --preflight: the pre-flight gate before the script (``agent.preflight``)
    preflight: bool = False


class LaunchShape(_Message):
    """What the job needs on each node (``core.job.Shape``)."""

    nodes: int = 1
    cpus_per_node: int = 1
    mem_per_node: int = 0
    gpus_per_node: int = 0
    gpu_type: str | None = None
    ntasks: int = 1
    exclusive: bool = False


class LaunchAlloc(_Message):
    """The job's share of one node (``core.job.NodeAlloc``)."""

    node: str
    cpus: int = 0
    mem: int = 0
    gpu_ids: list[int] = []


class LaunchJob(_Message):
    """A job as its batch host's agent is told of it (``core.job.Job.to_dict()``, and for
    a heterogeneous job's leader every component's): what the agent needs to start it, its
    environment and its hooks. ``None`` values travel (muster 0.2.0's agents read them)."""

    keep_none: ClassVar[bool] = True

    job_id: int
    spec: LaunchSpec = LaunchSpec()
    shape: LaunchShape = LaunchShape()
    user: str = ""
    uid: int | None = None
    group: str = ""
    gid: int | None = None
    submit_time: float = 0.0
    submit_host: str = "localhost"
    partition: str = ""
    time_limit: int | None = None
    state: str = "PENDING"
    reason: str = "None"
    priority: int = 0
    admin_priority: int | None = None
    hold: str | None = None
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    alloc: list[LaunchAlloc] = []
    exit_code: int = 0
    exit_signal: int = 0
    restart_count: int = 0
    completing: bool = False
    planned_start: float | None = None
    planned_nodes: list[str] = []
    cancelled_by: int | None = None
    scheduler: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_task_count: int | None = None
    array_task_min: int | None = None
    array_task_max: int | None = None
    array_task_step: int | None = None
    array_throttle: int = 0
    het_job_id: int | None = None
    het_job_offset: int | None = None
    unknown_deps: list[int] = []
    usage: dict[str, float] | None = None
    launch_failures: int = 0
    system_comment: str | None = None
    progress: dict[str, Any] | None = None
    attempts: list[dict[str, Any]] = []
    preempted_by: int | None = None
    preempt_deadline: float | None = None
    preempt_mode: str | None = None
    held_nodes: list[str] = []
    hold_until: float | None = None
    expedited: bool = False
    het_components: list[LaunchJob] | None = None


class EpilogSpec(_Message):
    name: str = "sbatch"
    workdir: str = "/"


class EpilogAlloc(_Message):
    node: str
    gpu_ids: list[int] = []


class EpilogJob(_Message):
    """What a node's Epilog is told of the job whose end reaches it (``TerminateRequest.job``)."""

    keep_none: ClassVar[bool] = True

    user: str = ""
    uid: int | None = None
    gid: int | None = None
    partition: str = ""
    spec: EpilogSpec = EpilogSpec()
    alloc: list[EpilogAlloc] = []


class LaunchRequest(_Message):
    since: ClassVar[dict[str, int]] = {"allreduce": 3}

    job: LaunchJob
    cluster: str = ""
    ctld: str | None = None  # the sending controller's address (informative)
    kill_wait: float | None = None
    # ``/v1/preflight`` only: this node also runs its rank of the gate's all-reduce across
    # the job's nodes (``agent.allreduce``; ``PreflightAllReduce=YES``)
    allreduce: bool = False


class LaunchRequests(_Message):
    """Several launches to one node, in one request (those of one scheduling pass)."""

    launches: list[LaunchRequest]


class TerminateRequest(_Message):
    job_id: int
    restart_count: int | None = None  # None: whichever attempt runs
    reason: str = "cancel"
    kill_wait: float | None = None
    job: EpilogJob | None = None  # what the node's Epilog is told of the job


class SignalRequest(_Message):
    job_id: int
    signal: int | str = 15
    batch_only: bool = False
    # the batch shell too, at the same time as the tasks (preemption's warning, as Slurm
    # sends SIGTERM to the whole job): a trap in the script runs before its children die
    whole_job: bool = False
    # a preempted job's deadline (epoch seconds): the agent writes it where
    # ``muster.progress.preempt_deadline()`` reads it, before it signals (an agent that
    # does not know the field only signals)
    deadline: float | None = None


class StepSignalRequest(_Message):
    """``scancel N.S``: a signal for one step's tasks on a node (``kill``: the step is being
    killed, not only signalled)."""

    job_id: int
    attempt: int = 0
    step_id: int
    signal: int | str = 15
    kill: bool = False


class RegisterAgainRequest(_Message):
    """A controller that just started or took over asks an agent to register with it now
    (protocol 3; a 0.2.0 agent answers 404 and registers at its next contact)."""

    controller: StrictInt | None = None  # its index among the SlurmctldHost lines


class AllocationRequest(_Message):
    """A running job's allocation changed (``/v1/allocation``, protocol 3): a failed node was
    replaced by another (``ctld.replacement``). Sent to the job's other nodes: the batch
    host's record takes the new allocation, and every attempt of the job there finds it
    beside its progress file (``muster.progress.allocation()``)."""

    job_id: int
    attempt: int = 0
    alloc: list[LaunchAlloc] = []
    old: str = ""  # the failed node
    new: str = ""  # the node that replaced it
    cause: str = ""
    time: float | None = None


class UpdateRequest(_Message):
    job_id: int
    time_limit: int | None = None


class SuspendRequest(_Message):
    """``scontrol suspend``/``resume`` for a job's processes on a node (``/v1/suspend``,
    protocol 3): frozen (``suspend``) or thawed."""

    job_id: int
    suspend: bool = True


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


def dump(msg: BaseModel, protocol: int = PROTOCOL) -> dict[str, Any]:
    """``msg`` as the JSON object that a peer of ``protocol`` reads: the fields added after
    that protocol left out (Nomad's minimum-version gate: a new field reaches only the
    peers that understand it), and ``None`` values left out (the reader's default) except
    where the model keeps them (a job's). One ``model_dump`` with an exclusion planned once
    per message type and protocol."""
    cls = type(msg)
    exclude, keeps = _plan(cls, protocol)
    data = msg.model_dump(exclude=exclude or None, exclude_none=not keeps)
    if keeps:
        _drop_none(cls, data)
    return data


@functools.cache
def _plan(cls: type[BaseModel], protocol: int) -> tuple[dict[str, Any], bool]:
    """The nested ``exclude`` of ``cls``'s fields newer than ``protocol``, and whether a
    model in it keeps its ``None`` values."""
    since: dict[str, int] = getattr(cls, "since", {})
    keeps: bool = getattr(cls, "keep_none", False)
    exclude: dict[str, Any] = {}
    itself: list[tuple[str, bool]] = []
    for name, field in cls.model_fields.items():
        if since.get(name, 0) > protocol:
            exclude[name] = True
            continue
        for sub, many in _models(field.annotation):
            if sub is cls:  # a job's het_components: jobs without components of their own
                itself.append((name, many))
                continue
            inner, sub_keeps = _plan(sub, protocol)
            keeps = keeps or sub_keeps
            if inner:
                exclude[name] = {"__all__": inner} if many else inner
    own = dict(exclude)
    for name, many in itself:
        if own:
            exclude[name] = {"__all__": own} if many else own
    return exclude, keeps


def _models(annotation: Any, many: bool = False) -> list[tuple[type[BaseModel], bool]]:
    """The message types in a field's annotation, each with whether it is a list of them."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, many)]
    origin = get_origin(annotation)
    if origin is dict:
        return []
    many = many or origin in (list, tuple)
    return [found for arg in get_args(annotation) for found in _models(arg, many)]


def _drop_none(cls: type[BaseModel], data: dict[str, Any]) -> None:
    """Leave out ``None`` values where ``cls`` (and the models in it) do not keep them."""
    if getattr(cls, "keep_none", False):
        return
    for name in [k for k, v in data.items() if v is None]:
        del data[name]
    for name, value in data.items():
        field = cls.model_fields.get(name)
        for sub, _many in _models(field.annotation) if field is not None else []:
            for item in value if isinstance(value, list | tuple) else [value]:
                if isinstance(item, dict):
                    _drop_none(sub, item)
