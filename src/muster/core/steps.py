"""Job steps: what an ``srun`` asks of its allocation, where its tasks go, and the record
that the controller keeps (and accounting reads).

A step lives inside a running job's allocation. ``plan_step(request, shares)`` is the one
rule that places it, purely:

* it returns a ``StepLayout`` when the step fits in what the job's running steps leave
  free now;
* it returns ``StepWait`` when the step would fit the allocation but not now (another
  step holds the CPUs or GPUs it needs: the caller waits and retries, as Slurm's
  "step creation temporarily disabled");
* it raises ``StepRejected`` when the step can never fit this allocation, with Slurm's words.

Placement, in order (each rule is Slurm's unless marked *muster*):

1. Candidate nodes are the job's nodes in allocation order, less ``--exclude``, limited to
   ``--nodelist`` when given (a name outside the allocation is rejected).
2. A node's capacity in tasks is its free CPUs divided by ``--cpus-per-task``, further
   limited by free GPUs for ``--gpus-per-task`` and by ``--ntasks-per-node``. A node that
   cannot take one task is skipped. ``--exclusive`` takes only nodes where no other step
   holds anything, and holds all of the job's CPUs and GPUs there. ``--overlap`` ignores what
   other steps hold and holds nothing itself.
3. With ``-N`` the step takes the first N usable nodes; without it, the fewest first nodes
   whose capacity covers ``-n`` (*muster*: Slurm may spread further).
4. Every chosen node gets one task, then ``block`` fills nodes in order up to capacity and
   ``cyclic`` deals the rest one at a time round the nodes. Task ids are contiguous per
   node for ``block`` and dealt round the nodes for ``cyclic``. ``arbitrary`` names each
   task's node (``task_nodes``, srun's ``SLURM_HOSTFILE``): task i runs on the i-th name, the
   nodes in the order they first appear, each holding the tasks named for it.
5. GPUs: ``--gpus-per-task`` or ``--gres=gpu:N``/``--gpus-per-node`` hold that many of the
   node's free GPUs (lowest indices first); a step that asks for no GPU holds none and
   sees all of the job's GPUs on its nodes.
6. Binding (``CUDA_VISIBLE_DEVICES`` per task), Slurm's (``core.gpubind``): every task sees
   all of its node's step GPUs, so ``torch.cuda.set_device(local_rank)`` works; with
   ``--gpus-per-task=N`` each task sees its own N (``per_task:N``); ``--gpu-bind`` chooses
   otherwise (``none``, ``closest``, ``single:N``, ``per_task:N``, ``map_gpu:``,
   ``mask_gpu:``). A ``map_gpu``/``mask_gpu`` naming a GPU the step lacks on a node rejects it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from muster.core.gpubind import GpuBindError, task_gpus

__all__ = [
    "BATCH_STEP",
    "DISTRIBUTIONS",
    "NodeShare",
    "Step",
    "StepLayout",
    "StepRejected",
    "StepRequest",
    "StepState",
    "StepWait",
    "format_step_id",
    "master_port",
    "plan_step",
]

DISTRIBUTIONS = ("block", "cyclic", "arbitrary")
BATCH_STEP = -5  # the batch script's step id (Slurm's "batch"), never allocated by plan_step

# Messages as srun prints them after "Unable to create step for job N: ".
NODES_UNAVAILABLE = "Requested node configuration is not available"
TOO_MANY_CPUS = "More processors requested than permitted"
BAD_GRES = "Invalid generic resource (gres) specification"
BUSY = "Requested nodes are busy"


class StepRejected(ValueError):
    """The step can never fit the job's allocation; ``str()`` is Slurm's reason."""


@dataclass(frozen=True, slots=True)
class StepWait:
    """The step fits the allocation, but not beside the steps running now."""

    reason: str = BUSY


class StepState:
    """Step states with Slurm's names (a subset of the job states)."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    NODE_FAIL = "NODE_FAIL"
    TIMEOUT = "TIMEOUT"  # stopped at its own time limit (``srun -t`` inside an allocation)
    OUT_OF_MEMORY = "OUT_OF_MEMORY"  # its tasks' cgroups saw OOM kills (ExitCode 0:125)

    ENDED = frozenset({COMPLETED, FAILED, CANCELLED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY})


