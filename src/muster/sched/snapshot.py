"""The scheduler's input: an immutable-by-convention picture of the cluster at ``now``.

The controller (``ctld.view``) and the simulator build it; ``sched`` only reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from muster.core.job import Job


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


@dataclass(slots=True)
class Snapshot:
    nodes: list[NodeView]
    partitions: dict[str, PartitionView]
    pending: list[Job]  # state PENDING (held ones included: the scheduler gives reasons)
    running: list[Job]  # active jobs: RUNNING, or ended but still completing
    # job_id -> terminal state, for dependencies on jobs that have left memory too
    finished: dict[int, str] = field(default_factory=dict)
