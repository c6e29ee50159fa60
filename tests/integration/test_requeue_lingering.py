"""A requeued job whose first attempt is slow to die (it traps SIGTERM and lingers) starts
again only once that attempt is gone from its node, and ends COMPLETED, never NODE_FAIL
(issue 34: the second launch was refused there, 'still runs on node1')."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape
from waiting import wait_for

pytestmark = pytest.mark.integration

SCRIPT = """#!/bin/bash
OUT=attempts-$SLURM_JOB_ID
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
    trap 'echo "$(date +%s.%N) term" >> $OUT; sleep 4; echo "$(date +%s.%N) gone" >> $OUT; exit 0' TERM
    echo "$(date +%s.%N) first" >> $OUT
    while true; do sleep 0.1; done
fi
echo "$(date +%s.%N) second" >> $OUT
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000),
        settings={"KillWait": "20"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


@pytest.mark.parametrize("restart_controller", [False, True], ids=["requeue", "requeue-then-controller-restart"])
def test_a_requeued_job_waits_for_its_lingering_attempt_and_then_completes(
    cluster: Harness, restart_controller: bool
) -> None:
    h = cluster
    with open(os.path.join(h.workdir, "linger.sh"), "w") as f:
        f.write(SCRIPT)
    job_id = h.sbatch("-o", "linger-%j.out", "linger.sh")
    h.wait_state(job_id, "RUNNING")
    attempts = os.path.join(h.workdir, f"attempts-{job_id}")
    wait_for(
        lambda: "first" in (h.read(attempts) if os.path.exists(attempts) else ""),
        timeout=60,
        what="the first attempt to start",
    )
    out = h.run(["scontrol", "requeue", str(job_id)])
    assert out.returncode == 0, out.stderr
    if restart_controller:  # a new controller knows the old attempt only from the node's heartbeats
        pid = h.cluster._alive("musterctld")
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: h.cluster._alive("musterctld") is None, timeout=60, what="the controller to stop")
        h.cluster.start()
        h.cluster.wait_ready(30)
    job = h.wait_job(job_id, timeout=90)
    assert job["state"] == "COMPLETED", (job["state"], job.get("reason"), job.get("system_comment"))
    assert job["restart_count"] == 1
    events = [line.split() for line in h.read(attempts).splitlines()]
    kinds = [kind for _t, kind in events]
    assert kinds == ["first", "term", "gone", "second"], kinds
    at = {kind: float(t) for t, kind in events}
    assert at["second"] > at["gone"]  # the second attempt started after the first was gone
    acct = h.run(["sacct", "-j", str(job_id), "-D", "-X", "-n", "-P", "-o", "State"])
    assert "NODE_FAIL" not in acct.stdout, acct.stdout
