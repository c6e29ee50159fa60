"""Issue 37's collective hang, with real PyTorch: a 3-node gloo job (one rank per node) reports
every step through ``muster.progress``; at step 6 of its first attempt the rank on one chosen
node stays out of the all_reduce (it sleeps) while the other two block inside it. Every rank
reported step 5, so only the stacks tell them apart: the controller judges the attempt hung,
stores the stacks of every rank (two inside ``all_reduce``, the culprit elsewhere), names
the culprit's node as the suspect, and recovers: with ``--spare-nodes=1`` that node is
replaced in the running job, which resumes from its checkpoint under the same id and
attempt; without (the second case: DistributedDataParallel, whose ranks wait for the
gradients' all-reduce inside ``backward``), the job is requeued as Hung and its next attempt
completes."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

HANG_AT = 6  # the step whose all_reduce the culprit never enters; a checkpoint at step 4 before it
STEPS = 12

TRAIN = """import os, sys, time
import torch
import torch.distributed as dist
from muster import progress

dist.init_process_group("gloo")
rank = dist.get_rank()
node = os.environ["SLURMD_NODENAME"]
ckpt = os.environ["CKPT"]
start = 0
if os.path.exists(ckpt):
    with open(ckpt) as f:
        start = int(f.read())
    print(f"[rank {{rank}}] node={{node}} resumed from step {{start}}", flush=True)
culprit = node == os.environ["HANG_NODE"] and os.environ.get("SLURM_RESTART_COUNT", "0") == "0"
ddp = None
if os.environ.get("MODE") == "ddp":  # the gradients' all-reduce inside backward
    from torch.nn.parallel import DistributedDataParallel
    torch.manual_seed(0)
    ddp = DistributedDataParallel(torch.nn.Linear(4, 1))
