"""PreemptMode=SUSPEND,GANG in the controller: a lower-tier job is frozen for its
preemptor (SUSPENDED, reason Preempted), lends it its CPUs (not its memory or GPUs), and
resumes when the preemptor ends; the lending survives a controller restart."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec
from muster.core.states import JobState, Reason
from muster.ctld.actions import Launch, SignalJob, SuspendJob, Terminate
from muster.ctld.controller import Controller, Identity
from muster.ctld.loop import run_pass
from muster.ctld.store import Store
from muster.ctld.view import build_snapshot
from muster.sched import SchedConfig

CONF = """
ClusterName=t
PreemptType=preempt/partition_prio
PreemptMode=SUSPEND,GANG
NodeName=node1 CPUs=8 RealMemory=16000 Gres=gpu:8
PartitionName=low Nodes=ALL Default=YES MaxTime=INFINITE PriorityTier=1
PartitionName=high Nodes=ALL MaxTime=INFINITE PriorityTier=10 PreemptMode=OFF
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


def controller(path: pathlib.Path, protocol: int | None = None) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        body = {"node": name, "gpus": 8, "running": [list(k) for k in c.nodes[name].allocs]}
        if protocol is None:
            c.agents.register(body)
        else:
            c.agents.register(body, protocol=protocol)
    return c


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    return controller(tmp_path)


def schedule(ctl: Controller) -> list[object]:
    result = run_pass(ctl, SchedConfig.from_settings(ctl.config.settings), ctl.clock.now())
    for a in result.actions:
        if isinstance(a, Launch):
            ctl.launches.launch_done(a.job.job_id)
    return result.actions


def advance(ctl: Controller, seconds: float) -> None:
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(seconds)


def submit(ctl: Controller, partition: str, cpus: int, gpus: int) -> int:
    spec = JobSpec(partitions=[partition], cpus_per_task=cpus, gpus_per_node=gpus, mem_per_node=4000)
    return ctl.queue.submit(spec, ALICE).job_id


def test_a_suspended_victim_lends_its_cpus_and_resumes_when_its_preemptor_ends(ctl: Controller) -> None:
    low = submit(ctl, "low", cpus=8, gpus=4)
    schedule(ctl)
    assert ctl.jobs[low].state is JobState.RUNNING
    advance(ctl, 100)
    high = submit(ctl, "high", cpus=4, gpus=4)
    actions = schedule(ctl)
    assert [a for a in actions if isinstance(a, SuspendJob)] == [SuspendJob(low, ["node1"], True)]
    assert not [a for a in actions if isinstance(a, SignalJob | Terminate)]
    v = ctl.jobs[low]
    assert v.display_state is JobState.SUSPENDED and v.reason is Reason.PREEMPTED and v.preempted_by == high
    assert v.system_comment == f"Preempted by job {high} (suspended until it ends)"
    advance(ctl, 5)
    schedule(ctl)
    h = ctl.jobs[high]
    assert h.state is JobState.RUNNING and h.nodes == ["node1"]
    assert ctl.nodes["node1"].cpus_alloc == 12  # the victim's 8 stay allocated to it, lent
    assert ctl.jobs[low].display_state is JobState.SUSPENDED
    advance(ctl, 50)
    assert not [a for a in schedule(ctl) if isinstance(a, SuspendJob)]  # its preemptor still runs
    ctl.launches.job_done({"job_id": high, "restart_count": 0, "node": "node1", "exit_code": 0})
    advance(ctl, 5)
    actions = schedule(ctl)
    assert [a for a in actions if isinstance(a, SuspendJob)] == [SuspendJob(low, ["node1"], False)]
    v = ctl.jobs[low]
    assert v.state is JobState.RUNNING and v.suspended_at is None and v.preempted_by is None
    assert v.reason is Reason.NONE and v.suspended_secs == pytest.approx(60.0)


def test_a_victim_waits_for_its_cpus_before_it_resumes(ctl: Controller) -> None:
    low = submit(ctl, "low", cpus=8, gpus=2)
    schedule(ctl)
    advance(ctl, 10)
    high = submit(ctl, "high", cpus=4, gpus=2)
    schedule(ctl)
    advance(ctl, 1)
    schedule(ctl)
    other = submit(ctl, "high", cpus=4, gpus=2)  # takes the rest of the lent CPUs
    advance(ctl, 1)
    schedule(ctl)
    assert ctl.jobs[high].state is JobState.RUNNING and ctl.jobs[other].state is JobState.RUNNING
    ctl.launches.job_done({"job_id": high, "restart_count": 0, "node": "node1", "exit_code": 0})
    advance(ctl, 1)
    assert not [a for a in schedule(ctl) if isinstance(a, SuspendJob)]  # 4 of its 8 CPUs are busy
    assert ctl.jobs[low].display_state is JobState.SUSPENDED
    ctl.launches.job_done({"job_id": other, "restart_count": 0, "node": "node1", "exit_code": 0})
    advance(ctl, 1)
    assert [a for a in schedule(ctl) if isinstance(a, SuspendJob)] == [SuspendJob(low, ["node1"], False)]


def test_the_lent_cpus_survive_a_controller_restart(tmp_path: pathlib.Path) -> None:
    ctl = controller(tmp_path)
    low = submit(ctl, "low", cpus=8, gpus=2)
    schedule(ctl)
    advance(ctl, 10)
    submit(ctl, "high", cpus=4, gpus=2)
    schedule(ctl)
    again = controller(tmp_path)
    assert again.jobs[low].display_state is JobState.SUSPENDED and again.jobs[low].reason is Reason.PREEMPTED
    view = next(n for n in build_snapshot(again).nodes if n.name == "node1")
    assert view.free_cpus == 8 and len(view.free_gpu_ids) == 6  # its CPUs lent, its GPUs kept


def test_a_victim_whose_agent_cannot_suspend_is_left_running(tmp_path: pathlib.Path) -> None:
    ctl = controller(tmp_path, protocol=2)  # before /v1/suspend
    low = submit(ctl, "low", cpus=8, gpus=2)
    schedule(ctl)
    advance(ctl, 10)
    high = submit(ctl, "high", cpus=4, gpus=2)
    assert not [a for a in schedule(ctl) if isinstance(a, SuspendJob)]
    assert ctl.jobs[low].display_state is JobState.RUNNING and ctl.jobs[low].preempted_by is None
    advance(ctl, 1)
    schedule(ctl)
    assert ctl.jobs[high].state is JobState.PENDING


def test_scontrol_show_config_prints_preempt_mode_as_slurm_does() -> None:
    from muster.cli.showconfig import config_lines

    def shown(value: str) -> str:
        (line,) = [x for x in config_lines({"PreemptMode": value}, {}) if x.split()[0] == "PreemptMode"]
        return line.split("=", 1)[1].strip()

    assert shown("suspend,gang") == "GANG,SUSPEND" and shown("REQUEUE") == "REQUEUE"
