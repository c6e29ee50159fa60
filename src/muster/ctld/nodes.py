"""Node runtime state as the controller sees it.

The configuration says what a node should be; the agent's registration says what it is;
the administrator may drain or down it. ``NodeRuntime.display_state`` folds these into
Slurm's names (IDLE, MIXED, ALLOCATED, DOWN, UNKNOWN, with DRAIN as a flag).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from muster.core.conftypes import NodeConf
from muster.core.states import NodeState


@dataclass(slots=True)
class NodeRuntime:
    name: str
    index: int
    addr: str
    port: int
    cpus: int
    real_memory: int
    gpus: int
    gpu_type: str | None
    gres: str
    features: tuple[str, ...]
    weight: int
    partitions: list[str] = field(default_factory=list)
    tmp_disk: int = 0  # TmpDisk, MB: what --tmp asks for
    registered: bool = False
    responding: bool = False
    admin_down: bool = False
    drain: bool = False
    reason: str = ""
    reason_time: float | None = None
    reason_user: str = ""
    last_seen: float | None = None
    silent: bool = False  # no heartbeat for a while, not yet SlurmdTimeout: "*" in sinfo
    # in service when the controller last knew (``ClusterState.known_up``) and not heard
    # from since this controller started: shown in that state, not UNKNOWN, until its
    # agent registers or SlurmdTimeout passes (a restart, a takeover); takes no work yet
    presumed: bool = False
    agent_start_time: float | None = None
    boot_time: float | None = None
    version: str = ""
    # ``core.confhash`` of the agent's muster.conf ("": not said, muster 0.2.0), and the
    # controller's own when the two differ ("" when they agree): ``Agents.check_config``
    config_hash: str = ""
    config_mismatch: str = ""
    # what confines jobs there, as its agent registered it (``Register.containment``;
    # "": not said): scontrol show node's Containment=, sinfo's %K
    containment: str = ""
    hostname: str = ""  # NodeHostname (Slurm's default: the node's name)
    # allocations, kept up to date by the controller's ``ClusterState`` (its one owner):
    # (job id, attempt) -> (cpus, mem, gpu ids)
    allocs: dict[tuple[int, int], tuple[int, int, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def cpus_alloc(self) -> int:
        return sum(a[0] for a in self.allocs.values())

    @property
    def mem_alloc(self) -> int:
        return sum(a[1] for a in self.allocs.values())

    @property
    def gpu_ids_alloc(self) -> set[int]:
        used: set[int] = set()
        for a in self.allocs.values():
            used.update(a[2])
        return used

    @property
    def available(self) -> bool:
        """May take new work."""
        return self.registered and self.responding and not self.admin_down and not self.drain

    def base_state(self) -> NodeState:
        if self.admin_down or (self.registered and not self.responding):
            return NodeState.DOWN
        if not self.registered and not self.presumed:
            return NodeState.UNKNOWN
        if not self.allocs:
            return NodeState.IDLE
        gpus_full = self.gpus > 0 and len(self.gpu_ids_alloc) >= self.gpus
        if self.cpus_alloc >= self.cpus or gpus_full:
            return NodeState.ALLOCATED
        return NodeState.MIXED

    def persistent(self) -> dict[str, Any]:
        """What survives a controller restart (admin decisions, not observations)."""
        return {
            "admin_down": self.admin_down,
            "drain": self.drain,
            "reason": self.reason,
            "reason_time": self.reason_time,
            "reason_user": self.reason_user,
        }


def configured_fields(nc: NodeConf, partitions: list[str]) -> dict[str, Any]:
    """What the configuration says of a node, as ``NodeRuntime`` fields: the controller's
    start (``ClusterState.load``) and ``scontrol reconfigure`` both take them from here."""
    return {
        "addr": nc.addr,
        "port": nc.port,
        "cpus": nc.cpus,
        "real_memory": nc.real_memory,
        "gpus": nc.gpus,
        "gpu_type": nc.gpu_type,
        "gres": nc.gres,
        "features": tuple(nc.features),
        "weight": nc.weight,
        "partitions": partitions,
        "tmp_disk": nc.tmp_disk,
        "hostname": nc.hostname,
    }
