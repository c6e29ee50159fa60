"""The checkpoint handshake on a manual clock (issue 37): a victim is told its deadline with
its signal; a checkpoint it reports in its grace time ends the grace at once (the next pass
stops it and its preemptor starts); sacct's LostWork is the GPU-time since that checkpoint.
A victim that does not answer is stopped at its deadline and loses its whole run."""

from __future__ import annotations

import json
import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec
from muster.core.states import JobState
from muster.ctld.actions import Launch, SignalJob, Terminate
from muster.ctld.controller import Controller, Identity
from muster.ctld.loop import run_pass
from muster.ctld.records import lost_work, record_wire
from muster.ctld.store import Store
from muster.sched import SchedConfig

CONF = """
ClusterName=t
SlurmdTimeout=100
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=node[1-2] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=low Nodes=ALL Default=YES MaxTime=INFINITE PriorityTier=1 GraceTime=120
PartitionName=cheap Nodes=ALL MaxTime=INFINITE PriorityTier=1 GraceTime=120 PreemptMode=CANCEL
PartitionName=high Nodes=ALL MaxTime=INFINITE PriorityTier=10
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def schedule(ctl: Controller) -> list[object]:
    result = run_pass(ctl, SchedConfig.from_settings(ctl.config.settings), ctl.clock.now())
    for a in result.actions:
        if isinstance(a, Launch):
            ctl.launches.launch_done(a.job.job_id)
    return result.actions


def advance(ctl: Controller, seconds: float, progress: dict[int, dict[str, float]] | None = None) -> None:
    """Time passes; each node's heartbeat carries the progress its jobs wrote."""
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(seconds)
    for name, node in ctl.nodes.items():
        reports = [
            {"job_id": j, "attempt": a, **(progress or {}).get(j, {})} for j, a in node.allocs if j in (progress or {})
        ]
        ctl.agents.heartbeat({"node": name, "running": [list(k) for k in node.allocs], "progress": reports})


def submit(ctl: Controller, partition: str, nodes: int = 1) -> int:
    spec = JobSpec(gpus_per_node=8, partitions=[partition], min_nodes=nodes)
    return ctl.queue.submit(spec, ALICE).job_id


def preempt_one(ctl: Controller, partition: str = "low") -> tuple[int, int, SignalJob]:
    """Two jobs of ``partition`` run (one checkpointed at 1050); a job of ``high`` preempts
    one at 1100. Returns (victim, preemptor, the victim's warning)."""
    a = submit(ctl, partition)
    submit(ctl, partition)
    schedule(ctl)
    advance(ctl, 50, {a: {"first": 1001.0, "step": 50, "step_time": 1050.0, "ckpt_step": 50, "ckpt_time": 1050.0}})
    advance(ctl, 50)
    big = submit(ctl, "high")
    (warning,) = [x for x in schedule(ctl) if isinstance(x, SignalJob)]
    assert warning.job_id == a  # it loses 50 s x 8 GPUs; b would lose 100 s x 8
    return a, big, warning


def gone(ctl: Controller, job_id: int, attempt: int) -> None:
    for node in [n for n, rt in ctl.nodes.items() if (job_id, attempt) in rt.allocs]:
        ctl.launches.job_done({"job_id": job_id, "restart_count": attempt, "node": node, "terminated_by": "preempt"})


def sacct_rows(ctl: Controller, job_id: int) -> list[dict[str, object]]:
    rows = ctl.store.db.execute("SELECT attempt, data FROM acct_jobs WHERE job_id=? ORDER BY attempt", (job_id,))
    return [record_wire({**json.loads(d), "attempt": n}, ctl.clock.now(), "t") for n, d in rows.fetchall()]


def test_the_warning_carries_the_deadline(ctl: Controller) -> None:
    victim, big, warning = preempt_one(ctl)
    assert warning.deadline == 1100.0 + 120
    v = ctl.jobs[victim]
    assert (v.preempted_by, v.preempt_time, v.preempt_deadline) == (big, 1100.0, 1220.0)


def test_a_victim_that_checkpoints_is_stopped_at_once_and_its_preemptor_starts(ctl: Controller) -> None:
    victim, big, _ = preempt_one(ctl)
    advance(ctl, 5, {victim: {"ckpt_step": 60, "ckpt_time": 1104.0, "step": 60, "step_time": 1104.0}})
    assert ctl.jobs[victim].preempt_deadline == 1105.0  # the grace ends now, not at 1220
    ends = [x for x in schedule(ctl) if isinstance(x, Terminate)]
    assert [(t.job_id, t.reason) for t in ends] == [(victim, "preempt")]
    assert ctl.jobs[victim].state is JobState.PENDING and ctl.jobs[victim].restart_count == 1
    gone(ctl, victim, 0)
    schedule(ctl)
    assert ctl.jobs[big].state is JobState.RUNNING
    first, second = sacct_rows(ctl, victim)
    assert first["state"] == "PREEMPTED" and first["lost_work"] == 8.0  # 1 s since its checkpoint x 8 GPUs
    assert second["lost_work"] is None  # the next attempt lost nothing (yet)
    events = [k for (k,) in ctl.store.db.execute("SELECT kind FROM events WHERE job_id=?", (victim,))]
    assert "preempt_answered" in events


def test_a_checkpoint_older_than_the_last_one_is_no_answer(ctl: Controller) -> None:
    victim, _, _ = preempt_one(ctl)
    advance(ctl, 5, {victim: {"ckpt_step": 50, "ckpt_time": 1050.0}})  # the same checkpoint again
    assert ctl.jobs[victim].preempt_deadline == 1220.0
    assert not [x for x in schedule(ctl) if isinstance(x, Terminate)]


def test_a_victim_that_never_answers_is_stopped_at_its_deadline_and_loses_its_run(ctl: Controller) -> None:
    victim, _, _ = preempt_one(ctl, "cheap")
    advance(ctl, 60, {victim: {"step": 80, "step_time": 1150.0}})  # steps, but no checkpoint
    assert not [x for x in schedule(ctl) if isinstance(x, Terminate)]
    advance(ctl, 60)
    ends = [x for x in schedule(ctl) if isinstance(x, Terminate)]
    assert [t.job_id for t in ends] == [victim]
    assert ctl.jobs[victim].state is JobState.PREEMPTED
    (row,) = sacct_rows(ctl, victim)
    assert row["state"] == "PREEMPTED" and row["lost_work"] == (1220.0 - 1050.0) * 8


def test_lost_work_is_gpu_time_since_the_checkpoint_of_the_attempt() -> None:
    assert lost_work({"start": 0.0, "end": 100.0, "gpus": 4, "ckpt_time": 90.0}) == 40.0
    assert lost_work({"start": 0.0, "end": 100.0, "gpus": 4, "ckpt_time": None}) == 400.0
    assert lost_work({"start": 10.0, "end": 100.0, "gpus": 0, "ckpt_time": 5.0}) == 90.0  # before it began
    assert lost_work({"start": 0.0}) is None
