"""Issue 36's check, with real PyTorch (gloo): a 2-node DDP job with ``--spare-nodes=1`` on
a 4-node cluster whose partition keeps node4 as a spare loses its second node mid-run (its
agent and its tasks SIGKILLed). The controller swaps node4 into the same job (same id,
restart count 0); the running srun fails, the batch loop (examples/train_spares.sbatch)
runs srun again on node1 + node4, training resumes from its last checkpoint and completes
every step; the job's record names the replacement."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import sys
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def spared4() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=2, cpus_per_node=8, mem_per_node=16000),
        settings={"SlurmdTimeout": "4", "KillWait": "2"},
    )
    h.cluster.create(h.shape, h.settings, h.topology)
    with open(h.cluster.conf_path) as f:
        text = f.read()
    with open(h.cluster.conf_path, "w") as f:
        f.write(text.replace("PartitionName=gpu Nodes=ALL", "PartitionName=gpu Nodes=ALL SpareNodes=node4"))
    h.up()
    try:
        yield h
    finally:
        h.down()


def _pids_of(job_id: int, node: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if env.get(b"SLURM_JOB_ID") == str(job_id).encode() and env.get(b"SLURMD_NODENAME") == node.encode():
            out.append(int(entry))
    return out


def test_a_ddp_job_loses_a_node_and_continues_from_its_checkpoint_on_a_spare(spared4: Harness) -> None:
    pytest.importorskip("torch", reason="PyTorch is installed by `make install` (torch==2.13.0, CPU)")
    h = spared4
    ckpt = os.path.join(h.workdir, "spare-ckpt")
    env = {"TRAIN_SCRIPT": str(EXAMPLES / "train_ddp.py"), "PYTHON": sys.executable, "CKPT_DIR": ckpt}
    steps = 60
    job_id = h.sbatch(
        str(EXAMPLES / "train_spares.sbatch"), "--steps", str(steps), "--ckpt-every", "5", "--sleep", "0.2", env=env
    )
    job = h.wait_state(job_id, "RUNNING", timeout=60)
    assert [a["node"] for a in job["alloc"]] == ["node1", "node2"]
    wait_for(lambda: os.path.exists(os.path.join(ckpt, "last.pt")), 300, what="a first checkpoint")
    os.kill(h.cluster._alive("node2"), signal.SIGKILL)  # type: ignore[arg-type]
    for pid in _pids_of(job_id, "node2"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    repaired = h.wait_job(job_id, lambda j: [a["node"] for a in j["alloc"]] == ["node1", "node4"], timeout=60)
    assert repaired["state"] == "RUNNING" and repaired["restart_count"] == 0
    done = h.wait_job(job_id, timeout=300)
    text = h.read(f"train-{job_id}.out")
    assert done["state"] == "COMPLETED" and done["restart_count"] == 0, text
    resumed = re.search(r"resumed from step (\d+)", text)
    assert resumed and int(resumed.group(1)) > 0, text
    assert "try 2" in text and "node=node4" in text, text
    assert re.search(rf"step {steps}\b", text), text
    (event,) = done["replacements"]
    assert (event["old"], event["new"]) == ("node2", "node4")
    acct = h.run(["sacct", "-D", "-X", "-j", str(job_id), "--parsable2", "--noheader", "-o", "JobID,State"])
    assert acct.stdout.split() == [f"{job_id}|COMPLETED"], acct.stdout  # one attempt, not a requeue
    h.cluster.start()  # bring the dead agent back so the fixture stops a whole cluster
