"""Slurm's commands and options that Slurm's own test files exposed as missing (issue 38),
each checked as its man page describes it, on one shared cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=4, mem_per_node=4000))
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_salloc_no_shell_exits_at_once_and_leaves_the_allocation_running(cluster: Harness) -> None:
    # salloc(1): "--no-shell: immediately exit after allocating resources, without running a
    # command. However, the Slurm job will still be created and will remain active and will own
    # the allocated resources as long as it is active."
    h = cluster
    out = h.run(["salloc", "--no-shell", "-N1", "-t", "5"], timeout=120)
    assert out.returncode == 0, out.stderr
    granted = [line for line in out.stderr.splitlines() if "Granted job allocation" in line]
    assert granted, out.stderr
    job_id = int(granted[0].split()[-1])
    assert "Relinquishing" not in out.stderr
    job = h.wait_state(job_id, "RUNNING")
    assert job["spec"]["name"] == "no-shell"
    # "You can submit srun commands against this resource allocation, if you specify the
    # --jobid= option with the job id of this Slurm job."
    step = h.run(["srun", f"--jobid={job_id}", "-n1", "echo", "in-the-allocation"], timeout=120)
    assert step.returncode == 0, step.stderr
    assert step.stdout.strip() == "in-the-allocation"
    assert h.job(job_id)["state"] == "RUNNING"
    # "... or you can terminate the job manually using the scancel command."
    assert h.run(["scancel", str(job_id)]).returncode == 0
    assert h.wait_job(job_id)["state"] == "CANCELLED"
