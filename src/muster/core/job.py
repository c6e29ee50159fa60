"""The job record: what was asked for (``JobSpec``), what it needs per node (``Shape``)
and what happened to it (``Job``).

``Job`` is owned by the controller; ``sched`` reads it and never writes it. Everything
here converts to and from plain JSON-able dicts (``to_dict``/``from_dict``) because the
store, the API and the simulator all move jobs as data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from muster.core.rlimits import NAMES as RLIMIT_NAMES
from muster.core.rlimits import shared as shared_rlimits
from muster.core.states import JobState, Reason
from muster.core.timefmt import MAX_TIME_LIMIT

# Bounds a front door (the controller's API, a REST submit) checks on each field: Slurm's
# counts are 32-bit; megabytes and GPU totals may be any real size, still exact as a float.
COUNT = 2**31 - 1
BIG = 2**53
NICE = 2147483645  # Slurm's +/- NICE_OFFSET - 3


def _check(default: Any = None, factory: Any = None, **bounds: Any) -> Any:
    """A JobSpec field with what a front door checks of it (pydantic ``Field`` keywords:
    ``ge``, ``le``, ``max_length``, ``pattern``...). The checks live here, once, next to
    the field; ``ctld.api`` builds its submission schema from them."""
    if factory is not None:
        return field(default_factory=factory, metadata={"check": bounds})
    return field(default=default, metadata={"check": bounds})


@dataclass(slots=True)
class JobSpec:
    """A validated submission. Time values are seconds; memory values are MB.

    This is the one schema of a job request: the API's submission model is derived from
    these fields and their checks (``ctld.bodies.SpecModel``), so a new option is one field
    here plus the code that uses it (a scheduler filter, the agent)."""

    name: str = _check("sbatch", max_length=1024)
    script: str | None = _check(max_length=512 * 1024 * 1024)  # max_script_size decides
    argv: list[str] = _check(factory=list)
    workdir: str = _check("/", min_length=1, pattern="^/")  # absolute
    stdout: str | None = None
    stderr: str | None = None
    stdin: str | None = None
    environment: dict[str, str] = _check(factory=dict)
    partitions: list[str] = _check(factory=list)
    min_nodes: int | None = _check(ge=1, le=COUNT)
    max_nodes: int | None = _check(ge=1, le=COUNT)
    ntasks: int | None = _check(ge=1, le=COUNT)
    ntasks_per_node: int | None = _check(ge=1, le=COUNT)
    cpus_per_task: int = _check(1, ge=1, le=COUNT)
    mem_per_node: int | None = _check(ge=0, le=BIG)
    mem_per_cpu: int | None = _check(ge=0, le=BIG)
    mem_per_gpu: int | None = _check(ge=0, le=BIG)
    gpus_per_node: int = _check(0, ge=0, le=COUNT)
    gpu_type: str | None = None
    gpus: int | None = _check(ge=0, le=BIG)
    gpus_per_task: int | None = _check(ge=0, le=BIG)
    time_limit: int | None = _check(ge=1, le=MAX_TIME_LIMIT)
    time_min: int | None = _check(ge=1, le=MAX_TIME_LIMIT)
    exclusive: bool = False
    nodelist: list[str] = _check(factory=list)
    exclude: list[str] = _check(factory=list)
    constraint: str | None = None
    begin_time: float | None = None
    hold: bool = False
    requeue: bool | None = None
    nice: int = _check(0, ge=-NICE, le=NICE)
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    dependency: str | None = None
    comment: str | None = None
    open_mode: str | None = _check(pattern="^(append|truncate)$")
    signal: str | None = None
    array: str | None = None
    kill_on_invalid_dep: bool = False
    # An allocation held by srun or salloc (Slurm's BatchFlag=0): no batch script is
    # launched; the command that holds it ends it (see muster.ctld.steps).
    interactive: bool = False
    # Seconds without reported progress after which a job that reports progress is
    # signalled, then requeued as Hung (``--hang-timeout``; see muster.ctld.training).
    hang_timeout: int | None = _check(ge=1, le=MAX_TIME_LIMIT)
    # Topology (``sched.topology``): ``--switches=N[@wait]``: at most N leaf switches,
    # waiting up to ``switch_wait`` seconds (None: SchedulerParameters=max_switch_wait)
    # for them; ``--segment=S``: nodes in segments of S, each inside one block.
    switches: int | None = _check(ge=1, le=COUNT)
    switch_wait: int | None = _check(ge=0, le=MAX_TIME_LIMIT)
    segment: int | None = _check(ge=1, le=COUNT)
    # --exclusive=topo: whole nodes, and no other job in the leaf switches or blocks it uses
    exclusive_topo: bool = False
    # --mincpus: at least this many CPUs on each node (the per-node CPU count grows to it);
    # --tmp: at least this much TmpDisk (MB) on each node.
    min_cpus: int | None = _check(ge=1, le=COUNT)
    tmp_disk: int | None = _check(ge=0, le=BIG)
    # -O/--overcommit: CPUs are allocated as for one task per node, whatever -n says.
    overcommit: bool = False
    # --deadline (epoch seconds): a pending job that can no longer end by then ends DEADLINE.
    deadline: float | None = None
    # -k/--no-kill: a failed node (not the batch host) is taken out of the running job's
    # allocation instead of ending the job.
    no_kill: bool = False
    # ``--requeue=expedite``: after a node failure the job is requeued at the front of the
    # queue and its surviving nodes are held for it (see docs/preemption.md).
    expedite: bool = False
    # ``--preflight`` (muster's): the pre-flight gate runs on the batch host before the
    # script (``agent.preflight``; also every job of a partition with ``Preflight=YES``).
    preflight: bool = False
    # ``--spare-nodes=N[@SIG]``: up to N times, a failed node of the running job (not its
    # batch host) is replaced in the allocation by a free node of its partition, the job
    # keeping its id (``ctld.replacement``, docs/recovery.md); ``replace_signal``: the
    # signal (a name or number) its batch script and tasks get then. 0: requeue as before.
    spare_nodes: int = _check(0, ge=0, le=COUNT)
    replace_signal: str | None = _check(max_length=16)
    # --mail-type (``core.mailtypes``' names, ALL expanded) and --mail-user (default: the
    # submitting user; MailDomain appended to a name without "@"): see ``ctld.mailnotes``.
    mail_type: list[str] = _check(factory=list, max_length=16)
    mail_user: str | None = _check(max_length=1024)
    # The submit shell's soft resource limits that propagate (``core.rlimits``: name ->
    # value, -1 unlimited), applied to the batch script and every task; None: none travel.
    rlimits: dict[str, int] | None = _check(max_length=len(RLIMIT_NAMES))

    def __post_init__(self) -> None:
        if self.rlimits:  # one dict per distinct set of limits, shared by the jobs that have it
            self.rlimits = shared_rlimits(self.rlimits)

    def to_dict(self) -> dict[str, Any]:
        # Shallow copies by hand: dataclasses.asdict deep-copies and is ~10x slower, which
        # shows when squeue lists thousands of jobs.
        d = {name: getattr(self, name) for name in _SPEC_FIELDS}
        for name in ("argv", "partitions", "nodelist", "exclude", "mail_type"):
            d[name] = list(d[name])
        d["environment"] = dict(self.environment)
        if self.rlimits is not None:
            d["rlimits"] = dict(self.rlimits)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(slots=True)
class Shape:
    """What a job needs: ``nodes`` nodes, each with at least these free resources."""

    nodes: int = 1
    cpus_per_node: int = 1
    mem_per_node: int = 0
    gpus_per_node: int = 0
    gpu_type: str | None = None
    ntasks: int = 1
    exclusive: bool = False

    @property
    def total_cpus(self) -> int:
        return self.nodes * self.cpus_per_node

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def total_mem(self) -> int:
        return self.nodes * self.mem_per_node


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def compute_shape(spec: JobSpec, max_node_cpus: int, def_mem_per_cpu: int = 0) -> Shape:
    """Turn Slurm's many ways of asking (-N, -n, --ntasks-per-node, -c, --gpus*, --mem*)
    into a per-node requirement.

    Tasks are packed onto as few nodes as ``-N`` allows: with ``-n`` alone the node count
    grows only when the tasks' CPUs do not fit on the largest node (``max_node_cpus``).
    Raises ValueError when the options contradict each other.
    """
    cpt = spec.cpus_per_task
    nodes = spec.min_nodes or 1
    if spec.ntasks_per_node is not None:
        ntasks = spec.ntasks if spec.ntasks is not None else spec.ntasks_per_node * nodes
        if spec.min_nodes is None and spec.ntasks is not None:
            nodes = max(1, _ceil_div(spec.ntasks, spec.ntasks_per_node))
        tasks_per_node = spec.ntasks_per_node
    elif spec.ntasks is not None:
        ntasks = spec.ntasks
        if spec.min_nodes is None and max_node_cpus > 0 and not spec.overcommit:
            nodes = max(1, _ceil_div(ntasks * cpt, max_node_cpus))
        if ntasks < nodes:
            raise ValueError(f"Number of tasks ({ntasks}) is less than the number of nodes ({nodes})")
        tasks_per_node = _ceil_div(ntasks, nodes)
    else:
        ntasks = nodes
        tasks_per_node = 1
    if spec.max_nodes is not None and nodes > spec.max_nodes:
        raise ValueError("Minimum node count exceeds the maximum node count")

    # With --overcommit (and no --exclusive) a node's CPUs are counted for one task.
    cpu_tasks = 1 if spec.overcommit and not spec.exclusive else tasks_per_node
    cpus = max(cpu_tasks * cpt, spec.min_cpus or 0)
    gpus = spec.gpus_per_node
    if spec.gpus is not None:
        gpus = max(gpus, _ceil_div(spec.gpus, nodes))
    if spec.gpus_per_task is not None:
        gpus = max(gpus, spec.gpus_per_task * tasks_per_node)

    if spec.mem_per_node is not None:
        mem = spec.mem_per_node
    elif spec.mem_per_cpu is not None:
        mem = spec.mem_per_cpu * cpus
    elif spec.mem_per_gpu is not None:
        mem = spec.mem_per_gpu * gpus
    else:
        mem = def_mem_per_cpu * cpus
    return Shape(
        nodes=nodes,
        cpus_per_node=cpus,
        mem_per_node=mem,
        gpus_per_node=gpus,
        gpu_type=spec.gpu_type,
        ntasks=ntasks,
        exclusive=spec.exclusive,
    )


@dataclass(slots=True)
class NodeAlloc:
    """What one node gives a running job."""

    node: str
    cpus: int
    mem: int
    gpu_ids: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Job:
    job_id: int
    spec: JobSpec
    shape: Shape
    user: str
    uid: int
    group: str
    gid: int
    submit_time: float
    submit_host: str = "localhost"
    partition: str = ""
    time_limit: int | None = None
    state: JobState = JobState.PENDING
    reason: Reason = Reason.NONE
    priority: int = 0
    admin_priority: int | None = None  # scontrol update job priority=
    hold: str | None = None  # "user" or "admin"
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    alloc: list[NodeAlloc] = field(default_factory=list)
    exit_code: int = 0
    exit_signal: int = 0
    restart_count: int = 0
    completing: bool = False
    planned_start: float | None = None
    planned_nodes: list[str] = field(default_factory=list)
    cancelled_by: int | None = None
    scheduler: str = ""
    # Job arrays (see ``core.arrays``): set on every task of an array, None otherwise.
    # The count/min/max/step describe the whole array (SLURM_ARRAY_TASK_*).
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_task_count: int | None = None
    array_task_min: int | None = None
    array_task_max: int | None = None
    array_task_step: int | None = None
    array_throttle: int = 0  # ``--array=...%N``: at most N tasks of the array run at once
    # Heterogeneous jobs (see ``core.hetjob``): set on every component, None otherwise. The
    # leader's id (the first component's) and this component's offset from it (0, 1, ...);
    # components take consecutive ids, so component k's job id is het_job_id + k.
    het_job_id: int | None = None
    het_job_offset: int | None = None
    # Dependency job ids that named no job at submission: never satisfied (Slurm 22.05
    # accepts such a job and leaves it pending).
    unknown_deps: list[int] = field(default_factory=list)
    # What the batch script used, from its agent's report when it ended (sacct's MaxRSS,
    # UserCPU, SystemCPU, TotalCPU): {"max_rss_kb", "user_cpu", "system_cpu"}.
    usage: dict[str, float] | None = None
    # Launches that failed through a fault of the node (each requeues the job elsewhere;
    # too many hold it); and what the system says of the job (scontrol's SystemComment,
    # sacct's SystemComment): e.g. why its launch failed.
    launch_failures: int = 0
    system_comment: str | None = None
    # What the running attempt reported of its progress (``muster.progress``), as the
    # controller merged it from its nodes' heartbeats; and one summary per ended attempt
    # (``core.goodput``), so that goodput spans requeues and survives restarts.
    progress: dict[str, Any] | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    # Preemption (``sched.preempt``, ``ctld.preemption``). A victim in its grace time
    # carries its preemptor and when it is killed; a preemptor waiting for its victims, or
    # an expedited job requeued after a node failure, holds nodes until ``hold_until``
    # (nobody else starts on them meanwhile). ``expedited``: first in the queue.
    preempted_by: int | None = None
    preempt_deadline: float | None = None
    preempt_mode: str | None = None  # REQUEUE or CANCEL, what happens at the deadline
    # when the victim was told (its grace began): a checkpoint it reports after this ends
    # the grace at once (the checkpoint handshake, ``ctld.preemption``)
    preempt_time: float | None = None
    held_nodes: list[str] = field(default_factory=list)
    hold_until: float | None = None
    expedited: bool = False
    # In-allocation replacements of failed nodes (``ctld.replacement``), oldest first:
    # {"old", "new", "cause", "time", "detected", "attempt"} (times: epoch seconds).
    replacements: list[dict[str, Any]] = field(default_factory=list)

    # ``scontrol suspend``: when the current suspension began (None: not suspended; the
    # job stays RUNNING in the lifecycle and keeps its resources, and every view shows it
    # SUSPENDED: ``display_state``), the seconds this attempt spent suspended before, which
    # do not count against its time limit, and when it was last suspended or resumed
    # (scontrol's SuspendTime). ``core.lifecycle.suspend``/``resume`` set them.
    suspended_at: float | None = None
    suspended_secs: float = 0.0
    suspend_time: float | None = None
    # ``scancel --signal=STOP`` (all its tasks stopped), until ``--signal=CONT``: shown
    # STOPPED, as Slurm shows it; unlike a suspension its time keeps counting.
    stopped: bool = False

    def run_seconds(self, now: float) -> float:
        """Seconds the job has run (scontrol's RunTime, squeue's TIME, sacct's Elapsed):
        from its start to ``now`` (or its end), less the time it spent suspended."""
        if self.start_time is None:
            return 0.0
        end = now if self.state is JobState.RUNNING else (self.end_time if self.end_time is not None else now)
        suspended = self.suspended_secs + (max(0.0, end - self.suspended_at) if self.suspended_at is not None else 0.0)
        return max(0.0, end - self.start_time - suspended)

    @property
    def display_state(self) -> JobState:
        """The state commands show: SUSPENDED for a running job that is suspended."""
        if self.state is JobState.RUNNING:
            if self.suspended_at is not None:
                return JobState.SUSPENDED
            if self.stopped:
                return JobState.STOPPED
        return self.state

    @property
    def nodes(self) -> list[str]:
        return [a.node for a in self.alloc]

    @property
    def batch_host(self) -> str | None:
        return self.alloc[0].node if self.alloc else None

    @property
    def is_active(self) -> bool:
        """Holds resources (running, or finished but still being cleaned up)."""
        return self.state is JobState.RUNNING or self.completing

    def expected_end(self) -> float | None:
        if self.start_time is None or self.time_limit is None:
            return None
        return self.start_time + self.time_limit + self.suspended_secs  # suspended time is not counted

    def take(self, other: Job) -> None:
        """Become ``other`` field by field (the same job as the store last committed it),
        keeping this object, which indexes and views refer to."""
        for name in _JOB_FIELDS:
            setattr(self, name, getattr(other, name))

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in _JOB_FIELDS}
        d["spec"] = self.spec.to_dict()
        d["shape"] = {name: getattr(self.shape, name) for name in _SHAPE_FIELDS}
        d["alloc"] = [{"node": a.node, "cpus": a.cpus, "mem": a.mem, "gpu_ids": list(a.gpu_ids)} for a in self.alloc]
        d["planned_nodes"] = list(self.planned_nodes)
        d["held_nodes"] = list(self.held_nodes)
        d["replacements"] = [dict(r) for r in self.replacements]
        d["state"] = str(self.state)
        d["reason"] = str(self.reason)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        d = dict(data)
        d["spec"] = JobSpec.from_dict(d["spec"])
        d["shape"] = Shape(**d["shape"])
        d["alloc"] = [NodeAlloc(**a) for a in d.get("alloc", [])]
        d["state"] = JobState(d["state"])
        d["reason"] = Reason(d["reason"]) if d.get("reason") in Reason._value2member_map_ else Reason.NONE
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(JobSpec))
_SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(Shape))
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
