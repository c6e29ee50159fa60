"""Listings in columns: only the fields a command's format needs (``?fields=a,b``), one
short row per item instead of a whole wire dict, so that ``sinfo`` at thousands of nodes
costs the controller, the socket and the command's JSON decoding a few values per node.

``GET /v1/nodes?fields=name,state`` answers ``{"fields": [...], "rows": [[...], ...],
"now": t}``: each row holds, in order, exactly what ``wire.node_wire`` would hold under
those names (a test compares them field by field, so the two cannot drift apart). An
unknown field is refused (``InvalidRequest``); ``jobs``, the only field that needs a scan
of the jobs, is computed only when asked for.

``PartitionCache`` keeps what a partition's wire dict lists that does not change between
reconfigurations (its node names and their hostlist), so that a listing of partitions
costs its sums, not a hostlist compression of thousands of names per request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

from muster.core.config import Config
from muster.core.errors import InvalidRequest
from muster.core.hostlist import compress
from muster.core.job import Job
from muster.ctld.nodes import NodeRuntime

__all__ = ["NODE_FIELDS", "PartitionCache", "jobs_by_node", "node_rows"]

# name -> its value for one node, as node_wire gives it ("jobs": jobs_by_node's).
NODE_FIELDS: dict[str, Callable[[NodeRuntime], Any]] = {
    "name": attrgetter("name"),
    "addr": attrgetter("addr"),
    "hostname": lambda n: n.hostname or n.name,
    "port": attrgetter("port"),
    "state": lambda n: str(n.base_state()),
    "drain": attrgetter("drain"),
    "responding": lambda n: (n.responding and not n.silent) or not n.registered,
    "registered": attrgetter("registered"),
    "reason": attrgetter("reason"),
    "reason_time": attrgetter("reason_time"),
    "reason_user": attrgetter("reason_user"),
    "cpus": attrgetter("cpus"),
    "cpus_alloc": attrgetter("cpus_alloc"),
    "real_memory": attrgetter("real_memory"),
    "mem_alloc": attrgetter("mem_alloc"),
    "gpus": attrgetter("gpus"),
    "gpu_type": attrgetter("gpu_type"),
    "gpus_alloc": lambda n: len(n.gpu_ids_alloc),
    "gres": attrgetter("gres"),
    "features": lambda n: list(n.features),
    "partitions": attrgetter("partitions"),
    "boot_time": attrgetter("boot_time"),
    "last_seen": attrgetter("last_seen"),
    "agent_start_time": attrgetter("agent_start_time"),
    "jobs": lambda n: [],  # replaced by the jobs on the node when asked for
    "weight": attrgetter("weight"),
    "version": attrgetter("version"),
    "config_hash": attrgetter("config_hash"),
    "config_mismatch": attrgetter("config_mismatch"),
    "containment": attrgetter("containment"),
}


def jobs_by_node(jobs: Iterable[Job]) -> dict[str, list[int]]:
    """The active jobs on each node (what ``node_wire`` lists as ``jobs``)."""
    out: dict[str, list[int]] = {}
    for job in jobs:
        if job.is_active:
            for n in job.nodes:
                out.setdefault(n, []).append(job.job_id)
    return out


def node_rows(nodes: Iterable[NodeRuntime], fields: list[str], jobs: Iterable[Job]) -> dict[str, Any]:
    """``{"fields": fields, "rows": [...]}`` for ``nodes``; an unknown field is refused."""
    unknown = [f for f in fields if f not in NODE_FIELDS]
    if unknown:
        raise InvalidRequest(f"unknown node field(s): {','.join(unknown)} (known: {','.join(NODE_FIELDS)})")
    getters = [NODE_FIELDS[f] for f in fields]
    if "jobs" in fields:
        on = jobs_by_node(jobs)
        getters[fields.index("jobs")] = lambda n: on.get(n.name, [])
    if len(getters) == 1:
        only = getters[0]
        return {"fields": fields, "rows": [[only(n)] for n in nodes]}
    return {"fields": fields, "rows": [[get(n) for get in getters] for n in nodes]}


class PartitionCache:
    """A partition's node names and hostlist, kept while the configuration is the same
    object (``scontrol reconfigure`` swaps in a new one)."""

    __slots__ = ("_config", "_lists")

    def __init__(self) -> None:
        self._config: Config | None = None
        self._lists: dict[str, tuple[list[str], str]] = {}

    def lists(self, config: Config, name: str, nodes: Sequence[str]) -> tuple[list[str], str]:
        """(node names, their hostlist) of partition ``name``: computed once per config."""
        if config is not self._config:
            self._config, self._lists = config, {}
        hit = self._lists.get(name)
        if hit is None:
            hit = self._lists[name] = (list(nodes), compress(nodes))
        return hit
