"""Stragglers with real daemons: a 3-node job whose rank on one node takes twice as long per
step (reported through muster.progress) has that node flagged, shown by scontrol show job
and squeue; the same job with equal ranks has none flagged once every node was judged;
under Stragglers=swap a job with --spare-nodes has its straggler replaced at its next
checkpoint, and its batch script's next srun runs on the new node."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

# Each rank sleeps PAUSE (twice that on the node with SLURM_NODEID == the slow one) per
# step and reports the time it slept as its busy time: the medians differ by the pauses,
# whatever the machine's load adds to every rank alike.
STEPS = """
import os, sys, time
from muster import progress
pause = 1.0 if os.environ["SLURM_NODEID"] == sys.argv[1] else 0.5
for i in range(int(sys.argv[2])):
    t0 = time.monotonic()
    time.sleep(pause)
    progress.step(i, busy=time.monotonic() - t0)
    if os.environ["SLURM_PROCID"] == "0" and i % 10 == 9:
        progress.checkpoint(i)
"""
# Stragglers=swap: the batch script runs its steps again after an srun ended by a swap.
SWAP_SCRIPT = """#!/bin/sh
for attempt in 1 2 3; do
  srun {python} {steps} 2 400
done
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    # partitions whose nodes are flagged after 5 s slow (the default window is 60 s); node4
    # is the spare of the swap partition, kept out of its placement
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=1, cpus_per_node=4, mem_per_node=8000),
        settings={"PartitionName": "train Nodes=node[1-3] MaxTime=INFINITE State=UP StragglerWindow=5"},
    )
    h.cluster.create(h.shape, h.settings, h.topology)
    with open(h.cluster.conf_path, "a") as f:
        f.write(
            "PartitionName=swapping Nodes=ALL SpareNodes=node4 MaxTime=INFINITE State=UP "
            "Stragglers=swap StragglerWindow=5\n"
        )
    h.up()
    try:
        yield h
    finally:
        h.down()


def steps_py(h: Harness) -> str:
    path = os.path.join(h.workdir, "steps.py")
    with open(path, "w") as f:
        f.write(STEPS)
    return path


def submit(h: Harness, slow_node: int) -> int:
    path = steps_py(h)
    return h.sbatch(
        "-p",
        "train",
        "-N3",
        "--ntasks-per-node=1",
        "--mem=100",
        "--wrap",
        f"srun {sys.executable} {path} {slow_node} 400",
    )


def waiting(h: Harness, jid: int, check: Any, timeout: float, what: str) -> dict[str, Any]:
    """Wait until ``check(job)``; on a timeout say the job's state, progress and output."""
    seen: list[dict[str, Any]] = [{}]

    def ready() -> bool:
        seen[0] = h.job(jid)
        return bool(check(seen[0]))

    try:
        wait_for(ready, timeout, interval=0.2, what=what)
    except AssertionError:
        job = seen[0]
        out = h.run(f"cat slurm-{jid}.out").stdout[-2000:]
        raise AssertionError(
            f"{what}: job {jid} {job.get('state')} {job.get('reason')} on {job.get('nodelist')}, "
            f"progress {job.get('progress')}, output {out!r}"
        ) from None
    return seen[0]


def judged(job: dict[str, Any], samples: int) -> bool:
    """Every node of the job has a pace over ``samples`` step durations (so it was judged)."""
    pace = (job.get("progress") or {}).get("pace") or {}
    return len(pace) == 3 and all(v[1] >= samples for v in pace.values())


def show(h: Harness, jid: int) -> str:
    out = h.run(["scontrol", "show", "job", str(jid)])
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_slow_node_is_flagged_and_shown_and_equal_nodes_are_not(cluster: Harness) -> None:
    h = cluster
    slow = submit(h, 2)  # SLURM_NODEID 2: node3
    even = submit(h, -1)
    try:
        job = waiting(h, slow, lambda j: j.get("stragglers"), 120, "the straggler flagged")
        assert job["stragglers"].startswith("node3(+") and "," not in job["stragglers"]
        found = job["progress"]["stragglers"]["node3"]
        assert found["slower"] >= 0.5 and found["median"] > found["peers"]
        assert re.search(r"^   Stragglers=node3\(\+\d+%\)$", show(h, slow), re.M)
        out = h.run(["squeue", "-j", str(slow), "-h", "-O", "jobid:10,stragglers:30"])
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [str(slow), job["stragglers"]]
        # the equal job: judged for a while (window 5 s) with 9 samples per node, none flagged
        first = int(
            waiting(h, even, lambda j: judged(j, 9), 120, "every node of the even job judged")["progress"]["step"]
        )
        job = waiting(h, even, lambda j: int(j["progress"]["step"]) >= first + 12, 60, "more steps")
        assert not job.get("stragglers") and not job["progress"].get("stragglers")
        assert "Stragglers=" not in show(h, even)
    finally:
        h.run(["scancel", str(slow), str(even)])


def test_a_straggler_is_swapped_at_the_next_checkpoint(cluster: Harness) -> None:
    h = cluster
    script = os.path.join(h.workdir, "swap.sh")
    with open(script, "w") as f:
        f.write(SWAP_SCRIPT.format(python=sys.executable, steps=steps_py(h)))
    jid = h.sbatch("-p", "swapping", "-N3", "--ntasks-per-node=1", "--mem=100", "--spare-nodes=1", script)
    try:
        job = waiting(h, jid, lambda j: j.get("nodelist"), 60, "the job started")
        assert job["nodelist"] == "node[1-3]"  # node4 is the partition's spare
        job = waiting(h, jid, lambda j: j.get("replacements"), 120, "the straggler swapped")
        (event,) = job["replacements"]
        assert (event["old"], event["new"], event["cause"]) == ("node3", "node4", "straggler")
        # not excluded here: the partition places jobs on node[1-3] only (node4 is its spare),
        # and a requeued -N3 job without node3 could never start (training.avoid; the
        # exclusion where nodes are left is tests/unit/ctld/test_stragglers.py's)
        assert "node3" not in job["spec"]["exclude"]
        # the batch script's next srun runs on the new node, which reports its steps
        waiting(h, jid, lambda j: "node4" in ((j.get("progress") or {}).get("pace") or {}), 120, "steps on node4")
    finally:
        h.run(["scancel", str(jid)])
