"""The checkpoint handshake with real daemons (issue 37 item 3): a preempted job learns its
deadline from ``muster.progress``, saves, reports ``checkpoint(step)`` and is stopped at
once, long before its GraceTime of 120 s, so its preemptor starts; sacct shows PREEMPTED
and the GPU-time it lost. A victim that never answers is stopped at its deadline and
loses its whole run."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

# Trains in steps; when asked (SIGTERM sets a flag, the deadline file says when), saves a
# checkpoint, reports it, and goes on training: only the controller's answer stops it.
TRAINER = f"""#!{sys.executable}
import os, signal, time
from muster import progress

signal.signal(signal.SIGTERM, lambda *_: None)  # stopped by the controller, not by the warning
answer = os.environ.get("ANSWER") == "1"
saved = False
out = f"ckpt-{{os.environ['SLURM_JOB_ID']}}.{{os.environ.get('SLURM_RESTART_COUNT', '0')}}"
step = 0
while True:
    step += 1
    progress.step(step)
    deadline = progress.preempt_deadline()
    if deadline is not None and not saved:
        saved = True
        if answer:
            with open(out + ".tmp", "w") as f:
                f.write(f"{{step}} {{deadline}} {{time.time()}}\\n")
            os.replace(out + ".tmp", out)  # the checkpoint is on disk: now say so
            progress.checkpoint(step)
        else:
            with open(out, "w") as f:
                f.write(f"told {{deadline}}\\n")
    time.sleep(0.2)
"""


def ok(out: object) -> str:
    assert out.returncode == 0, out.stderr  # type: ignore[attr-defined]
    return out.stdout  # type: ignore[attr-defined,no-any-return]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=1, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={"PreemptType": "preempt/qos", "PreemptMode": "REQUEUE", "KillWait": "2", "SchedulerInterval": "1"},
    )
    h.up()
    try:
        ok(h.run(["sacctmgr", "-i", "add", "qos", "scavenger", "GraceTime=120", "PreemptMode=requeue"]))
        ok(h.run(["sacctmgr", "-i", "add", "qos", "stubborn", "GraceTime=5", "PreemptMode=cancel"]))
        ok(h.run(["sacctmgr", "-i", "add", "qos", "high", "Preempt=scavenger,stubborn", "Priority=100"]))
        with open(os.path.join(h.workdir, "trainer.py"), "w") as f:
            f.write(TRAINER)
        os.chmod(os.path.join(h.workdir, "trainer.py"), 0o755)
        yield h
    finally:
        h.down()


def start_victim(h: Harness, qos: str, answer: bool) -> int:
    job = h.sbatch(
        f"--qos={qos}", "--gpus=2", "-o", "trainer-%j.out", "trainer.py", env={"ANSWER": "1" if answer else ""}
    )
    h.wait_state(job, "RUNNING")
    wait_for(lambda: (h.job(job).get("progress") or {}).get("step"), 60, what=f"job {job}'s first step to be reported")
    return job


def sacct(h: Harness, job: int) -> list[list[str]]:
    fields = "JobID,State,LastCheckpoint,LostWorkRAW,ElapsedRaw"
    out = ok(h.run(["sacct", "-D", "-X", "-n", "-P", "-j", str(job), f"--format={fields}"]))
    return [line.split("|") for line in out.splitlines()]


def test_a_victim_that_saves_when_told_is_stopped_at_once_and_its_preemptor_starts(cluster: Harness) -> None:
    h = cluster
    victim = start_victim(h, "scavenger", answer=True)
    big = h.sbatch("--qos=high", "--gpus=2", "--wrap", "true")
    # GraceTime is 120 s: the preemptor runs within this wait only because the victim answered
    done = h.wait_job(big, timeout=90)
    assert done["state"] == "COMPLETED"
    step, deadline, saved_at = h.read(f"ckpt-{victim}.0").split()
    assert float(deadline) - float(saved_at) > 60  # it was told its deadline, and saved long before
    rows = sacct(h, victim)
    assert rows[0][:2] == [str(victim), "PREEMPTED"]
    first = h.job(victim)["attempts"][0]
    assert (first["outcome"], first["ckpt_step"]) == ("PREEMPTED", int(step))  # the checkpoint it answered with
    lost, elapsed = int(rows[0][3]), int(rows[0][4])
    assert lost < 2 * elapsed  # 2 GPUs: it lost only the time since its checkpoint
    assert h.job(victim)["system_comment"].startswith(f"Preempted by job {big}")
    ok(h.run(["scancel", str(victim)]))
    h.wait_job(victim, timeout=60)


def test_a_victim_that_never_answers_is_stopped_at_its_deadline_and_loses_its_run(cluster: Harness) -> None:
    h = cluster
    victim = start_victim(h, "stubborn", answer=False)
    big = h.sbatch("--qos=high", "--gpus=2", "--wrap", "true")
    ended = h.wait_job(victim, timeout=90)
    assert ended["state"] == "PREEMPTED"
    told = float(h.read(f"ckpt-{victim}.0").split()[1])
    assert ended["end_time"] >= told  # it ran until its deadline: nothing ended it sooner
    assert h.wait_job(big, timeout=60)["state"] == "COMPLETED"
    ((job_id, state, ckpt, lost, elapsed),) = sacct(h, victim)
    assert (job_id, state, ckpt) == (str(victim), "PREEMPTED", "")
    assert abs(int(lost) - 2 * int(elapsed)) <= 2  # no checkpoint: its whole run on 2 GPUs
