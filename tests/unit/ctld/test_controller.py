"""The controller's state changes on a manual clock, with a real SQLite store on disk."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidPartition, PermissionDenied, Unsatisfiable
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState, Reason
from muster.ctld.controller import Controller, Identity, Launch, Terminate
from muster.ctld.store import Store

CONF = """
ClusterName=t
SlurmdTimeout=10
ReturnToService=1
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=debug Nodes=node[3-4] MaxTime=60 State=UP
"""

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
BOB = Identity(1002, 1002, "bob", "bob", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "muster.db")


def make(db: str, clock: ManualClock | None = None) -> Controller:
    ctl = Controller(parse_config(CONF, "test.conf"), Store(db), clock or ManualClock(1000.0))
    ctl.load()
    return ctl


def register_all(ctl: Controller) -> None:
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})


def start(ctl: Controller, job_id: int, nodes: list[str], gpus: int = 0) -> None:
    class S:  # the scheduler's Start, reduced to what apply_starts reads
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job_id, "gpu", False
            self.alloc = [NodeAlloc(n, 1, 0, list(range(gpus))) for n in nodes]

    actions = ctl.launches.apply_starts([S()], ctl.clock.now())
    assert [type(a) for a in actions] == [Launch]
    ctl.launches.launch_done(job_id)


def test_a_submitted_job_is_durable_before_the_answer(db: str) -> None:
    ctl = make(db)
    job = ctl.queue.submit(JobSpec(name="a", script="#!/bin/sh\ntrue\n", workdir="/tmp"), ALICE)
    assert job.job_id == 1 and job.partition == "gpu" and job.state is JobState.PENDING
    reborn = make(db)  # as after kill -9: nothing but the store survives
    assert reborn.jobs[1].spec.name == "a"
    assert reborn.queue.submit(JobSpec(), ALICE).job_id == 2


def test_running_jobs_hold_their_resources_across_a_restart(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    job = ctl.queue.submit(JobSpec(gpus_per_node=2), ALICE)
    start(ctl, job.job_id, ["node1"], gpus=2)
    reborn = make(db)
    assert reborn.jobs[job.job_id].state is JobState.RUNNING
    assert reborn.nodes["node1"].gpu_ids_alloc == {0, 1}


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (JobSpec(partitions=["nosuch"]), InvalidPartition),
        (JobSpec(gpus_per_node=9), Unsatisfiable),
        (JobSpec(mem_per_node=999 * 1024 * 1024), Unsatisfiable),
        (JobSpec(min_nodes=1, gpus=16), Unsatisfiable),
        (JobSpec(nodelist=["node9"]), Unsatisfiable),
    ],
)
def test_jobs_that_can_never_run_are_refused_and_change_nothing(db: str, spec: JobSpec, error: type) -> None:
    ctl = make(db)
    with pytest.raises(error):
        ctl.queue.submit(spec, ALICE)
    assert ctl.jobs == {} and make(db).jobs == {}


def test_the_time_limit_defaults_to_the_partition_limit(db: str) -> None:
    ctl = make(db)
    assert ctl.queue.submit(JobSpec(partitions=["debug"]), ALICE).time_limit == 3600
    assert ctl.queue.submit(JobSpec(), ALICE).time_limit is None


def test_a_user_may_not_cancel_another_users_job_but_root_may(db: str) -> None:
    ctl = make(db)
    job = ctl.queue.submit(JobSpec(), ALICE)
    with pytest.raises(PermissionDenied):
        ctl.queue.cancel(job, BOB)
    assert job.state is JobState.PENDING
    ctl.queue.cancel(job, ROOT)
    assert job.state is JobState.CANCELLED and job.cancelled_by == 0


def test_cancelling_a_running_job_terminates_it_and_frees_resources_when_cleaned(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    job = ctl.queue.submit(JobSpec(gpus_per_node=8), ALICE)
    start(ctl, job.job_id, ["node2"], gpus=8)
    actions = ctl.queue.cancel(job, ALICE)
    assert actions == [Terminate(job.job_id, 0, ["node2"], "cancel")]
    assert job.completing and ctl.nodes["node2"].gpu_ids_alloc == set(range(8))
    ctl.launches.job_done(
        {
            "node": "node2",
            "job_id": job.job_id,
            "restart_count": 0,
            "exit_code": 0,
            "signal": 15,
            "terminated_by": "cancel",
        }
    )
    assert job.state is JobState.CANCELLED and not job.completing
    assert ctl.nodes["node2"].allocs == {}


def test_hold_and_release(db: str) -> None:
    ctl = make(db)
    job = ctl.queue.submit(JobSpec(hold=True), ALICE)
    assert job.reason is Reason.HELD_USER
    ctl.queue.release(job, ALICE)
    assert job.hold is None
    ctl.queue.hold(job, ROOT, admin_hold=True)
    assert job.reason is Reason.HELD_ADMIN
    with pytest.raises(PermissionDenied):
        ctl.queue.release(job, ALICE)


def test_exit_reports_end_the_job_and_repeated_reports_are_harmless(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node1"])
    report = {"node": "node1", "job_id": job.job_id, "restart_count": 0, "exit_code": 3, "signal": 0}
    ctl.launches.job_done(report)
    ctl.launches.job_done(report)
    assert job.state is JobState.FAILED and job.exit_code == 3


def test_a_silent_node_goes_down_and_its_jobs_are_requeued(db: str) -> None:
    clock = ManualClock(1000.0)
    ctl = make(db, clock)
    register_all(ctl)
    job = ctl.queue.submit(JobSpec(min_nodes=2), ALICE)
    start(ctl, job.job_id, ["node1", "node2"])
    clock.advance(5)
    ctl.agents.heartbeat({"node": "node2", "running": []})
    clock.advance(6)  # node1 silent for 11 s > SlurmdTimeout=10
    actions = ctl.liveness.check_nodes()
    assert not ctl.nodes["node1"].responding and ctl.nodes["node1"].reason == "Not responding"
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert actions == [Terminate(job.job_id, 0, ["node2"], "node_fail")]
    kinds = [k for _, k, _ in ctl.store.events(job.job_id)]
    assert kinds[-2:] == ["node_fail", "requeue"]


def test_too_much_memory_is_refused_with_slurms_detail_line(db: str) -> None:
    with pytest.raises(Unsatisfiable) as err:
        make(db).queue.submit(JobSpec(mem_per_node=999 * 1024 * 1024), ALICE)
    assert str(err.value) == "Requested node configuration is not available"
    assert err.value.detail == "Memory specification can not be satisfied"


def test_requeue_returns_a_running_job_to_pending_at_once_and_waits_for_cleanup(db: str) -> None:
    from muster.ctld.view import build_snapshot

    ctl = make(db)
    register_all(ctl)
    job = ctl.queue.submit(JobSpec(gpus_per_node=8), ALICE)
    start(ctl, job.job_id, ["node1"], gpus=8)
    actions = ctl.queue.requeue_job(job, ALICE)
    assert actions == [Terminate(job.job_id, 0, ["node1"], "requeue")]
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert ctl.nodes["node1"].gpu_ids_alloc == set(range(8))  # attempt 0 still cleaning
    assert job.job_id not in [j.job_id for j in build_snapshot(ctl).pending]
    ctl.launches.job_done(
        {
            "node": "node1",
            "job_id": job.job_id,
            "restart_count": 0,
            "exit_code": 255,
            "signal": 0,
            "terminated_by": "requeue",
        }
    )
    assert job.state is JobState.PENDING and ctl.nodes["node1"].allocs == {}
    assert job.job_id in [j.job_id for j in build_snapshot(ctl).pending]


def test_draining_a_node_needs_a_reason_and_resume_clears_it(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    with pytest.raises(Exception, match="must specify a reason"):
        ctl.liveness.update_nodes(ROOT, ["node1"], "drain", None)
    with pytest.raises(PermissionDenied):
        ctl.liveness.update_nodes(ALICE, ["node1"], "drain", "disk")
    ctl.liveness.update_nodes(ROOT, ["node1"], "drain", "disk")
    assert ctl.nodes["node1"].drain and not ctl.nodes["node1"].available
    assert make(db).nodes["node1"].reason == "disk"  # admin decisions survive restarts
    ctl.liveness.update_nodes(ROOT, ["node1"], "resume", None)
    assert ctl.nodes["node1"].available and ctl.nodes["node1"].reason == ""


def test_setting_a_node_down_fails_and_requeues_its_jobs(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node3"])
    actions = ctl.liveness.update_nodes(ROOT, ["node3"], "down", "maintenance")
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert actions == [Terminate(job.job_id, 0, ["node3"], "node_fail")]


def test_a_job_its_agent_lost_is_a_node_failure_and_is_requeued(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node1"])
    ctl.launches.job_done(
        {
            "node": "node1",
            "job_id": job.job_id,
            "restart_count": 0,
            "exit_code": 0,
            "signal": 0,
            "terminated_by": "node_fail",
            "reason": "exit status lost",
        }
    )
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert [k for _, k, _ in ctl.store.events(job.job_id)][-2:] == ["node_fail", "requeue"]


def test_the_output_paths_shown_are_those_the_agent_opens(db: str) -> None:
    from muster.core.outputs import output_paths
    from muster.ctld.wire import job_wire

    ctl = make(db)
    register_all(ctl)
    job = ctl.queue.submit(
        JobSpec(
            name="train",
            script="#!/bin/sh\n",
            workdir="/w",
            array="3-4",
            stdout="logs/%x-%A_%a-%N-%b.out",
            stderr="/abs/%u.%J.err",
        ),
        ALICE,
    )
    start(ctl, job.job_id, ["node2"])
    wire = job_wire(job, ctl.clock.now())
    assert (wire["stdout_path"], wire["stderr_path"]) == output_paths(job.to_dict(), "node2")
    assert wire["stdout_path"] == f"/w/logs/train-{job.job_id}_3-node2-3.out"
    assert wire["stderr_path"] == f"/abs/alice.{job.job_id}.err"
