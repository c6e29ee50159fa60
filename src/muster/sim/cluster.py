"""The simulated machine, and how a trace's jobs ask for it.

A ``Cluster`` is what the scheduler's snapshot needs (``NodeView`` per node, the
partitions) plus the capacity in the trace's unit, the denominator of utilisation.
It comes from a uniform shape (``--nodes N --cpus-per-node C --gpus-per-node G``, with
missing values taken from an SWF header's ``MaxNodes``/``MaxProcs``) or from the nodes and
partitions of a slurm.conf-syntax file.

How a trace job becomes a request (``shape_for``), chosen to match what a user would type:

* SWF, ``size`` processors: ``sbatch -n size`` (one CPU per task). ``core.job.compute_shape``
  packs the tasks onto ``ceil(size / C)`` nodes, exactly as the controller would.
* GPU CSV, ``size`` GPUs and G GPUs per node: a job of up to G GPUs runs on one node with
  ``size`` GPUs; a larger one on ``ceil(size / G)`` nodes, the GPUs split evenly
  (``sbatch -N n --ntasks-per-node=g --gpus-per-node=g``: one task and one CPU per GPU, so
  CPUs never bind before GPUs when nodes have at least G CPUs).

The default machine for an SWF trace is a *processor pool*: one node of ``MaxProcs`` CPUs.
SWF records processors, not nodes, and most published SWF simulations treat the machine
as P interchangeable processors. On a machine of single-processor nodes (the KTH SP2: 100
nodes of 1 CPU, ``--nodes 100 --cpus-per-node 1``) the two models hold exactly the same
resources: no job can be fragmented, so whether a job fits now or at a time T is the same
question. They differ in one respect: on separate nodes a planned start pins *which* nodes
the waiting job will get, so a backfill candidate must avoid those very nodes, where in the
pool it only has to leave enough processors. The pool is also several times faster to
schedule (one node's availability profile instead of a hundred). docs/sim.md gives both
results for KTH.

A job that could not run even on the empty machine is not replayed (``fits``); the caller
counts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from muster.core.config import Config
from muster.core.job import JobSpec, Shape, compute_shape
from muster.sched import NodeView, PartitionView
from muster.sched.snapshot import partition_views
from muster.sched.topology import Topology

__all__ = ["Cluster", "ClusterError", "shape_for", "spec_for", "uniform_cluster"]

PARTITION = "sim"


class ClusterError(ValueError):
    """The cluster shape cannot be determined or makes no sense."""


@dataclass(slots=True)
class Cluster:
    nodes: list[NodeView]
    partitions: dict[str, PartitionView]
    default_partition: str
    description: str
    def_mem_per_cpu: int = 0  # DefMemPerCPU (MB), applied to jobs as the controller does
    topology: Topology | None = None  # --topology: placement by switches or blocks
    _fits: dict[tuple[int, int, int, int], bool] = field(default_factory=dict, repr=False)

    @property
    def total_cpus(self) -> int:
        return sum(n.cpus for n in self.partition_nodes())

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.partition_nodes())

    @property
    def max_node_cpus(self) -> int:
        return max((n.cpus for n in self.partition_nodes()), default=0)

    @property
    def max_node_gpus(self) -> int:
        return max((n.gpus for n in self.partition_nodes()), default=0)

    def partition_nodes(self) -> list[NodeView]:
        names = set(self.partitions[self.default_partition].nodes)
        return [n for n in self.nodes if n.name in names]

    def capacity(self, unit: str) -> int:
        """What utilisation divides by: CPUs for a processor trace, GPUs for a GPU trace."""
        return self.total_gpus if unit == "gpus" else self.total_cpus

    def fits(self, shape: Shape) -> bool:
        """Whether the job could run on the empty default partition."""
        key = (shape.nodes, shape.cpus_per_node, shape.gpus_per_node, shape.mem_per_node)
        known = self._fits.get(key)
        if known is not None:
            return known
        able = sum(
            1
            for n in self.partition_nodes()
            if n.available
            and n.cpus >= shape.cpus_per_node
            and n.gpus >= shape.gpus_per_node
            and n.mem >= shape.mem_per_node
        )
        self._fits[key] = able >= shape.nodes
        return self._fits[key]

    def describe(self) -> dict[str, object]:
        return {
            "description": self.description,
            "nodes": len(self.partition_nodes()),
            "cpus": self.total_cpus,
            "gpus": self.total_gpus,
            "partition": self.default_partition,
        }


def _view(
    name: str,
    index: int,
    cpus: int,
    gpus: int,
    mem: int,
    gpu_type: str | None = None,
    features: tuple[str, ...] = (),
    weight: int = 1,
) -> NodeView:
    return NodeView(
        name=name,
        index=index,
        cpus=cpus,
        mem=mem,
        gpus=gpus,
        gpu_type=gpu_type,
        features=features,
        weight=weight,
        free_cpus=cpus,
        free_mem=mem,
        free_gpu_ids=list(range(gpus)),
    )


def uniform_cluster(
    unit: str,
    header: dict[str, str] | None = None,
    nodes: int | None = None,
    cpus_per_node: int | None = None,
    gpus_per_node: int | None = None,
) -> Cluster:
    """N identical nodes, missing values taken from the SWF header or sensible defaults.

    For a processor trace: with no shape given, one node of ``MaxProcs`` CPUs (the pool, see
    the module doc); with only C, ``ceil(MaxProcs / C)`` nodes; with only N,
    ``ceil(MaxProcs / N)`` CPUs per node. For a GPU trace G defaults to 8 and C to G; N must
    be given (GPU traces do not record their machine).
    """
    header = header or {}

    def number(key: str) -> int | None:
        try:
            value = int(header.get(key.lower(), "").split()[0])
        except (ValueError, IndexError):
            return None
        return value if value > 0 else None

    for flag, value in (("--nodes", nodes), ("--cpus-per-node", cpus_per_node)):
        if value is not None and value <= 0:
            raise ClusterError(f"{flag} must be a positive number, not {value}")
    if gpus_per_node is not None and gpus_per_node < 0:
        raise ClusterError(f"--gpus-per-node must not be negative, not {gpus_per_node}")

    if unit == "gpus":
        g = 8 if gpus_per_node is None else gpus_per_node
        if g <= 0:
            raise ClusterError("a GPU trace needs --gpus-per-node of at least 1")
        if nodes is None:
            raise ClusterError(
                "GPU traces do not record their cluster's size: give --nodes N "
                f"(N x {g} GPUs; e.g. --nodes 64 for 512 GPUs)"
            )
        c = cpus_per_node if cpus_per_node is not None else g
        how = f"{nodes} nodes x {g} GPUs ({c} CPUs each)"
    else:
        g = gpus_per_node or 0
        n, c = _processor_shape(number("MaxProcs") or number("MaxNodes"), nodes, cpus_per_node)
        nodes = n
        how = (
            f"{n} node x {c} CPUs (processor pool)"
            if n == 1 and not g
            else f"{n} nodes x {c} CPUs" + (f" x {g} GPUs" if g else "")
        )
    views = [_view(f"n{i + 1}", i, c, g, 0) for i in range(nodes)]
    part = PartitionView(name=PARTITION, nodes=tuple(v.name for v in views), is_default=True)
    return Cluster(views, {PARTITION: part}, PARTITION, how)


def _processor_shape(procs: int | None, nodes: int | None, cpus: int | None) -> tuple[int, int]:
    """(nodes, CPUs per node) for a processor trace of ``procs`` processors."""
    if nodes is not None and cpus is not None:
        return nodes, cpus
    if nodes is not None:
        return nodes, -(-procs // nodes) if procs else 1
    if procs is None:
        raise ClusterError(
            "the trace header gives neither MaxProcs nor MaxNodes: give --nodes N"
            + (" as well" if cpus is not None else " (and --cpus-per-node C)")
        )
    if cpus is not None:
        return -(-procs // cpus), cpus
    return 1, procs  # the processor pool


def cluster_from_config(config: Config) -> Cluster:
    """Nodes and partitions as a slurm.conf describes them; jobs go to the default partition."""
    if not config.nodes or not config.partitions:
        raise ClusterError(f"{config.path}: defines no nodes or no partition to simulate")
    views = [
        _view(n.name, i, n.cpus, n.gpus, n.real_memory, n.gpu_type, tuple(n.features), n.weight)
        for i, n in enumerate(config.nodes)
    ]
    for view, n in zip(views, config.nodes, strict=True):
        # A node configured DOWN or DRAIN takes no work, as in the controller.
        view.available = n.state.upper() not in ("DOWN", "DRAIN", "FAIL", "FUTURE")
    parts = partition_views(config)  # as the controller sees them (account/group lists too)
    default = config.default_partition()
    assert default is not None  # partitions is not empty
    return Cluster(
        views, parts, default.name, f"{len(views)} nodes from {config.path}", def_mem_per_cpu=config.def_mem_per_cpu
    )


def spec_for(size: int, unit: str, cluster: Cluster) -> JobSpec:
    """The submission a user would make for ``size`` processors or GPUs (see module doc)."""
    if unit == "gpus":
        per_node = max(1, cluster.max_node_gpus)
        nodes = 1 if size <= per_node else -(-size // per_node)
        g = -(-size // nodes)
        return JobSpec(min_nodes=nodes, ntasks_per_node=g, gpus_per_node=g)
    return JobSpec(ntasks=size)


def shape_for(spec: JobSpec, cluster: Cluster) -> Shape:
    return compute_shape(spec, cluster.max_node_cpus, cluster.def_mem_per_cpu)
