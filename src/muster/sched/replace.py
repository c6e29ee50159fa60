"""Which node replaces a running job's failed node (in-allocation replacement, docs/recovery.md).

Pure: the controller (``ctld.replacement``) describes the failed node's share of the job
(``Need``) and the partition's nodes as they are now (``Candidate``), and gets back the
node to swap in with the GPU indices the job takes there, or None (then the job is
requeued as before). The order of preference:

1. never a node that cannot take work (down, drained, not responding), one the job
   already holds, one it excludes, or one that does not fit the failed node's share
   (CPUs, memory, GPUs of the right type, whole node for an exclusive job, features);
2. a node in the failed node's leaf switch or base block (``sched.topology`` unit); when
   the failed node is outside the topology, the unit that holds most of the job's nodes;
3. then a node of the partition's spare pool (``SpareNodes=``) before any other idle node;
4. then the lighter ``Weight``, then the node's place in the configuration (``index``).

So a spare in the same leaf switch wins, then any free node in that leaf switch, then a
spare elsewhere, then any free node elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from muster.sched.topology import Topology

__all__ = ["Candidate", "Need", "choose_replacement"]


@dataclass(frozen=True, slots=True)
class Need:
    """The failed node's share of the job: what its replacement must give."""

    cpus: int
    mem: int  # MB
    gpus: int
    gpu_type: str | None = None
    whole_node: bool = False  # --exclusive: the replacement must be idle
    features: frozenset[str] = frozenset()  # every one of them (a plain --constraint=a&b)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node of the job's partition, as it is now."""

    name: str
    index: int  # its place in the configuration: the last tie-break
    usable: bool  # registered, responding, not down, not drained
    free_cpus: int
    free_mem: int
    free_gpu_ids: tuple[int, ...]
    gpu_type: str | None = None
    idle: bool = True  # nothing allocated on it
    spare: bool = False  # in the partition's SpareNodes= pool
    weight: int = 1
    features: frozenset[str] = frozenset()


def _fits(c: Candidate, need: Need) -> bool:
    if not c.usable or c.free_cpus < need.cpus or c.free_mem < need.mem:
        return False
    if need.whole_node and not c.idle:
        return False
    if len(c.free_gpu_ids) < need.gpus:
        return False
    if need.gpus and need.gpu_type and c.gpu_type != need.gpu_type:
        return False
    return need.features <= c.features


def _home_unit(failed: str, job_nodes: list[str], topology: Topology | None) -> int | None:
    if topology is None:
        return None
    unit = topology.unit_of.get(failed)
    if unit is not None:
        return unit
    counts: dict[int, int] = {}
    for n in job_nodes:
        u = topology.unit_of.get(n)
        if u is not None:
            counts[u] = counts.get(u, 0) + 1
    if not counts:
        return None
    return min(counts, key=lambda u: (-counts[u], u))


def choose_replacement(
    failed: str,
    need: Need,
    candidates: Iterable[Candidate],
    job_nodes: list[str],
    exclude: Iterable[str] = (),
    topology: Topology | None = None,
) -> tuple[str, tuple[int, ...]] | None:
    """The node that replaces ``failed`` in a job holding ``job_nodes`` (``failed``
    among them), and the GPU indices the job takes there (the lowest free ones); None
    when no candidate fits (see the module docstring for the order)."""
    barred = set(job_nodes) | set(exclude) | {failed}
    home = _home_unit(failed, job_nodes, topology)
    best: tuple[tuple[int, int, int, int], Candidate] | None = None
    for c in candidates:
        if c.name in barred or not _fits(c, need):
            continue
        unit = topology.unit_of.get(c.name) if topology is not None else None
        key = (0 if home is not None and unit == home else 1, 0 if c.spare else 1, c.weight, c.index)
        if best is None or key < best[0]:
            best = (key, c)
    if best is None:
        return None
    chosen = best[1]
    return chosen.name, tuple(sorted(chosen.free_gpu_ids)[: need.gpus])
