"""Issue 5's check, with real PyTorch: a 2-node DDP job with --requeue on a 4-node cluster
loses a node mid-run (its agent and its tasks killed with SIGKILL). The node goes DOWN
within SlurmdTimeout, the job is requeued under the same id, runs on healthy nodes, resumes
from its last checkpoint, completes every step, and sacct --duplicates shows both attempts."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import sys
import time
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
TIMEOUT = 4


@pytest.fixture
def cluster4() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=2, cpus_per_node=8, mem_per_node=16000),
        settings={"SlurmdTimeout": str(TIMEOUT), "KillWait": "2"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def _pids_of(job_id: int, node: str) -> list[int]:
    """Processes of the job that run "on" ``node`` (all nodes share this host)."""
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


def test_a_ddp_job_survives_a_dead_node_and_resumes_from_its_checkpoint(cluster4: Harness) -> None:
    pytest.importorskip("torch", reason="PyTorch is installed by `make install` (torch==2.13.0, CPU)")
    h = cluster4
    ckpt = os.path.join(h.workdir, "resume-ckpt")
    env = {"TRAIN_SCRIPT": str(EXAMPLES / "train_ddp.py"), "PYTHON": sys.executable, "CKPT_DIR": ckpt}
    steps = 60
    job_id = h.sbatch(
        "-N2",
        "--ntasks-per-node=1",
        "--gres=gpu:1",
        str(EXAMPLES / "train.sbatch"),
        "--steps",
        str(steps),
        "--ckpt-every",
        "5",
        "--sleep",
        "0.2",
        env=env,
    )
    job = h.wait_state(job_id, "RUNNING", timeout=60)
    out = os.path.join(h.workdir, f"train-{job_id}.out")
    deadline = time.monotonic() + 300  # PyTorch's start-up is slow on a loaded machine
    while not os.path.exists(os.path.join(ckpt, "last.pt")):
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.2)
    victim = job["alloc"][1]["node"]
    killed = time.monotonic()
    os.kill(h.cluster._alive(victim), signal.SIGKILL)
    for pid in _pids_of(job_id, victim):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    rerun = h.wait_job(job_id, lambda j: j["restart_count"] == 1 and j["state"] == "RUNNING", timeout=60)
    requeued_after = time.monotonic() - killed
    assert requeued_after < TIMEOUT + 10, requeued_after
    assert victim not in [a["node"] for a in rerun["alloc"]]
    done = h.wait_job(job_id, timeout=240)
    text = open(out).read()
    assert done["state"] == "COMPLETED" and done["restart_count"] == 1, text
    resumed = re.search(r"resumed from step (\d+)", text)
    assert resumed and int(resumed.group(1)) > 0, text
    assert re.search(rf"\[rank 0\] .*step {steps}\b", text) or f"step {steps}" in text, text

    acct = h.run(["sacct", "-D", "-X", "-j", str(job_id), "--parsable2", "--noheader", "-o", "JobID,State,NodeList"])
    assert acct.returncode == 0, acct.stderr
    states = [line.split("|")[1] for line in acct.stdout.splitlines()]
    assert states == ["NODE_FAIL", "COMPLETED"], acct.stdout
    h.cluster.start()  # bring the dead agent back so the fixture stops a whole cluster
