"""The pre-flight gate's checks on one node (``agent.preflight``): GPU device files, free
disk, the clock against the controller's, the site's PreflightProgram; when a job is gated."""

from __future__ import annotations

import asyncio
import os
import pathlib

from muster.agent.preflight import Preflight
from muster.core.config import parse_config

CONF = """
ClusterName=t
PreflightProgram={program}
PreflightGpuDevices={root}/dev/%n/nvidia%i
PreflightMinFreeMB=1
PreflightMaxClockOffset=10
NodeName=node[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=gated Nodes=ALL Preflight=YES
PartitionName=open Nodes=ALL Default=YES
"""


def job(**kw: object) -> dict:  # type: ignore[type-arg]
    base = {"job_id": 7, "partition": "open", "spec": {}, "alloc": [{"node": "node1", "gpu_ids": [0, 1]}]}
    base.update(kw)
    return base


def gate(tmp_path: pathlib.Path, script: str = "exit 0", now: float = 1000.0) -> Preflight:
    program = tmp_path / "preflight.sh"
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)
    for i in (0, 1):
        (tmp_path / "dev" / "node1").mkdir(parents=True, exist_ok=True)
        (tmp_path / "dev" / "node1" / f"nvidia{i}").touch()
    config = parse_config(CONF.format(program=program, root=tmp_path), "t.conf")
    p = Preflight.from_config(config, "node1")
    p.clock = lambda: now
    return p


def run(p: Preflight, j: dict, spool: str) -> tuple[bool, str]:  # type: ignore[type-arg]
    r = asyncio.run(p.run(j, spool))
    return r.ok, r.reason


def test_a_job_is_gated_by_its_option_or_its_partition(tmp_path: pathlib.Path) -> None:
    p = gate(tmp_path)
    assert not p.wanted(job())
    assert p.wanted(job(spec={"preflight": True}))
    assert p.wanted(job(partition="gated"))


def test_a_healthy_node_passes(tmp_path: pathlib.Path) -> None:
    assert run(gate(tmp_path), job(start_time=995.0), str(tmp_path / "spool" / "job7")) == (True, "")


def test_a_missing_gpu_device_fails_naming_it(tmp_path: pathlib.Path) -> None:
    p = gate(tmp_path)
    os.unlink(tmp_path / "dev" / "node1" / "nvidia1")
    ok, why = run(p, job(), str(tmp_path))
    assert not ok and why == f"preflight failed: GPU 1: no device file ({tmp_path}/dev/node1/nvidia1)"


def test_too_little_disk_and_a_clock_behind_fail(tmp_path: pathlib.Path) -> None:
    p = gate(tmp_path)
    p.min_free_mb = 1 << 40
    ok, why = run(p, job(), str(tmp_path / "spool" / "job7"))
    assert not ok and why.startswith("preflight failed: disk: ") and "PreflightMinFreeMB" in why
    p = gate(tmp_path, now=1000.0)
    ok, why = run(p, job(start_time=1060.0), str(tmp_path))  # stamped 60 s ahead of this node
    assert not ok and why == "preflight failed: clock: 60 s behind the controller's (PreflightMaxClockOffset=10)"


def test_the_site_program_fails_with_its_first_line(tmp_path: pathlib.Path) -> None:
    p = gate(tmp_path, 'echo "nccl all-reduce failed on $SLURMD_NODENAME for job $SLURM_JOB_ID"; exit 3')
    ok, why = run(p, job(), str(tmp_path))
    assert not ok and "nccl all-reduce failed on node1 for job 7" in why, why
