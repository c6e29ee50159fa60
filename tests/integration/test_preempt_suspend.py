"""PreemptMode=SUSPEND,GANG with real daemons: a job of a higher PriorityTier partition
suspends a job of the default partition (squeue SUSPENDED, reason Preempted, its processes
really stopped), starts on the CPUs it lends, and the victim resumes by itself when the
preemptor ends (its processes run again). The node freezes the job's cgroup where it has
cgroups and sends SIGSTOP where it has none: ``_stopped`` reads either."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness import Harness, ensure_user, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

# ticks until killed; its pid where the test can find it
LOW = "#!/bin/sh\necho $$ > pid-$SLURM_JOB_ID\nwhile :; do echo t >> tick-$SLURM_JOB_ID; sleep 0.2; done\n"
# runs until the test lets it end
HIGH = "#!/bin/sh\ntouch started-$SLURM_JOB_ID\nwhile [ ! -f go-$SLURM_JOB_ID ]; do sleep 0.2; done\n"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=1, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={
            "PreemptType": "preempt/partition_prio",
            "PreemptMode": "SUSPEND,GANG",
            "SchedulerInterval": "1",
        },
    )
    h.up()
    try:
        out = h.run(["scontrol", "create", "PartitionName=high", "Nodes=ALL", "PriorityTier=10"])
        assert out.returncode == 0, out.stderr
        yield h
    finally:
        h.down()


def _squeue(h: Harness, job_id: int) -> str:
    return h.run(["squeue", "-h", "-j", str(job_id), "-o", "%T|%r"]).stdout.strip()


def _stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP) or in a frozen cgroup (v1 freezer, v2
    cgroup.freeze)."""
    with open(f"/proc/{pid}/stat") as f:
        if f.read().rsplit(")", 1)[1].split()[0] == "T":
            return True
    with open(f"/proc/{pid}/cgroup") as f:
        lines = f.read().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(","):
            with open(f"/sys/fs/cgroup/freezer{path}/freezer.state") as g:
                if g.read().strip() == "FROZEN":
                    return True
        elif controllers == "" and os.path.exists(f"/sys/fs/cgroup{path}/cgroup.events"):
            with open(f"/sys/fs/cgroup{path}/cgroup.events") as g:
                if "frozen 1" in g.read().splitlines():
                    return True
    return False


def _text(h: Harness, name: str) -> str:
    """A file's whole first line, "" until it is written."""
    try:
        text = h.read(name)
    except FileNotFoundError:
        return ""
    return text.strip() if text.endswith("\n") else ""


def _ticks(h: Harness, job_id: int) -> int:
    try:
        return h.read(f"tick-{job_id}").count("t")
    except FileNotFoundError:
        return 0


def test_a_higher_tier_job_suspends_a_lower_one_which_resumes_when_it_ends(cluster: Harness) -> None:
    h = cluster
    uid = ensure_user("mustertest")
    low = h.sbatch("-c4", "--gpus=1", "--mem=1000", uid=uid, input=LOW)
    h.wait_state(low, "RUNNING")
    pid = int(wait_for(lambda: _text(h, f"pid-{low}"), 30, what="the low job's pid file"))
    wait_for(lambda: _ticks(h, low) > 0, 30, what="the low job to tick")
    high = h.sbatch("-p", "high", "-c2", "--gpus=1", "--mem=1000", uid=uid, input=HIGH)
    wait_for(lambda: _squeue(h, low) == "SUSPENDED|Preempted", 30, what="the low job SUSPENDED, reason Preempted")
    h.wait_state(high, "RUNNING")
    wait_for(lambda: _stopped(pid), 30, what="the low job's shell stopped")
    assert f"Preempted by job {high}" in h.run(["scontrol", "show", "job", str(low)]).stdout
    with open(os.path.join(h.workdir, f"go-{high}"), "w"):
        pass
    h.wait_job(high)
    wait_for(lambda: _squeue(h, low) == "RUNNING|None", 30, what="the low job resumed")
    wait_for(lambda: not _stopped(pid), 30, what="the low job's shell running again")
    ticks = _ticks(h, low)
    wait_for(lambda: _ticks(h, low) > ticks, 30, what="the low job to tick again")
    h.run(["scancel", str(low)])
    h.wait_job(low)
