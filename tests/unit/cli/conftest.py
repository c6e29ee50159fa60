"""Wire dicts shaped like docs/api.md's JobWire, NodeWire and PartitionWire, rebuilt from
the real Slurm 22.05 captures in tests/fixtures/slurm-22.05 (fmt_squeue_*, fmt_sinfo_*,
fmt_scontrol_*): the same jobs, nodes and times, so the commands' output can be compared
with Slurm's line for line. The captures were taken in UTC; ``utc`` pins the zone."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# 2026-12-02T16:07:25 UTC, when `squeue` was captured.
NOW = 1796227645.0


def _t(hms: str) -> float:
    """Epoch of 2026-12-02 at ``HH:MM:SS`` UTC."""
    h, m, s = (int(x) for x in hms.split(":"))
    return 1796227642.0 + (h - 16) * 3600 + (m - 7) * 60 + (s - 22)


def _spec(**kw: Any) -> dict[str, Any]:
    spec = {
        "name": "sbatch",
        "argv": [],
        "workdir": "/var/lib/slurm-anchor/work",
        "stdout": None,
        "stderr": None,
        "stdin": None,
        "partitions": [],
        "min_nodes": None,
        "max_nodes": None,
        "ntasks": None,
        "ntasks_per_node": None,
        "cpus_per_task": 1,
        "mem_per_node": None,
        "mem_per_cpu": None,
        "mem_per_gpu": None,
        "gpus_per_node": 0,
        "gpu_type": None,
        "gpus": None,
        "gpus_per_task": None,
        "time_limit": None,
        "time_min": None,
        "exclusive": False,
        "nodelist": [],
        "exclude": [],
        "constraint": None,
        "begin_time": None,
        "hold": False,
        "requeue": None,
        "nice": 0,
        "account": None,
        "qos": None,
        "reservation": None,
        "dependency": None,
        "comment": None,
        "open_mode": None,
        "signal": None,
        "array": None,
        "kill_on_invalid_dep": False,
    }
    spec.update(kw)
    return spec


def make_job(job_id: int = 1, spec: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """A JobWire dict; pass only what a test cares about."""
    nodes = kw.pop("nodes", [])
    cpus_per_node = kw.pop("cpus_per_node", 1)
    gpus_per_node = kw.pop("gpus_per_node", 0)
    mem_per_node = kw.pop("mem_per_node", 1000)
    shape_nodes = kw.pop("shape_nodes", max(1, len(nodes)))
    alloc = [
        {
            "node": n,
            "cpus": cpus_per_node,
            "mem": mem_per_node,
            "gpu_ids": list(range(gpus_per_node)),
        }
        for n in nodes
    ]
    job: dict[str, Any] = {
        "job_id": job_id,
        "spec": _spec(**(spec or {})),
        "shape": {
            "nodes": shape_nodes,
            "cpus_per_node": cpus_per_node,
            "mem_per_node": mem_per_node,
            "gpus_per_node": gpus_per_node,
            "gpu_type": None,
            "ntasks": shape_nodes,
            "exclusive": False,
        },
        "user": "root",
        "uid": 0,
        "group": "root",
        "gid": 0,
        "submit_time": NOW - 5,
        "submit_host": "localhost",
        "partition": "gpu",
        "time_limit": None,
        "state": "PENDING",
        "reason": "None",
        "priority": 1,
        "admin_priority": None,
        "hold": None,
        "eligible_time": None,
        "start_time": None,
        "end_time": None,
        "alloc": alloc,
        "exit_code": 0,
        "exit_signal": 0,
        "restart_count": 0,
        "completing": False,
        "planned_start": None,
        "planned_nodes": [],
        "cancelled_by": None,
        "scheduler": "",
        "nodelist": "",
        "sched_nodelist": "",
        "num_nodes": shape_nodes,
        "num_cpus": shape_nodes * cpus_per_node,
        "num_tasks": shape_nodes,
        "num_gpus": shape_nodes * gpus_per_node,
        "state_code": "PD",
        "run_time": 0,
        "stdout_path": f"/var/lib/slurm-anchor/work/slurm-{job_id}.out",
        "stderr_path": f"/var/lib/slurm-anchor/work/slurm-{job_id}.out",
        "tres": "",
        "account": "root",
        "qos": "normal",
        "batch_host": None,
    }
    for key, value in kw.items():
        job[key] = value
    if nodes and not kw.get("nodelist"):
        from muster.core.hostlist import compress

        job["nodelist"] = compress(nodes)
        job["batch_host"] = nodes[0]
    return job


def reference_jobs() -> dict[int, dict[str, Any]]:
    """The jobs of the Slurm captures, as of NOW."""
    running = make_job(
        8653,
        spec=_spec(name="fmt_run", gpus_per_node=2, min_nodes=2, max_nodes=2, time_limit=600),
        nodes=["node1", "node2"],
        gpus_per_node=2,
        state="RUNNING",
        state_code="R",
        time_limit=600,
        submit_time=_t("16:07:20"),
        eligible_time=_t("16:07:20"),
        start_time=_t("16:07:22"),
        last_sched_eval=_t("16:07:22"),
        run_time=3,
        priority=4294896110,
        scheduler="Backfill",
        tres="cpu=2,mem=2000M,node=2,billing=2,gres/gpu=4",
    )
    running["shape"]["gpus_per_node"] = 2
    big = make_job(
        8654,
        spec=_spec(name="fmt_big", min_nodes=8, max_nodes=8, exclusive=True, time_limit=300),
        shape_nodes=8,
        reason="Resources",
        time_limit=300,
        submit_time=_t("16:07:22"),
        eligible_time=_t("16:07:22"),
        last_sched_eval=_t("16:07:23"),
        priority=4294896109,
        tres="cpu=8,mem=8000M,node=8,billing=8",
    )
    held = make_job(
        8656,
        spec=_spec(name="fmt_held", hold=True),
        reason="JobHeldUser",
        hold="user",
        submit_time=_t("16:07:22"),
        last_sched_eval=_t("16:07:22"),
        priority=0,
        tres="cpu=1,mem=1000M,node=1,billing=1",
    )
    done = make_job(
        8641,
        spec=_spec(name="ok"),
        nodes=["node1"],
        state="COMPLETED",
        state_code="CD",
        submit_time=_t("16:07:19"),
        eligible_time=_t("16:07:19"),
        start_time=_t("16:07:20"),
        end_time=_t("16:07:20"),
        last_sched_eval=_t("16:07:20"),
        priority=4294896120,
        tres="cpu=1,mem=1000M,node=1,billing=1",
    )
    failed = make_job(
        8642,
        spec=_spec(name="fail"),
        nodes=["node1"],
        state="FAILED",
        state_code="F",
        reason="NonZeroExitCode",
        exit_code=3,
        submit_time=_t("16:07:19"),
        eligible_time=_t("16:07:19"),
        start_time=_t("16:07:20"),
        end_time=_t("16:07:20"),
        last_sched_eval=_t("16:07:20"),
        priority=4294896119,
        tres="cpu=1,mem=1000M,node=1,billing=1",
    )
    return {j["job_id"]: j for j in (running, big, held, done, failed)}


def make_node(name: str, **kw: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "name": name,
        "addr": "127.0.0.1",
        "port": 17000 + int(name.lstrip("node") or 0),
        "state": "IDLE",
        "drain": False,
        "responding": True,
        "registered": True,
        "reason": None,
        "reason_time": None,
        "reason_user": None,
        "cpus": 32,
        "sockets": 2,
        "cores_per_socket": 16,
        "threads_per_core": 1,
        "cpus_alloc": 0,
        "real_memory": 128000,
        "mem_alloc": 0,
        "gpus": 8,
        "gpu_type": None,
        "gpus_alloc": 0,
        "gres": "gpu:8",
        "features": [],
        "partitions": ["gpu"],
        "boot_time": _t("15:24:28"),
        "last_seen": NOW,
        "agent_start_time": _t("15:33:16"),
        "jobs": [],
        "weight": 1,
        "version": "0.1.0",
    }
    node.update(kw)
    return node


def reference_nodes() -> list[dict[str, Any]]:
    nodes = []
    for i in range(1, 9):
        parts = ["gpu", "debug"] if i >= 5 else ["gpu"]
        busy = {"state": "MIXED", "cpus_alloc": 1, "mem_alloc": 1000, "gpus_alloc": 2, "jobs": [8653]} if i <= 2 else {}
        nodes.append(make_node(f"node{i}", partitions=parts, **busy))
    return nodes


def make_partition(name: str, nodes: list[str], **kw: Any) -> dict[str, Any]:
    from muster.core.hostlist import compress

    part: dict[str, Any] = {
        "name": name,
        "nodes": nodes,
        "nodelist": compress(nodes),
        "default": False,
        "state": "UP",
        "max_time": None,
        "default_time": None,
        "max_nodes": None,
        "min_nodes": 0,
        "priority_tier": 1,
        "priority_job_factor": 1,
        "allow_accounts": None,
        "allow_groups": None,
        "deny_accounts": None,
        "oversubscribe": "NO",
        "total_cpus": 32 * len(nodes),
        "total_nodes": len(nodes),
        "total_gpus": 8 * len(nodes),
        "total_mem": 128000 * len(nodes),
    }
    part.update(kw)
    return part


def reference_partitions() -> list[dict[str, Any]]:
    return [
        make_partition("gpu", [f"node{i}" for i in range(1, 9)], default=True),
        make_partition("debug", [f"node{i}" for i in range(5, 9)], max_time=3600),
    ]


REFERENCE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm-22.05")


def read_reference(name: str) -> tuple[str, str]:
    """(stdout, stderr) of a capture file."""
    path = os.path.normpath(os.path.join(REFERENCE, name))
    with open(path) as f:
        text = f.read()
    out = text.split("--- stdout ---\n", 1)[1]
    stdout, _, stderr = out.partition("--- stderr ---\n")
    return stdout, stderr


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


@pytest.fixture
def jobs() -> dict[int, dict[str, Any]]:
    return copy.deepcopy(reference_jobs())


@pytest.fixture
def nodes() -> list[dict[str, Any]]:
    return reference_nodes()


@pytest.fixture
def partitions() -> list[dict[str, Any]]:
    return reference_partitions()


@pytest.fixture
def job_factory() -> Callable[..., dict[str, Any]]:
    return make_job


@pytest.fixture
def node_factory() -> Callable[..., dict[str, Any]]:
    return make_node


@pytest.fixture
def reference() -> Callable[[str], tuple[str, str]]:
    return read_reference
