"""Training runs with real daemons: a GPU made to fail drains its node and the job runs on
elsewhere; a job that reports progress and then hangs is signalled, requeued as Hung and
completes on its next attempt, with its goodput in sacct."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=3, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={"SlurmdTimeout": "10", "KillWait": "2", "GpuHealthCheckInterval": "1"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def node(h: Harness, name: str) -> dict:
    return next(n for n in h.cluster.api("GET", "/v1/nodes")["nodes"] if n["name"] == name)


def wait(check, timeout: float = 40, what: str = ""):  # type: ignore[no-untyped-def]
    return wait_for(check, timeout, interval=0.1, what=what)


def test_a_failing_gpu_drains_its_node_and_the_job_runs_elsewhere(cluster: Harness) -> None:
    h = cluster
    jid = h.sbatch("--gpus-per-node=1", "--wrap", "sleep 300")
    first = h.wait_state(jid, "RUNNING")["alloc"][0]["node"]
    faults = os.path.join(h.cluster.state_dir, "nodes", first, "gpu-faults")
    with open(faults, "w") as f:
        f.write("1 xid 79\n")
    try:
        n = wait(lambda: (x := node(h, first))["drain"] and x, what="the drain")
        assert n["reason"] == "GPU 1: XID 79 (fallen off the bus)"
        job = h.wait_job(jid, lambda j: j["state"] == "RUNNING" and j["restart_count"] == 1)
        assert job["alloc"][0]["node"] != first
        assert first in job["spec"]["exclude"]
    finally:
        os.unlink(faults)
        h.run(["scancel", str(jid)])
        h.run(["scontrol", "update", f"nodename={first}", "state=resume"])


SCRIPT = """#!/bin/sh
#SBATCH --hang-timeout=0:06
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
  # each line with its time: read at the agent's heartbeat, lines without one would all
  # take the time of that reading, and the attempt would have no productive time
  for i in 1 2 3; do echo "step $i $(date +%s.%N)" >> "$MUSTER_PROGRESS"; sleep 0.3; done
  echo "checkpoint 2 $(date +%s.%N)" >> "$MUSTER_PROGRESS"
  # hangs: reports nothing more; dumps its stacks when muster signals it (SIGUSR1)
  {python} -c "import faulthandler, signal, time
faulthandler.register(signal.SIGUSR1, file=open('{work}/stacks.$SLURM_JOB_ID', 'w'))
time.sleep(300)"
fi
{python} -c "from muster import progress; [progress.step(i) for i in range(3, 8)]; progress.checkpoint(7)"
"""


def test_a_hung_job_is_signalled_requeued_and_completes_with_its_goodput(cluster: Harness) -> None:
    h = cluster
    script = os.path.join(h.workdir, "hang.sh")
    with open(script, "w") as f:
        f.write(SCRIPT.format(work=h.workdir, python=sys.executable))
    jid = h.sbatch(script)
    first = h.wait_state(jid, "RUNNING")["alloc"][0]["node"]
    job = h.wait_job(jid, timeout=90)
    assert job["state"] == "COMPLETED" and job["restart_count"] == 1
    assert job["alloc"][0]["node"] != first  # the suspect node is avoided
    assert "Hung" in (job["system_comment"] or "")
    assert "time.sleep" in h.read(f"stacks.{jid}") or "File" in h.read(f"stacks.{jid}")  # stacks dumped
    # the last attempt's final reports come with its node's next heartbeat
    wait(lambda: h.job(jid)["attempts"][-1].get("step") == 7, what="the last progress report")
    out = h.run(
        [
            "sacct",
            "-j",
            str(jid),
            "-X",
            "-n",
            "-P",
            "-o",
            "State,Restarts,LastStep,LastCheckpoint,Goodput,LostPerAttempt,GPUTimeRAW",
        ]
    )
    assert out.returncode == 0, out.stderr
    state, restarts, last, ckpt, goodput, lost, gpu = out.stdout.strip().splitlines()[-1].split("|")
    assert (state, restarts, last, ckpt) == ("COMPLETED", "1", "7", "7")
    assert goodput.endswith("%") and 0 < float(goodput[:-1]) < 100
    assert lost and int(lost) >= 6  # the hung attempt lost the time since its checkpoint
    assert gpu == "0"  # no GPUs asked: allocated GPU time is zero
