"""The controller's goodput accounting and the framework-side figure agree (issue 37.4): an
emulated training job reports steps and checkpoints (``muster.progress``) and keeps its own
log; it is requeued once after a checkpoint, resumes from it and completes. The ETTR the job
computes from its own log and the Goodput sacct reports are within 2 percentage points."""

from __future__ import annotations

import json
import os
import sys

import pytest

from harness import Harness, wait_for

pytestmark = pytest.mark.integration

STEPS = 60  # steps of work in all (requeued near step 26: there is room if the requeue is slow)
STEP_S = 0.5  # wall time per step
CKPT_EVERY = 20

# The job's own account: each attempt logs its start, every step and checkpoint, and its end
# (the exit, or the SIGTERM of the requeue), each with the job's own clock.
SCRIPT = """#!{python}
import time
T0 = time.time()
import json, os, signal, sys
from muster import progress

attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
log = open(os.path.join({work!r}, "fw.%s" % os.environ["SLURM_JOB_ID"]), "a")

def rec(kind, n=None, t=None):
    log.write(json.dumps({{"attempt": attempt, "kind": kind, "n": n, "t": t or time.time()}}) + "\\n")
    log.flush()

def stopped(signum, frame):
    rec("stop")
    os._exit(143)

signal.signal(signal.SIGTERM, signal.SIG_IGN)
rec("start", t=T0)
signal.signal(signal.SIGTERM, stopped)
ckpt = os.path.join({work!r}, "ckpt.%s" % os.environ["SLURM_JOB_ID"])
step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
while step < {steps}:
    time.sleep({step_s})
    step += 1
    progress.step(step)
    rec("step", step)
    if step % {every} == 0 and step < {steps}:
        with open(ckpt + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(ckpt + ".tmp", ckpt)
        progress.checkpoint(step)
        rec("ckpt", step)
rec("end")
"""


def framework_ettr(lines: list[dict[str, float]]) -> tuple[float, int]:
    """The job's own figure: training kept (first step to the last checkpoint of an attempt
    that was stopped, first step to the last step of the one that completed) over the wall
    time of its attempts (start to end or stop). Also how many attempts it saw."""
    attempts = sorted({int(x["attempt"]) for x in lines})
    kept = total = 0.0
    for a in attempts:
        mine = [x for x in lines if x["attempt"] == a]
        start = next(x["t"] for x in mine if x["kind"] == "start")
        end = next(x["t"] for x in mine if x["kind"] in ("end", "stop"))
        first = next(x["t"] for x in mine if x["kind"] == "step")
        if any(x["kind"] == "end" for x in mine):
            last = max(x["t"] for x in mine if x["kind"] == "step")
        else:
            last = max((x["t"] for x in mine if x["kind"] == "ckpt"), default=first)
        kept += last - first
        total += end - start
    return kept / total, len(attempts)


def test_controller_goodput_and_the_frameworks_ettr_agree(cluster: Harness) -> None:
    h = cluster
    script = os.path.join(h.workdir, "ettr_train.py")
    with open(script, "w") as f:
        f.write(SCRIPT.format(python=sys.executable, work=h.workdir, steps=STEPS, step_s=STEP_S, every=CKPT_EVERY))
    os.chmod(script, 0o755)
    jid = h.sbatch("--requeue", "-o", os.path.join(h.workdir, "ettr_train.%j.out"), script)
    log = os.path.join(h.workdir, f"fw.{jid}")

    def lines() -> list[dict[str, float]]:
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return [json.loads(x) for x in f if x.endswith("\n")]

    # Requeue once the controller holds the first attempt's checkpoint and a few steps
    # were done past it (work that the requeue then throws away).
    wait_for(
        lambda: (
            (h.job(jid).get("progress") or {}).get("ckpt_step") == CKPT_EVERY
            and any(x["kind"] == "step" and x["n"] >= CKPT_EVERY + 6 for x in lines())
        ),
        120,
        what="the first attempt's checkpoint at the controller and six more steps",
    )
    out = h.run(["scontrol", "requeue", str(jid)])
    assert out.returncode == 0, out.stderr
    job = h.wait_job(jid, lambda j: j["state"] == "COMPLETED" and not j["completing"], timeout=180)
    assert job["restart_count"] == 1
    # the last attempt's final reports come with its node's next heartbeat
    wait_for(lambda: h.job(jid)["attempts"][-1].get("step") == STEPS, 60, what="the last progress report")

    fw, attempts = framework_ettr(lines())
    assert attempts == 2
    out = h.run(["sacct", "-j", str(jid), "-X", "-n", "-P", "-o", "State,Restarts,Goodput,LastCheckpoint"])
    assert out.returncode == 0, out.stderr
    state, restarts, goodput, ckpt = out.stdout.strip().splitlines()[-1].split("|")
    assert (state, restarts, ckpt) == ("COMPLETED", "1", str(STEPS - CKPT_EVERY))
    controller = float(goodput.rstrip("%")) / 100
    # the requeue lost work, so neither is 100 %; and both count it the same way
    assert 0.5 < fw < 0.97 and 0.5 < controller < 0.97
    print(f"goodput: controller (sacct) {controller:.4f}, framework {fw:.4f}")  # shown with -s
    assert abs(controller - fw) <= 0.02, f"controller {controller:.4f}, framework {fw:.4f}"
