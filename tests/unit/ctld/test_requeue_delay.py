"""``SchedulerParameters=requeue_delay`` (slurm.conf(5), Slurm 25.11) and expedited requeue:
a job requeued after a node failure is not eligible again before the delay (120 s when the
file names none, as in Slurm 22.05, whose delay is ``AuthInfo=cred_expire``); an expedited
job (``--requeue=expedite`` under ``SlurmctldParameters=enable_expedited_requeue``) is
eligible at once; without that switch its option is an ordinary requeue."""

from __future__ import annotations

import pathlib

import pytest

from muster.cli.showconfig import config_lines
from muster.core import requeuedelay
from muster.core.clock import ManualClock
from muster.core.config import ConfigError, parse_config
from muster.core.job import JobSpec
from muster.core.states import JobState, Reason
from muster.ctld.actions import Launch
from muster.ctld.controller import Controller, Identity
from muster.ctld.loop import run_pass
from muster.ctld.reconfig_plan import validate
from muster.ctld.store import Store
from muster.sched import SchedConfig

BASE = """
ClusterName=t
SlurmdTimeout=10
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


def controller(tmp_path: pathlib.Path, extra: str = "") -> Controller:
    c = Controller(parse_config(BASE + extra, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def schedule(ctl: Controller) -> None:
    for a in run_pass(ctl, SchedConfig.from_settings(ctl.config.settings), ctl.clock.now()).actions:
        if isinstance(a, Launch):
            ctl.launches.launch_done(a.job.job_id)


def fail_a_node_of_a_running_job(ctl: Controller, **spec: object) -> int:
    job_id = ctl.queue.submit(JobSpec(gpus_per_node=8, min_nodes=2, **spec), ALICE).job_id  # type: ignore[arg-type]
    schedule(ctl)
    job = ctl.jobs[job_id]
    assert job.state is JobState.RUNNING
    ctl.liveness.update_nodes(ROOT, [job.nodes[0]], "DOWN", "dead")
    for node in job.nodes[1:]:  # the surviving node confirms the old attempt gone
        ctl.launches.job_done({"job_id": job_id, "restart_count": 0, "node": node, "terminated_by": "requeue"})
    assert ctl.jobs[job_id].state is JobState.PENDING and job.restart_count == 1
    return job_id


def test_the_delay_is_requeue_delay_else_cred_expire_else_120() -> None:
    assert requeuedelay.requeue_delay(None) == 120
    assert requeuedelay.requeue_delay("bf_continue,requeue_delay=30") == 30
    assert requeuedelay.requeue_delay("requeue_delay=0", "cred_expire=600") == 0
    assert requeuedelay.requeue_delay("bf_continue", "socket=/run/munge,cred_expire=600") == 600
    with pytest.raises(ValueError, match="requeue_delay=soon is not an integer"):
        requeuedelay.requeue_delay("requeue_delay=soon")
    with pytest.raises(ValueError, match="out of range"):
        requeuedelay.requeue_delay("requeue_delay=-5")


def test_a_bad_delay_is_a_configuration_error_naming_it() -> None:
    config = parse_config(BASE + "SchedulerParameters=requeue_delay=soon\n", "t.conf")
    assert any("requeue_delay=soon is not an integer" in p for p in validate(config))
    with pytest.raises(ConfigError):
        _ = config.requeue_delay


@pytest.mark.parametrize(
    ("extra", "delay"),
    [("", 120), ("SchedulerParameters=requeue_delay=30\n", 30), ("AuthInfo=cred_expire=200\n", 200)],
)
def test_a_job_requeued_after_a_node_failure_waits_the_delay(tmp_path: pathlib.Path, extra: str, delay: int) -> None:
    ctl = controller(tmp_path, extra)
    job_id = fail_a_node_of_a_running_job(ctl)
    job = ctl.jobs[job_id]
    assert job.reason is Reason.BEGIN_TIME and job.spec.begin_time == 1000.0 + delay
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(delay - 1)
    schedule(ctl)
    assert job.state is JobState.PENDING  # nodes are free, but not yet eligible
    ctl.clock.advance(1)
    schedule(ctl)
    assert ctl.jobs[job_id].state is JobState.RUNNING and job.restart_count == 1


def test_an_expedited_job_is_eligible_at_once(tmp_path: pathlib.Path) -> None:
    ctl = controller(tmp_path, "SlurmctldParameters=enable_expedited_requeue\n")
    job_id = fail_a_node_of_a_running_job(ctl, expedite=True)
    job = ctl.jobs[job_id]
    assert job.expedited and job.reason is not Reason.BEGIN_TIME
    schedule(ctl)
    assert job.state is JobState.RUNNING


def test_without_the_switch_expedite_is_an_ordinary_requeue(tmp_path: pathlib.Path) -> None:
    ctl = controller(tmp_path)
    job = ctl.jobs[fail_a_node_of_a_running_job(ctl, expedite=True)]
    assert not job.expedited and job.reason is Reason.BEGIN_TIME and job.spec.begin_time == 1120.0


def _line(settings: dict[str, str], key: str) -> str:
    (line,) = [x for x in config_lines(settings, {}) if x.split()[0] == key]
    return line.split("=", 1)[1].strip()


def test_show_config_says_the_delay_applied() -> None:
    assert _line({}, "SchedulerParameters") == "requeue_delay=120"
    assert _line({"AuthInfo": "cred_expire=300"}, "SchedulerParameters") == "requeue_delay=300"
    assert _line({"SchedulerParameters": "bf_continue"}, "SchedulerParameters") == "bf_continue,requeue_delay=120"
    assert _line({"SchedulerParameters": "requeue_delay=7"}, "SchedulerParameters") == "requeue_delay=7"


def test_muster_up_writes_a_short_delay_and_keeps_it_under_other_scheduler_parameters(tmp_path: pathlib.Path) -> None:
    from muster.cluster.local import LOCAL_REQUEUE_DELAY, ClusterShape, render_config

    for overrides, want in (
        ({}, f"requeue_delay={LOCAL_REQUEUE_DELAY}"),
        ({"SchedulerParameters": "bf_continue"}, f"bf_continue,requeue_delay={LOCAL_REQUEUE_DELAY}"),
        ({"SchedulerParameters": "requeue_delay=9"}, "requeue_delay=9"),
    ):
        config = parse_config(render_config(str(tmp_path), ClusterShape(nodes=1), overrides), "m.conf")
        assert config.get("SchedulerParameters") == want
        assert config.expedited_requeue


def _running_job(ctl: Controller) -> int:
    job_id = ctl.queue.submit(JobSpec(gpus_per_node=8), ALICE).job_id
    schedule(ctl)
    assert ctl.jobs[job_id].state is JobState.RUNNING
    return job_id


def _gone(ctl: Controller, job_id: int) -> None:
    for node in ctl.jobs[job_id].nodes or list(ctl.nodes):
        ctl.launches.job_done({"job_id": job_id, "restart_count": 0, "node": node, "terminated_by": "requeue"})


def test_scontrol_requeue_waits_the_delay_as_in_slurm(tmp_path: pathlib.Path) -> None:
    # Slurm 22.05 (the anchor): after `scontrol requeue`, Reason=BeginTime and
    # EligibleTime = the requeue + 120 s
    ctl = controller(tmp_path, "SchedulerParameters=requeue_delay=30\n")
    job_id = _running_job(ctl)
    ctl.queue.requeue_job(ctl.jobs[job_id], ALICE)
    _gone(ctl, job_id)
    job = ctl.jobs[job_id]
    assert job.state is JobState.PENDING and job.reason is Reason.BEGIN_TIME and job.eligible_time == 1030.0
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(29)
    schedule(ctl)
    assert ctl.jobs[job_id].state is JobState.PENDING
    ctl.clock.advance(1)
    schedule(ctl)
    assert ctl.jobs[job_id].state is JobState.RUNNING


def test_requeuehold_stays_held_and_keeps_the_delay_after_release(tmp_path: pathlib.Path) -> None:
    ctl = controller(tmp_path)
    job_id = _running_job(ctl)
    ctl.queue.requeue_job(ctl.jobs[job_id], ALICE, hold=True)
    _gone(ctl, job_id)
    job = ctl.jobs[job_id]
    assert job.hold == "user" and job.reason is Reason.HELD_USER and job.spec.begin_time == 1120.0


# Slurm delays every requeue of a batch job (its requeue of a finished batch job sets the
# begin time to now + requeue_delay + 1 whatever the cause): preemption with
# PreemptMode=REQUEUE and a failed launch too, not only node failures and scontrol requeue.
PREEMPT = """SchedulerParameters=requeue_delay=30
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=low Nodes=ALL MaxTime=INFINITE PriorityTier=1
PartitionName=high Nodes=ALL MaxTime=INFINITE PriorityTier=10
PartitionName=train Nodes=ALL MaxTime=INFINITE PriorityTier=1 ExpediteRequeue=YES
"""


def _advance(ctl: Controller, seconds: float) -> None:
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(seconds)
    for name, node in ctl.nodes.items():
        ctl.agents.heartbeat({"node": name, "running": [list(k) for k in node.allocs]})


def _preempt_one(ctl: Controller, partition: str) -> tuple[int, int]:
    """Four one-node jobs in ``partition`` fill the cluster; a job of ``high`` preempts one."""
    fill = [ctl.queue.submit(JobSpec(gpus_per_node=8, partitions=[partition]), ALICE).job_id for _ in range(4)]
    schedule(ctl)
    assert all(ctl.jobs[j].state is JobState.RUNNING for j in fill)
    _advance(ctl, 100)
    big = ctl.queue.submit(JobSpec(gpus_per_node=8, partitions=["high"]), ALICE).job_id
    schedule(ctl)
    (victim,) = [j for j in fill if ctl.jobs[j].preempted_by == big]
    schedule(ctl)  # GraceTime 0: requeued at the next pass
    for node in [n for n, rt in ctl.nodes.items() if (victim, 0) in rt.allocs]:
        ctl.launches.job_done({"job_id": victim, "restart_count": 0, "node": node, "terminated_by": "preempt"})
    assert ctl.jobs[victim].state is JobState.PENDING and ctl.jobs[victim].restart_count == 1
    return victim, big


def test_a_job_requeued_by_preemption_waits_the_delay(tmp_path: pathlib.Path) -> None:
    ctl = controller(tmp_path, PREEMPT)
    victim, big = _preempt_one(ctl, "low")
    job = ctl.jobs[victim]
    assert job.reason is Reason.BEGIN_TIME and job.eligible_time == 1100.0 + 30
    schedule(ctl)
    assert ctl.jobs[big].state is JobState.RUNNING
    node = ctl.jobs[big].nodes[0]
    ctl.launches.job_done({"job_id": big, "restart_count": 0, "node": node, "exit_code": 0})
    _advance(ctl, 29)
    schedule(ctl)
    assert job.state is JobState.PENDING  # a node is free, but the job is not yet eligible
    _advance(ctl, 1)
    schedule(ctl)
    assert job.state is JobState.RUNNING


def test_an_expedited_victim_of_preemption_is_eligible_at_once(tmp_path: pathlib.Path) -> None:
    ctl = controller(tmp_path, PREEMPT)
    victim, _ = _preempt_one(ctl, "train")
    assert ctl.jobs[victim].reason is not Reason.BEGIN_TIME and ctl.jobs[victim].eligible_time != 1130.0


@pytest.mark.parametrize("fault", [None, "node", "preflight"])
def test_a_job_requeued_after_a_failed_launch_waits_the_delay(tmp_path: pathlib.Path, fault: str | None) -> None:
    ctl = controller(tmp_path, "SchedulerParameters=requeue_delay=30\n")
    job_id = _running_job(ctl)
    ctl.launches.launch_failed(job_id, 0, "no such device", fault=fault, node=ctl.jobs[job_id].nodes[0])
    job = ctl.jobs[job_id]
    assert job.state is JobState.PENDING and job.hold is None
    assert job.reason is Reason.BEGIN_TIME and job.eligible_time == 1030.0
    _advance(ctl, 29)
    schedule(ctl)
    assert job.state is JobState.PENDING
    _advance(ctl, 1)
    schedule(ctl)
    assert job.state is JobState.RUNNING and job.restart_count == 1


def test_a_prolog_failure_holds_the_job_and_sets_the_delay_behind_the_hold(tmp_path: pathlib.Path) -> None:
    ctl = controller(tmp_path, "SchedulerParameters=requeue_delay=30\n")
    job_id = _running_job(ctl)
    ctl.launches.launch_failed(job_id, 0, "prolog exit 1", fault="prolog", node=ctl.jobs[job_id].nodes[0])
    job = ctl.jobs[job_id]
    assert job.hold is not None and job.reason is Reason.LAUNCH_FAILED and job.spec.begin_time == 1030.0
