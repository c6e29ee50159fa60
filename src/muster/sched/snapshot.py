"""The scheduler's input: an immutable-by-convention picture of the cluster at ``now``.

The controller (``ctld.view``) and the simulator build it; ``sched`` only reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from muster.core.config import Config
from muster.core.conftypes import PartitionConf
from muster.core.hostlist import expand
from muster.core.job import Job
from muster.sched.config import preempt_mode
from muster.sched.topology import Topology


@dataclass(slots=True)
class ReservationView:
    """An advance reservation (``scontrol create reservation``) as the scheduler sees it.

    ``start``/``end`` are epoch seconds of the first window. ``flags`` holds Slurm's names
    (``MAINT``, ``IGNORE_JOBS``, ``DAILY``, ``WEEKLY``, ...); ``DAILY``/``WEEKLY`` repeat
    the window every day/week (see ``sched.reservations.windows``). A job may use the
    reservation when its user is in ``users`` or its account in ``accounts``.
    """

    name: str
    start: float
    end: float
    nodes: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()


@dataclass(slots=True)
class NodeView:
    """One node as the scheduler sees it.

    ``available`` is False for nodes that may not take new work (DOWN, DRAIN, not
    responding, FUTURE). Free resources already subtract every active job (running or
    completing).
    """

    name: str
    index: int  # position in the configured node order (stand-in for topology)
    cpus: int
    mem: int
    gpus: int
    gpu_type: str | None = None
    features: tuple[str, ...] = ()
    weight: int = 1
    available: bool = True
    free_cpus: int = 0
    free_mem: int = 0
    free_gpu_ids: list[int] = field(default_factory=list)
    running_jobs: int = 0  # number of active jobs on the node (for --exclusive)
    # The leaf switch the node hangs from (topology.conf's SwitchName), when known:
    # multi-node jobs then span as few leaf switches as possible.
    switch: str | None = None
    tmp_disk: int = 0  # TmpDisk in MB: nodes with less do not take a job's --tmp


@dataclass(slots=True)
class PartitionView:
    name: str
    nodes: tuple[str, ...]
    state: str = "UP"  # UP, DOWN, DRAIN, INACTIVE
    max_time: int | None = None
    default_time: int | None = None
    max_nodes: int | None = None
    min_nodes: int = 0
    priority_tier: int = 1
    priority_job_factor: int = 1
    exclusive: bool = False
    allow_accounts: tuple[str, ...] | None = None
    deny_accounts: tuple[str, ...] | None = None
    allow_groups: tuple[str, ...] | None = None
    is_default: bool = False  # Default=YES: where a job without -p goes
    # Preemption: the partition's PreemptMode (None: the cluster's) and GraceTime (s).
    preempt_mode: str | None = None
    grace_time: int = 0


@dataclass(slots=True)
class Snapshot:
    nodes: list[NodeView]
    partitions: dict[str, PartitionView]
    pending: list[Job]  # state PENDING (held ones included: the scheduler gives reasons)
    running: list[Job]  # active jobs: RUNNING, or ended but still completing
    # job_id -> terminal state, for dependencies on jobs that have left memory too (only
    # read with ``get``, by dependencies: the controller answers it on demand)
    finished: Mapping[int, str] = field(default_factory=dict)
    reservations: list[ReservationView] = field(default_factory=list)
    # Fair-share factor in [0, 1] by association (``account|user``), user name or account
    # name, looked up in that order (filled by accounting; a job found under none of them
    # gets ``fairshare_default``).
    fairshare: dict[str, float] = field(default_factory=dict)
    fairshare_default: float = 0.5
    # QOS name -> the QOS's Priority value (normalised by the largest one).
    qos_priority: dict[str, int] = field(default_factory=dict)
    # job_id -> priority set by an admin (``scontrol update job priority=``); fixed, not
    # recomputed. 0 holds the job, as in Slurm.
    priority_overrides: dict[int, int] = field(default_factory=dict)
    # Job arrays: array job id -> {task id: job id}, for dependencies on arrays and their
    # tasks (``ID``, ``ID_TASK``, ``aftercorr``); arrays that left memory may stay listed.
    arrays: dict[int, dict[int, int]] = field(default_factory=dict)
    # The network topology (topology.conf), when one is configured: multi-node jobs are
    # placed in as few leaf switches or blocks as possible (``sched.topology``).
    topology: Topology | None = None
    # QOS name -> what it may preempt and how its jobs are preempted (preempt/qos).
    qos_preempt: dict[str, QosPreempt] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QosPreempt:
    """A QOS's preemption settings (sacctmgr's Preempt, PreemptMode, GraceTime,
    PreemptExemptTime). ``mode`` None: the partition's, else the cluster's."""

    preempt: tuple[str, ...] = ()
    mode: str | None = None
    grace_time: int = 0
    exempt_time: int | None = None


def spares(part: PartitionConf) -> frozenset[str]:
    """A partition's ``SpareNodes=`` pool (muster's; checked when the configuration is read):
    nodes kept out of its jobs' placement, for replacing failed nodes of running jobs
    (``sched.replace``, docs/recovery.md)."""
    text = part.params.get("SpareNodes", "").strip()
    return frozenset(expand(text)) if text else frozenset()


def partition_views(config: Config) -> dict[str, PartitionView]:
    """The partitions as the scheduler sees them, from the configuration: the one builder
    the controller (``ctld.view``) and the simulator (``sim.cluster``) both use."""
    default = config.default_partition()
    return {
        p.name: PartitionView(
            name=p.name,
            # the partition's SpareNodes= pool is kept for replacements (``sched.replace``)
            nodes=tuple(p.nodes) if not p.params.get("SpareNodes") else tuple(n for n in p.nodes if n not in spares(p)),
            state=p.state.upper(),
            max_time=p.max_time,
            default_time=p.default_time,
            max_nodes=p.max_nodes,
            min_nodes=p.min_nodes,
            priority_tier=p.priority_tier,
            priority_job_factor=p.priority_job_factor,
            exclusive=p.exclusive,
            allow_accounts=tuple(p.allow_accounts) if p.allow_accounts is not None else None,
            deny_accounts=tuple(p.deny_accounts) if p.deny_accounts is not None else None,
            allow_groups=tuple(p.allow_groups) if p.allow_groups is not None else None,
            is_default=default is not None and p.name == default.name,
            preempt_mode=preempt_mode(p.params.get("PreemptMode")) if p.params.get("PreemptMode") else None,
            grace_time=p.grace_time,
        )
        for p in config.partitions
    }