total = torch.zeros(1)
for step in range(start + 1, {steps} + 1):
    if culprit and step == {hang_at}:
        print(f"[rank {{rank}}] node={{node}} step {{step}}: staying out of the all_reduce", flush=True)
        time.sleep(3600)  # blocked elsewhere; the others wait inside the collective
    if ddp is not None:
        ddp(torch.ones(2, 4) * (rank + 1)).sum().backward()
    else:
        t = torch.ones(1) * (rank + 1)
        dist.all_reduce(t)
        total += t
    progress.step(step)
    if rank == 0 and step % 2 == 0:
        with open(ckpt + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(ckpt + ".tmp", ckpt)
        progress.checkpoint(step)
    time.sleep(0.1)
print(f"[rank {{rank}}] node={{node}} done step {{step}}", flush=True)
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # no exit-time destructors of gloo's threads (see examples/train_ddp.py)
"""

BATCH = """#!/bin/bash
#SBATCH -N3 --ntasks-per-node=1 --hang-timeout=0:20 --requeue --open-mode=append
for try in 1 2 3; do
  echo "job $SLURM_JOB_ID restart ${{SLURM_RESTART_COUNT:-0}} try $try"
  # -K: a task that dies ends the step (its peers would wait for it in their rendezvous)
  srun -K -l {python} {train} && exit 0
  echo "srun failed: again on the job's nodes as they are now"
done
exit 1
"""


@pytest.fixture(scope="module")
def spared() -> Iterator[Harness]:
    pytest.importorskip("torch", reason="PyTorch is installed by `make install` (torch==2.13.0, CPU)")
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=0, cpus_per_node=4, mem_per_node=4000),
        settings={"KillWait": "2"},
    )
    h.cluster.create(h.shape, h.settings, h.topology)
    with open(h.cluster.conf_path) as f:
        text = f.read()
    assert "Nodes=ALL" in text
    with open(h.cluster.conf_path, "w") as f:
        f.write(text.replace("Nodes=ALL", "Nodes=ALL SpareNodes=node4", 1))
    try:
        h.up()
        yield h
    finally:
        h.down()


def submit(h: Harness, name: str, culprit: str, *args: str, mode: str = "all_reduce") -> int:
    train = os.path.join(h.workdir, f"{name}.py")
    with open(train, "w") as f:
        f.write(TRAIN.format(steps=STEPS, hang_at=HANG_AT))
    batch = os.path.join(h.workdir, f"{name}.sh")
    with open(batch, "w") as f:
        f.write(BATCH.format(python=sys.executable, train=train))
    os.chmod(batch, 0o755)
    env = {"HANG_NODE": culprit, "CKPT": os.path.join(h.workdir, f"{name}.ckpt"), "MODE": mode}
    return h.sbatch(f"--output={name}-%j.out", *args, batch, env=env)


def rank_stacks(h: Harness, jid: int) -> dict[str, list[str]]:
    """Each node's rank stacks (what muster.progress's handler wrote) of the first attempt."""
    out = h.run(["muster", "hang-evidence", str(jid), "--json"])
    assert out.returncode == 0, out.stderr
    records: list[dict[str, Any]] = json.loads(out.stdout)["evidence"]
    stacks: dict[str, list[str]] = {}
    for r in records:
        if r.get("attempt", 0) == 0:
            stacks.setdefault(r["node"], []).extend(p["python"] for p in r["processes"] if p.get("python"))
    return stacks


def check_stacks(stacks: dict[str, list[str]], nodes: list[str], culprit: str, waits_in: str) -> None:
    assert sorted(stacks) == sorted(nodes), stacks  # evidence from every rank's node
    for node in nodes:
        (stack,) = stacks[node]  # one rank per node
        assert (waits_in in stack) == (node != culprit), (node, stack)
        assert "in main" in stack or "<module>" in stack, stack


def test_the_rank_outside_the_collective_gets_its_node_replaced_and_the_job_resumes(spared: Harness) -> None:
    h = spared
    jid = submit(h, "spare", "node3", "--spare-nodes=1")
    job = h.wait_job(jid, lambda j: bool(j.get("replacements")), timeout=300)
    (event,) = job["replacements"]
    assert (event["old"], event["new"], event["cause"]) == ("node3", "node4", "hang")
    assert job["state"] == "RUNNING" and job["restart_count"] == 0
    check_stacks(rank_stacks(h, jid), ["node1", "node2", "node3"], "node3", "in all_reduce")
    done = h.wait_job(jid, timeout=300)
    text = h.read(f"spare-{jid}.out")
    assert done["state"] == "COMPLETED" and done["restart_count"] == 0, text
    assert f"node=node3 step {HANG_AT}: staying out" in text, text
    resumed = re.findall(r"node=(\S+) resumed from step (\d+)", text)
    assert {n for n, _ in resumed} == {"node1", "node2", "node4"} and all(int(s) >= 4 for _, s in resumed), text
    assert len(re.findall(rf"done step {STEPS}\b", text)) == 3, text
    acct = h.run(["sacct", "-D", "-X", "-j", str(jid), "--parsable2", "--noheader", "-o", "JobID,State"])
    assert acct.stdout.split() == [f"{jid}|COMPLETED"], acct.stdout  # one attempt, not a requeue


def test_ddp_without_spares_is_requeued_as_hung_naming_the_culprit_and_the_next_attempt_completes(
    spared: Harness,
) -> None:
    h = spared
    jid = submit(h, "requeue", "node2", mode="ddp")
    done = h.wait_job(jid, timeout=300)
    text = h.read(f"requeue-{jid}.out")
    assert done["state"] == "COMPLETED" and done["restart_count"] == 1, text
    assert done["attempts"][0]["outcome"] == "Hung", done["attempts"]
    assert "suspect nodes: node2;" in (done["attempts"][0].get("system_comment") or done["system_comment"] or ""), done
    check_stacks(rank_stacks(h, jid), ["node1", "node2", "node3"], "node2", "in _engine_run_backward")
    acct = h.run(["sacct", "-j", str(jid), "-D", "-X", "-n", "-P", "-o", "State,Reason"])
    assert acct.stdout.strip().splitlines()[0].split("|")[:2] == ["REQUEUED", "Hung"], acct.stdout
    assert re.search(r"resumed from step (\d+)", text) and len(re.findall(rf"done step {STEPS}\b", text)) == 3, text