@dataclass(frozen=True, slots=True)
class StepRequest:
    """What ``srun`` asks for a step (all counts optional: see ``plan_step``)."""

    min_nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    gpus_per_task: int | None = None
    gpus_per_node: int | None = None
    gpus: int | None = None
    distribution: str = "block"
    exclusive: bool = False
    overlap: bool = False
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    gpu_bind: str | None = None
    time_limit: int | None = None  # seconds (``srun -t`` inside an allocation); None: the job's
    overcommit: bool = False  # -O: more tasks than CPUs, each node's tasks share its CPUs
    task_nodes: tuple[str, ...] = ()  # -m arbitrary: each task's node, in task order

    def __post_init__(self) -> None:
        for name in ("min_nodes", "ntasks", "ntasks_per_node"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise StepRejected(f"invalid {name.replace('_', '-')}: {value}")
        if self.cpus_per_task < 1:
            raise StepRejected(f"invalid cpus-per-task: {self.cpus_per_task}")
        if self.time_limit is not None and self.time_limit < 1:
            raise StepRejected(f"invalid time limit: {self.time_limit}")
        for name in ("gpus_per_task", "gpus_per_node", "gpus"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise StepRejected(f"invalid {name.replace('_', '-')}: {value}")
        if self.distribution not in DISTRIBUTIONS:
            raise StepRejected(f"invalid distribution: {self.distribution} (block, cyclic or arbitrary)")
        if (self.distribution == "arbitrary") != bool(self.task_nodes):
            raise StepRejected("the arbitrary distribution needs a node for each task (SLURM_HOSTFILE)")
        if self.task_nodes and self.ntasks is not None and self.ntasks != len(self.task_nodes):
            raise StepRejected(f"invalid ntasks: {self.ntasks} (the host file names {len(self.task_nodes)})")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["nodelist"] = list(self.nodelist)
        d["exclude"] = list(self.exclude)
        d["task_nodes"] = list(self.task_nodes)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepRequest:
        known = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in data.items() if k in known and v is not None}
        for key in ("nodelist", "exclude", "task_nodes"):
            if key in d:
                d[key] = tuple(d[key])
        return cls(**d)


@dataclass(frozen=True, slots=True)
class NodeShare:
    """One node of the job as steps see it: what the job has there, what steps hold."""

    name: str
    cpus: int
    gpu_ids: tuple[int, ...] = ()
    used_cpus: int = 0
    used_gpus: frozenset[int] = frozenset()

    @property
    def idle(self) -> bool:
        return self.used_cpus == 0 and not self.used_gpus


@dataclass(slots=True)
class StepLayout:
    """Where a step's tasks run. Lists are aligned with ``nodes``."""

    nodes: list[str]
    tasks: list[list[int]]  # global task ids on each node, in local order
    cpus: list[int]  # CPUs the step holds on each node (0 each with --overlap)
    gpus: list[list[int]]  # the step's GPUs on each node (held, or seen when it asked none)
    task_gpus: list[list[list[int]]]  # per node, per local task: the GPUs it is bound to
    holds_gpus: bool = False  # whether ``gpus`` are held (else only seen)
    distribution: str = "block"

    @property
    def ntasks(self) -> int:
        return sum(len(t) for t in self.tasks)

    @property
    def counts(self) -> list[int]:
        return [len(t) for t in self.tasks]

    def node_of_task(self, task: int) -> str:
        for name, ids in zip(self.nodes, self.tasks, strict=True):
            if task in ids:
                return name
        raise KeyError(task)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepLayout:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def plan_step(request: StepRequest, shares: list[NodeShare]) -> StepLayout | StepWait:
    """Place a step (see the module docstring). Raises ``StepRejected`` for never."""
    names = [s.name for s in shares]
    for name in request.nodelist:
        if name not in names:
            raise StepRejected(NODES_UNAVAILABLE)
    candidates = [
        s for s in shares if s.name not in request.exclude and (not request.nodelist or s.name in request.nodelist)
    ]
    if request.task_nodes:  # -m arbitrary: the nodes are the host file's, in its order
        order = list(dict.fromkeys(request.task_nodes))
        for name in order:
            if name not in names or name in request.exclude:
                raise StepRejected(NODES_UNAVAILABLE)
        by_name = {s.name: s for s in shares}
        candidates = [by_name[n] for n in order]
        request = dataclasses.replace(request, min_nodes=len(order), ntasks=len(request.task_nodes))
    if request.nodelist and request.min_nodes is None:
        request = dataclasses.replace(request, min_nodes=len(candidates))
    # Never: the step does not fit even an allocation where no other step runs.
    idle = [NodeShare(s.name, s.cpus, s.gpu_ids) for s in candidates]
    outcome = _place(request, idle)
    if isinstance(outcome, str):
        raise StepRejected(outcome)
    if request.overlap:
        return outcome
    now = _place(request, candidates)
    return StepWait() if isinstance(now, str) else now


def _capacity(request: StepRequest, share: NodeShare) -> tuple[int, list[int]]:
    """(tasks the node can take, its free GPU ids) for this request."""
    if request.exclusive and not share.idle:
        return 0, []
    if request.overlap:
        free_cpus, free_gpus = share.cpus, list(share.gpu_ids)
    else:
        free_cpus = share.cpus - share.used_cpus
        free_gpus = [g for g in share.gpu_ids if g not in share.used_gpus]
    cap = free_cpus // request.cpus_per_task
    if request.overcommit and free_cpus >= 1:
        cap = request.ntasks or 1  # any number of tasks on a node with a CPU free
    if request.gpus_per_task:
        cap = min(cap, len(free_gpus) // request.gpus_per_task)
    if request.gpus_per_node and len(free_gpus) < request.gpus_per_node:
        cap = 0
    if request.ntasks_per_node:
        cap = min(cap, request.ntasks_per_node)
    return max(0, cap), free_gpus


def _place(request: StepRequest, shares: list[NodeShare]) -> StepLayout | str:
    """The placement on these shares, or the reason it fails."""
    if not shares:
        return NODES_UNAVAILABLE
    caps = [_capacity(request, s) for s in shares]
    usable = [i for i, c in enumerate(caps) if c[0] >= 1]
    wanted_nodes = request.min_nodes
    ntasks = request.ntasks
    if ntasks is None:
        # Neither -n nor -N: every node of the allocation (Slurm's default inside a job).
        wanted_nodes = wanted_nodes or len(shares)
        ntasks = wanted_nodes * (request.ntasks_per_node or 1)
    if request.task_nodes:  # every node the host file names, each with its tasks
        chosen = list(range(len(shares)))
        counts = [request.task_nodes.count(s.name) for s in shares]
        if any(caps[i][0] < counts[i] for i in chosen):
            return _why_short(request, shares)
    elif wanted_nodes is not None:
        if wanted_nodes > len(shares):
            return NODES_UNAVAILABLE
        wanted_nodes = min(wanted_nodes, ntasks)  # Slurm: "setting nnodes to ntasks"
        if len(usable) < wanted_nodes:
            return _why_short(request, shares)
        chosen = usable[:wanted_nodes]
    else:
        chosen, total = [], 0
        for i in usable:
            chosen.append(i)
            total += caps[i][0]
            if total >= ntasks:
                break
        if len(chosen) > ntasks:
            chosen = chosen[:ntasks]
    if sum(caps[i][0] for i in chosen) < ntasks:
        return _why_short(request, shares)

    if request.task_nodes:
        tasks = [[t for t, n in enumerate(request.task_nodes) if n == shares[i].name] for i in chosen]
    else:
        counts = _counts(ntasks, [caps[i][0] for i in chosen], request.distribution)
        tasks = _task_ids(counts, request.distribution)
    layout_nodes, cpus, gpus, task_gpus = [], [], [], []
    holds_gpus = bool(request.gpus_per_task or request.gpus_per_node or request.gpus or request.exclusive)
    per_node_total = -(-request.gpus // len(chosen)) if request.gpus else 0
    for k, i in enumerate(chosen):
        share = shares[i]
        free_gpus = caps[i][1]
        n = counts[k]
        layout_nodes.append(share.name)
        if request.overlap:
            cpus.append(0)
        elif request.exclusive:
            cpus.append(share.cpus)
        else:
            held = n * request.cpus_per_task
            cpus.append(min(held, share.cpus - share.used_cpus) if request.overcommit else held)
        if request.gpus_per_task:
            mine = free_gpus[: n * request.gpus_per_task]
        elif request.gpus_per_node:
            mine = free_gpus[: request.gpus_per_node]
        elif per_node_total:
            if len(free_gpus) < per_node_total:
                return BAD_GRES
            mine = free_gpus[:per_node_total]
        else:
            mine = list(share.gpu_ids)  # held with --exclusive, else only seen
        mine = sorted(mine)
        gpus.append(mine)
        task_gpus.append(_bind(request, mine, n))
    return StepLayout(
        nodes=layout_nodes,
        tasks=tasks,
        cpus=cpus,
        gpus=gpus,
        task_gpus=task_gpus,
        holds_gpus=holds_gpus and not request.overlap,
        distribution=request.distribution,
    )


def _why_short(request: StepRequest, shares: list[NodeShare]) -> str:
    """Which resource is short, in Slurm's words."""
    if request.min_nodes is not None and request.min_nodes > len(shares):
        return NODES_UNAVAILABLE
    gpus_needed = request.gpus_per_task or request.gpus_per_node
    if gpus_needed and all(len(s.gpu_ids) < gpus_needed for s in shares):
        return BAD_GRES
    if request.gpus_per_task:
        gpu_cap = sum(len(s.gpu_ids) // request.gpus_per_task for s in shares)
        if request.ntasks and gpu_cap < request.ntasks:
            return BAD_GRES
    return TOO_MANY_CPUS


def _counts(ntasks: int, caps: list[int], distribution: str) -> list[int]:
    counts = [1] * len(caps)
    left = ntasks - len(caps)
    if distribution == "cyclic":
        while left > 0:
            for i in range(len(caps)):
                if left and counts[i] < caps[i]:
                    counts[i] += 1
                    left -= 1
    else:
        for i in range(len(caps)):
            extra = min(left, caps[i] - counts[i])
            counts[i] += extra
            left -= extra
    return counts


def _task_ids(counts: list[int], distribution: str) -> list[list[int]]:
    tasks: list[list[int]] = [[] for _ in counts]
    if distribution == "cyclic":
        next_id, remaining = 0, list(counts)
        while any(remaining):
            for i in range(len(counts)):
                if remaining[i]:
                    tasks[i].append(next_id)
                    next_id += 1
                    remaining[i] -= 1
    else:
        next_id = 0
        for i, n in enumerate(counts):
            tasks[i] = list(range(next_id, next_id + n))
            next_id += n
    return tasks


def _bind(request: StepRequest, gpus: list[int], ntasks: int) -> list[list[int]]:
    """The GPUs each local task sees (rule 6 of the module docstring, ``core.gpubind``)."""
    try:
        return task_gpus(request.gpu_bind, gpus, ntasks, request.gpus_per_task)
    except GpuBindError as e:
        raise StepRejected(str(e)) from None


def master_port(job_id: int, step_id: int) -> int:
    """A rendezvous port every task of a step computes alike, from the job and step ids.

    It stays in 12000-29999: below Linux's ephemeral range (32768-60999), so that it does not
    collide with outgoing connections, and away from well-known service ports. Two steps share
    a port only when their job ids differ by a multiple of 1125 and their step ids by a
    multiple of 16, and then only matters if they share a first node at the same time.
    """
    return 12000 + (job_id % 1125) * 16 + step_id % 16


def format_step_id(job_id: int, step_id: int) -> str:
    return f"{job_id}.batch" if step_id == BATCH_STEP else f"{job_id}.{step_id}"


@dataclass(slots=True)
class Step:
    """A step as the controller records it (one row of the store's ``steps`` table)."""

    job_id: int
    step_id: int
    attempt: int  # the job's restart_count when the step ran
    name: str
    uid: int
    user: str
    state: str
    start_time: float
    layout: StepLayout
    request: StepRequest = field(default_factory=StepRequest)
    end_time: float | None = None
    exit_code: int = 0
    exit_signal: int = 0
    argv: list[str] = field(default_factory=list)
    cpus_per_task: int = 1
    srun_host: str = ""
    srun_pid: int = 0
    partition: str = ""
    time_limit: int | None = None
    mem: int = 0  # MB over all of the step's nodes (the job's memory on them)
    # What its tasks used, as srun reports it (sacct): max_rss_kb, max_rss_node,
    # max_rss_task, ave_rss_kb, user_cpu, system_cpu.
    usage: dict[str, Any] | None = None

    @property
    def id_text(self) -> str:
        return format_step_id(self.job_id, self.step_id)

    @property
    def active(self) -> bool:
        return self.state == StepState.RUNNING

    @property
    def num_cpus(self) -> int:
        return sum(self.layout.cpus) or self.layout.ntasks * self.cpus_per_task

    @property
    def num_gpus(self) -> int:
        return sum(len(g) for g in self.layout.gpus) if self.layout.holds_gpus else 0

    def to_dict(self) -> dict[str, Any]:
        """The fields, plus flat derived ones for readers that do not rebuild a ``Step``
        (accounting): ``nodes``, ``ntasks``, ``ncpus``, ``gpus`` (a count), ``signal``."""
        d = dataclasses.asdict(self)
        d["request"] = self.request.to_dict()
        d.update(
            nodes=list(self.layout.nodes),
            ntasks=self.layout.ntasks,
            ncpus=self.num_cpus,
            gpus=self.num_gpus,
            signal=self.exit_signal,
        )
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        known = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in data.items() if k in known}
        d["layout"] = StepLayout.from_dict(d["layout"])
        d["request"] = StepRequest.from_dict(d.get("request") or {})
        return cls(**d)
