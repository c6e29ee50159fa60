"""Preemption and expedited requeue with real daemons (issue 17): a scavenger QOS fills
every GPU; a high-priority 2-node job preempts the fewest scavengers, which checkpoint on
SIGTERM within GraceTime, are requeued (PREEMPTED in sacct) and resume later. A node dies
under an expedite job: it restarts first, on its held node plus one."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

SCAVENGER = """#!/bin/bash
echo "step 1" >> "$MUSTER_PROGRESS"
if [ -n "$CKPT" ]; then sleep 2; echo "checkpoint 1" >> "$MUSTER_PROGRESS"; fi
if [ -f ckpt-$SLURM_JOB_ID ]; then echo "resumed from $(cat ckpt-$SLURM_JOB_ID)"; else echo fresh; fi
trap 'echo "step 7 of run ${SLURM_RESTART_COUNT:-0}" > ckpt-$SLURM_JOB_ID; exit 0' TERM
touch armed-$SLURM_JOB_ID
sleep 300 &
wait
"""


def ok(out: object) -> str:
    assert out.returncode == 0, out.stderr  # type: ignore[attr-defined]
    return out.stdout  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def cluster() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={
            "PreemptType": "preempt/qos",
            "PreemptMode": "REQUEUE",
            "SlurmdTimeout": "4",
            "KillWait": "2",
            "SchedulerInterval": "1",
            "PriorityWeightAge": "0",  # equal priorities: the checkpoints decide
        },
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_a_two_node_job_preempts_two_scavengers_which_checkpoint_requeue_and_resume(cluster: Harness) -> None:
    h = cluster
    ok(h.run(["sacctmgr", "-i", "add", "qos", "scavenger", "GraceTime=10"]))
    ok(h.run(["sacctmgr", "-i", "add", "qos", "high", "Preempt=scavenger", "Priority=100"]))
    shown = ok(h.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name,gracetime,preempt"]))
    assert "high|00:00:00|scavenger" in shown.splitlines() and "scavenger|00:00:10|" in shown.splitlines()
    with open(os.path.join(h.workdir, "scav.sh"), "w") as f:
        f.write(SCAVENGER)
    scav = [
        h.sbatch(
            "--qos=scavenger",
            "--gpus-per-node=2",
            "--requeue",
            "--open-mode=append",
            "-o",
            "scav-%j.out",
            "scav.sh",
            env={"CKPT": "1"} if i in (0, 2) else {},
        )
        for i in range(4)
    ]
    for j in scav:
        h.wait_state(j, "RUNNING")
    wait_for(  # the checkpoints reach the controller with a heartbeat
        lambda: all((h.job(j).get("progress") or {}).get("ckpt_time") for j in scav[::2]),
        20,
        what="the checkpoints of jobs 0 and 2 to reach the controller",
    )
    wait_for(  # SIGTERM finds its trap set
        lambda: all(os.path.exists(os.path.join(h.workdir, f"armed-{j}")) for j in scav),
        30,
        what="the scavengers' SIGTERM traps to be set",
    )
    big = h.sbatch("-N2", "--gpus-per-node=2", "--qos=high", "--wrap", "echo $SLURM_JOB_NODELIST; sleep 3")
    asked = time.monotonic()
    done = h.wait_job(big, timeout=60)
    assert done["state"] == "COMPLETED"
    victims = [j for j in scav if h.job(j)["restart_count"] == 1]
    # the fewest (two whole nodes), and among equals those that lose the least work: the two
    # that wrote a checkpoint lately
    assert victims == [scav[0], scav[2]]
    assert time.monotonic() - asked < 10 + 3 + 10  # within GraceTime (they exit on SIGTERM)
    for j in victims:
        assert h.read(f"ckpt-{j}") == "step 7 of run 0\n"  # the trap ran: SIGTERM, then grace
        record = h.job(j)
        assert record["system_comment"].startswith(f"Preempted by job {big} (last checkpoint ")
    for j in set(scav) - set(victims):
        assert h.job(j)["restart_count"] == 0 and h.job(j)["state"] == "RUNNING"
    # the victims restart once the preemptor is done, and resume from their checkpoint
    for j in victims:
        h.wait_job(j, lambda x: x["state"] == "RUNNING" and x["restart_count"] == 1, timeout=30)
    wait_for(lambda: all("resumed" in h.read(f"scav-{j}.out") for j in victims), 20, what="the victims to resume")
    for j in victims:
        assert h.read(f"scav-{j}.out").splitlines() == ["fresh", "resumed from step 7 of run 0"]
    sacct = ok(h.run(["sacct", "-D", "-X", "-n", "-P", "-j", str(victims[0]), "--format=JobID,State"]))
    assert sacct.splitlines() == [f"{victims[0]}|PREEMPTED", f"{victims[0]}|RUNNING"]
    ok(h.run(["scancel", *map(str, scav)]))


def test_an_expedite_job_whose_node_dies_restarts_first_on_its_held_node_plus_one(cluster: Harness) -> None:
    h = cluster
    # a low priority (nice): without expedite, `other` would take the nodes first
    train = h.sbatch("-N2", "--gpus-per-node=2", "--requeue=expedite", "--nice=5000", "--wrap", "sleep 300")
    first, dying = (a["node"] for a in h.wait_state(train, "RUNNING")["alloc"])
    busy = h.sbatch("--gpus-per-node=2", "--wrap", "sleep 300")
    taken = h.wait_state(busy, "RUNNING")["alloc"][0]["node"]
    (spare,) = {"node1", "node2", "node3", "node4"} - {first, dying, taken}
    other = h.sbatch("-N2", "--gpus-per-node=2", "--wrap", "sleep 300")  # waits: one node is free
    assert h.wait_job(other, lambda j: j["reason"] != "None", timeout=10)["state"] == "PENDING"  # a pass saw it
    os.kill(h.cluster._alive(dying), signal.SIGKILL)
    rerun = h.wait_job(train, lambda j: j["restart_count"] == 1 and j["state"] == "RUNNING", timeout=30)
    assert sorted(a["node"] for a in rerun["alloc"]) == sorted([first, spare])  # its held node, plus one
    assert h.job(other)["state"] == "PENDING"
    ok(h.run(["scancel", str(train), str(busy), str(other)]))
    h.cluster.start()
    h.cluster.wait_ready(30)
