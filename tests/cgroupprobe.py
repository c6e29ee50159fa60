"""What the cgroup tests need of this machine (root, writable cgroup v1 hierarchies), and
the one-node cluster that confines its jobs in cgroup v1, shared by their modules."""

from __future__ import annotations

import os
from collections.abc import Iterator

from harness import Harness
from muster.cluster.local import ClusterShape

CGROUP = "/sys/fs/cgroup"
CONFINED = {"ProctrackType": "proctrack/cgroup", "TaskPlugin": "task/cgroup"}


def v1_unusable(controllers: tuple[str, ...] = ("freezer", "memory")) -> str | None:
    """Why these cgroup v1 hierarchies cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root"
    for ctl in controllers:
        probe = os.path.join(CGROUP, ctl, f"muster-probe-{os.getpid()}")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError as exc:
            return f"no writable cgroup v1 {ctl} hierarchy: {exc}"
    return None


def confined_v1_cluster() -> Iterator[Harness]:
    """A one-node cluster whose jobs are tracked and limited in cgroup v1 (a module fixture's body)."""
    h = Harness(ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=4, mem_per_node=4000), settings=CONFINED)
    h.cluster.create(h.shape, h.settings)
    with open(os.path.join(os.path.dirname(h.cluster.conf_path), "cgroup.conf"), "w") as f:
        f.write("CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\n")
    try:
        h.up()
        yield h
    finally:
        h.down()
