"""The pre-flight gate with real daemons (docs/recovery.md): a job with ``--preflight``
whose batch host fails the gate (the site's PreflightProgram, or a GPU without its device
file) never starts its script there: the node is drained with the evidence, recorded in the
failure ledger (kind ``preflight``), and the job requeued, not held; without the option,
nothing is checked; on healthy nodes the gated job runs.

PreflightProgram fails where a flag file names the node; GPU device files are emulated per
node (``PreflightGpuDevices=<root>/dev/%n/nvidia%i``). One cluster serves the file; each test
puts its nodes back.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = [pytest.mark.integration, pytest.mark.faults]

PROGRAM = """#!/bin/sh
if [ -e "{flags}/node-$SLURMD_NODENAME" ]; then
  echo "preflight refuses $SLURMD_NODENAME"
  exit 1
fi
exit 0
"""
NODES = ("node1", "node2", "node3")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    root = tempfile.mkdtemp(prefix="muster-preflight-")
    flags = os.path.join(root, "flags")
    os.makedirs(flags)
    for name in NODES:
        os.makedirs(os.path.join(root, "dev", name))
        open(os.path.join(root, "dev", name, "nvidia0"), "w").close()
    program = os.path.join(root, "preflight.sh")
    with open(program, "w") as f:
        f.write(PROGRAM.format(flags=flags))
    os.chmod(program, 0o755)
    h = Harness(
        ClusterShape(nodes=len(NODES), gpus_per_node=1, cpus_per_node=2, mem_per_node=4000),
        root=root,
        settings={
            "SlurmdTimeout": "10",
            "KillWait": "2",
            "PreflightProgram": program,
            "PreflightGpuDevices": os.path.join(root, "dev", "%n", "nvidia%i"),
            "PreflightMinFreeMB": "1",
        },
    )
    h.flags = flags  # type: ignore[attr-defined]
    try:
        h.up()  # inside: a cluster that fails to start is stopped too
        yield h
    finally:
        h.down()


def node(h: Harness, name: str) -> dict:  # type: ignore[type-arg]
    return h.cluster.api("GET", f"/v1/nodes?name={name}")["nodes"][0]  # type: ignore[no-any-return]


def drained(h: Harness, name: str) -> dict:  # type: ignore[type-arg]
    def reached() -> dict | None:  # type: ignore[type-arg]
        n = node(h, name)
        return n if n["drain"] else None

    return wait_for(reached, 60, interval=0.2, what=f"{name} drained")


def resume(h: Harness, name: str) -> None:
    assert h.run(["scontrol", "update", f"nodename={name}", "state=resume"]).returncode == 0
    wait_for(lambda: not node(h, name)["drain"], 30, interval=0.2, what=f"{name} resumed")


def refused_on(h: Harness, name: str, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    """A gated job pinned to ``name``: requeued (not held) once the gate failed there."""
    out = os.path.join(h.workdir, f"ran-{name}")
    job = h.sbatch("--preflight", "-w", name, *extra, "--wrap", f"echo ran > {out}")
    n = drained(h, name)
    j = h.wait_job(job, lambda j: j["restart_count"] >= 1 and j["state"] == "PENDING", timeout=60)
    assert not j.get("hold"), j
    assert not os.path.exists(out)  # the script never started
    h.run(["scancel", str(job)])
    return job, n


def test_a_failing_preflight_program_drains_the_node_with_its_output(cluster: Harness) -> None:
    h = cluster
    flag = os.path.join(h.flags, "node-node1")  # type: ignore[attr-defined]
    open(flag, "w").close()
    try:
        job, n = refused_on(h, "node1")
        assert n["reason"].startswith("preflight failed: PreflightProgram error: "), n
        assert n["reason"].endswith(": preflight refuses node1"), n
        record = h.cluster.api("GET", "/v1/nodes/node1/failures")["failures"][-1]
        assert (record["kind"], record["job_id"], record["attribution"]) == ("preflight", job, "node")
        shown = h.run(["scontrol", "show", "node", "node1"]).stdout
        assert f"Kind=preflight JobId={job} Attribution=node Action=drained" in shown, shown
        resume(h, "node1")
        plain = h.sbatch("-w", "node1", "--wrap", "true")  # no --preflight: nothing is checked
        assert h.wait_job(plain, timeout=60)["state"] == "COMPLETED"
    finally:
        os.unlink(flag)


def test_a_gpu_without_its_device_file_fails_the_gate(cluster: Harness) -> None:
    h = cluster
    device = os.path.join(h.root, "dev", "node2", "nvidia0")
    os.unlink(device)
    try:
        _job, n = refused_on(h, "node2", "--gres=gpu:1")
        assert n["reason"] == f"preflight failed: GPU 0: no device file ({device})", n
    finally:
        open(device, "w").close()
    resume(h, "node2")


def test_a_gated_job_runs_on_healthy_nodes(cluster: Harness) -> None:
    h = cluster
    job = h.sbatch("--preflight", "-N2", "--gres=gpu:1", "--wrap", "true")
    assert h.wait_job(job, timeout=60)["state"] == "COMPLETED"


def test_a_node_that_is_not_the_batch_host_is_gated_before_the_launch(cluster: Harness) -> None:
    h = cluster
    flag = os.path.join(h.flags, "node-node3")  # type: ignore[attr-defined]
    open(flag, "w").close()
    out = os.path.join(h.workdir, "ran-three")
    try:
        job = h.sbatch("--preflight", "-N3", "--wrap", f"echo ran > {out}")
        n = drained(h, "node3")
        assert n["reason"].endswith(": preflight refuses node3"), n
        j = h.wait_job(job, lambda j: j["restart_count"] >= 1 and j["state"] == "PENDING", timeout=60)
        assert not j.get("hold") and not os.path.exists(out)  # requeued before the batch script ran
        assert not node(h, "node1")["drain"] and not node(h, "node2")["drain"]
        h.run(["scancel", str(job)])
    finally:
        os.unlink(flag)
    resume(h, "node3")


def test_a_spare_replaces_a_node_that_fails_the_gate_before_the_script_runs(cluster: Harness) -> None:
    h = cluster
    flag = os.path.join(h.flags, "node-node2")  # type: ignore[attr-defined]
    open(flag, "w").close()
    out = os.path.join(h.workdir, "ran-swapped")
    try:
        job = h.sbatch(
            "--preflight", "--spare-nodes=1", "-N2", "-w", "node[1-2]", "--wrap", f"echo $SLURM_JOB_NODELIST > {out}"
        )
        drained(h, "node2")  # (its reason may say quarantined: the earlier tests failed it too)
        j = h.wait_job(job, timeout=60)
        record = h.cluster.api("GET", "/v1/nodes/node2/failures")["failures"][-1]
        assert (record["kind"], record["job_id"]) == ("preflight", job), record
        assert record["evidence"].endswith(": preflight refuses node2"), record
        assert j["state"] == "COMPLETED" and j["restart_count"] == 0, j  # swapped, not requeued
        with open(out) as f:
            assert f.read().strip() == "node[1,3]"  # the script started on the repaired allocation
        h.run(["scancel", str(job)])
    finally:
        os.unlink(flag)
    resume(h, "node2")
