"""Faults with real daemons: a controller stopped (SIGSTOP) for twice SlurmdTimeout, and an
agent killed in the middle of a two-node step.

What must hold: no acknowledged job is lost, no job that finished runs again (each job
counts its runs in a file), every node affected is back or down with a reason, and no
command prints a traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape
from waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]

TIMEOUT = 8  # SlurmdTimeout of these clusters (a loaded CI machine must not starve an agent that long)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={"SlurmdTimeout": str(TIMEOUT), "KillWait": "2"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def counting_job(h: Harness, tag: str, seconds: float, *extra: str) -> int:
    """A job that notes each of its runs in ``runs-<tag>`` and then sleeps."""
    return h.sbatch(
        "-c1", *extra, "-o", f"out-{tag}-%j", "--wrap", f"echo run >> {h.workdir}/runs-{tag}; sleep {seconds}"
    )


def runs(h: Harness, tag: str) -> int:
    path = os.path.join(h.workdir, f"runs-{tag}")
    return len(h.read(path).splitlines()) if os.path.exists(path) else 0


def no_traceback(h: Harness, *argv: str) -> subprocess.CompletedProcess[str]:
    out = h.run(list(argv))
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    return out


def controller_log(h: Harness) -> str:
    return h.read(os.path.join(h.cluster.state_dir, "log", "musterctld.log"))


def test_a_controller_stopped_for_twice_slurmdtimeout_fails_no_node_and_reruns_nothing(
    cluster: Harness,
) -> None:
    h = cluster
    done_before = [counting_job(h, f"before{i}", 0) for i in range(3)]
    for job_id in done_before:
        assert h.wait_job(job_id)["state"] == "COMPLETED"
    during = [counting_job(h, f"during{i}", 3) for i in range(3)]
    long = [counting_job(h, f"long{i}", 22) for i in range(6)]
    for job_id in during + long:
        h.wait_state(job_id, "RUNNING")

    ctld = h.cluster._alive("musterctld")
    assert ctld is not None
    os.kill(ctld, signal.SIGSTOP)
    try:
        time.sleep(2 * TIMEOUT)  # sleep: the stall under test; the short jobs end meanwhile, their reports wait
    finally:
        os.kill(ctld, signal.SIGCONT)

    for job_id in done_before + during + long:
        job = h.wait_job(job_id, timeout=60)
        assert job["state"] == "COMPLETED", job
        assert job["restart_count"] == 0, job
    for tag in [f"before{i}" for i in range(3)] + [f"during{i}" for i in range(3)] + [f"long{i}" for i in range(6)]:
        assert runs(h, tag) == 1, tag
    nodes = h.cluster.api("GET", "/v1/nodes")["nodes"]
    assert all(n["state"] in ("IDLE", "MIXED", "ALLOCATED") and not n["drain"] for n in nodes), nodes
    assert "controller stalled for" in controller_log(h)
    assert "DOWN" not in no_traceback(h, "sinfo", "-h", "-o", "%T").stdout.upper()
    no_traceback(h, "squeue")


def test_an_agent_killed_in_a_two_node_step_downs_its_node_and_the_job_resumes_elsewhere(
    cluster: Harness,
) -> None:
    h = cluster
    script = f"#!/bin/sh\necho run >> {h.workdir}/runs-step\nsrun -N2 -n2 sleep 20\n"
    job_id = h.sbatch("-N2", "--requeue", "--open-mode=append", "-o", "step-%j.out", input=script)
    job = h.wait_state(job_id, "RUNNING")
    victim = job["alloc"][1]["node"]
    # wait for the step to run on both nodes before killing the second node's agent
    wait_for(
        lambda: any(s.get("job_id") == job_id for s in h.cluster.api("GET", "/v1/steps").get("steps", [])),
        30,
        interval=0.1,
        what="the step to start",
    )
    pid = h.cluster._alive(victim)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    try:
        rerun = h.wait_job(job_id, lambda j: j["restart_count"] == 1 and j["state"] == "RUNNING", timeout=40)
        assert victim not in [a["node"] for a in rerun["alloc"]]
        nodes = {n["name"]: n for n in h.cluster.api("GET", "/v1/nodes")["nodes"]}
        assert nodes[victim]["state"] == "DOWN" and nodes[victim]["reason"] == "Not responding"
        assert f"node {victim} DOWN: no heartbeat for" in controller_log(h)
        h.run(["scancel", str(job_id)])
        h.wait_job(job_id, timeout=30)
        assert runs(h, "step") == 2  # the killed attempt, and the rerun (never finished twice)
    finally:
        h.cluster.start()  # the agent comes back; ReturnToService=1 puts its node in service
        h.cluster.wait_ready(30)
    no_traceback(h, "sinfo")
