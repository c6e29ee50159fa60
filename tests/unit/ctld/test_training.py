"""GPU faults, progress, hangs and suspect nodes in the controller, on a manual clock."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.goodput import summary
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState, Reason
from muster.ctld.controller import Controller, Identity, SignalJob, Terminate
from muster.ctld.store import Store
from muster.ctld.training import auto_timeout, hang_grace

CONF = """
ClusterName=t
SlurmdTimeout=10
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP HangTimeout=2
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
BOB = Identity(1002, 1002, "bob", "bob", "h", admin=False)


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def now(ctl: Controller) -> float:
    return ctl.clock.now()


def advance(ctl: Controller, seconds: float) -> None:
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(seconds)
    for name, node in ctl.nodes.items():  # every node keeps answering, running its jobs
        ctl.agents.heartbeat({"node": name, "running": [list(k) for k in node.allocs]})


def run(ctl: Controller, nodes: list[str], who: Identity = ALICE, **spec: Any) -> Any:
    job = ctl.queue.submit(JobSpec(**spec), who)

    class S:
        job_id, partition, backfilled = job.job_id, "gpu", False
        alloc = [NodeAlloc(n, 1, 0, [0, 1]) for n in nodes]

    ctl.launches.apply_starts([S()], now(ctl))
    ctl.launches.launch_done(job.job_id)
    return job


def report(
    ctl: Controller,
    node: str,
    job: Any,
    step: int | None = None,
    ckpt: int | None = None,
    first: float | None = None,
    **more: Any,
) -> None:
    r: dict[str, Any] = {"job_id": job.job_id, "attempt": job.restart_count, "first": first or now(ctl), **more}
    if step is not None:
        r.update(step=step, step_time=now(ctl))
    if ckpt is not None:
        r.update(ckpt_step=ckpt, ckpt_time=now(ctl))
    ctl.agents.heartbeat({"node": node, "running": [[job.job_id, job.restart_count]], "progress": [r]})


# --- GPU faults --------------------------------------------------------------------------


def test_a_failing_gpu_drains_its_node_and_requeues_the_job_elsewhere(ctl: Controller) -> None:
    job = run(ctl, ["node2", "node3"])
    actions = ctl.agents.node_faults(
        {"node": "node2", "faults": [{"kind": "gpu", "reason": "GPU 3: XID 79 (fallen off the bus)", "gpu": 3}]}
    )
    node = ctl.nodes["node2"]
    assert node.drain and node.reason == "GPU 3: XID 79 (fallen off the bus)"
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert job.spec.exclude == ["node2"]
    assert "GPU 3" in (job.system_comment or "")
    assert [(type(a), a.nodes) for a in actions] == [(Terminate, ["node2", "node3"])]
    assert not ctl.nodes["node3"].allocs  # its resources are free for the next attempt


def test_a_gpu_fault_under_no_requeue_ends_the_job_node_fail(ctl: Controller) -> None:
    job = run(ctl, ["node1"], requeue=False)
    ctl.agents.node_faults(
        {"node": "node1", "faults": [{"kind": "gpu", "reason": "GPU 0: uncorrected ECC errors (4)"}]}
    )
    assert job.state is JobState.NODE_FAIL and job.spec.exclude == []


def test_a_gpu_fault_on_an_idle_node_only_drains_it(ctl: Controller) -> None:
    assert ctl.agents.node_faults({"node": "node4", "faults": [{"kind": "gpu", "reason": "GPU 1: missing"}]}) == []
    assert ctl.nodes["node4"].drain


# --- progress ----------------------------------------------------------------------------


def test_progress_is_merged_per_job_and_survives_a_restart(ctl: Controller, tmp_path: pathlib.Path) -> None:
    job = run(ctl, ["node1", "node2"])
    advance(ctl, 5)
    report(ctl, "node1", job, step=1)
    report(ctl, "node2", job, step=1)
    advance(ctl, 5)
    report(ctl, "node1", job, step=10, ckpt=10)
    p = job.progress
    assert p is not None and p["step"] == 10 and p["ckpt_step"] == 10 and p["first"] == 1005
    assert p["nodes"]["node2"][0] == 1
    again = Controller(ctl.config, ctl.store, ctl.clock)
    again.load()
    assert again.jobs[job.job_id].progress["ckpt_step"] == 10  # committed with the checkpoint


def test_a_report_of_an_earlier_attempt_is_ignored(ctl: Controller) -> None:
    job = run(ctl, ["node1"])
    ctl.agents.heartbeat(
        {
            "node": "node1",
            "running": [],
            "progress": [{"job_id": job.job_id, "attempt": 7, "step": 3, "step_time": now(ctl), "first": now(ctl)}],
        }
    )
    assert job.progress is None


# --- hangs --------------------------------------------------------------------------------


def test_a_job_whose_progress_stops_is_judged_then_requeued_as_hung(ctl: Controller) -> None:
    job = run(ctl, ["node1", "node2"], hang_timeout=60)
    report(ctl, "node1", job, step=5, ckpt=4)
    report(ctl, "node2", job, step=4)  # node2's rank fell behind
    advance(ctl, 30)
    assert ctl.liveness.check_nodes() == []
    advance(ctl, 31)
    actions = ctl.liveness.check_nodes()
    assert [type(a) for a in actions] == [SignalJob] and actions[0].signal == 10  # SIGUSR1
    assert actions[0].evidence  # to the processes that catch it only (agent.hangevidence)
    assert job.state is JobState.RUNNING
    assert [k for _t, k, _d in ctl.store.events(job.job_id)][-1] == "hang_judged"
    advance(ctl, hang_grace(60))
    actions = ctl.liveness.check_nodes()
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert job.reason is Reason.HUNG and "node2" in (job.system_comment or "")
    assert job.spec.exclude == ["node2"]  # the node of the stalled rank is avoided
    assert any(isinstance(a, Terminate) for a in actions)
    assert job.attempts[-1]["outcome"] == "Hung"


def test_a_judged_attempt_ends_hung_even_if_it_reports_or_exits_0_in_the_grace(ctl: Controller) -> None:
    job = run(ctl, ["node1"], hang_timeout=60)
    report(ctl, "node1", job, step=1)
    advance(ctl, 61)
    assert ctl.liveness.check_nodes()  # judged
    report(ctl, "node1", job, step=2)  # too late: the judgement stands
    ctl.launches.job_done({"job_id": job.job_id, "restart_count": 0, "node": "node1", "exit_code": 0})
    assert job.state is JobState.PENDING and job.restart_count == 1 and job.reason is Reason.HUNG
    assert job.attempts[-1]["outcome"] == "Hung"
    assert not ctl.nodes["node1"].allocs


def test_no_judgement_right_after_a_stall_or_a_restart_of_the_controller(ctl: Controller) -> None:
    job = run(ctl, ["node1"], hang_timeout=60)
    report(ctl, "node1", job, step=1)
    advance(ctl, 61)
    ctl.stalls += 1  # the controller did not run for a while: reports may be on their way
    assert ctl.liveness.check_nodes() == []
    report(ctl, "node1", job, step=2)  # there it is
    advance(ctl, 10)
    assert ctl.liveness.check_nodes() == [] and job.state is JobState.RUNNING
    advance(ctl, 55)  # silent again for 65 s: judged on restart only once it could listen
    again = Controller(ctl.config, ctl.store, ctl.clock)
    again.load()
    assert again.training.check_hangs() == []
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(5)
    assert [type(a) for a in again.training.check_hangs()] == [SignalJob]


def test_evidence_is_stored_and_the_requeue_comes_once_every_node_sent_it(ctl: Controller) -> None:
    job = run(ctl, ["node1", "node2"], hang_timeout=60)
    report(ctl, "node1", job, step=3)
    report(ctl, "node2", job, step=3)
    advance(ctl, 61)
    ctl.liveness.check_nodes()
    proc = {"pid": 42, "state": "S (sleeping)", "wchan": "hrtimer_nanosleep", "signalled": None}
    report(ctl, "node1", job, evidence=[proc, {**proc, "pid": 43}])
    assert ctl.liveness.check_nodes() == [] and job.state is JobState.RUNNING  # node2's still due
    report(ctl, "node2", job, evidence=[proc])
    ctl.liveness.check_nodes()
    assert job.state is JobState.PENDING and job.reason is Reason.HUNG
    assert job.attempts[-1]["evidence"] == {"node1": 2, "node2": 1}
    assert "node1: 2, node2: 1" in (job.system_comment or "")
    stored = [d for _t, k, d in ctl.store.events(job.job_id) if k == "hang_evidence"]
    assert sorted((d["node"], [p["pid"] for p in d["processes"]]) for d in stored) == [
        ("node1", [42, 43]),
        ("node2", [42]),
    ]


def test_late_evidence_is_stored_with_the_requeued_attempt(ctl: Controller) -> None:
    job = run(ctl, ["node1"], hang_timeout=60)
    report(ctl, "node1", job, step=3)
    advance(ctl, 61)
    ctl.liveness.check_nodes()
    advance(ctl, hang_grace(60))
    ctl.liveness.check_nodes()
    assert job.state is JobState.PENDING
    ctl.agents.heartbeat(
        {"node": "node1", "running": [], "progress": [{"job_id": job.job_id, "attempt": 0, "evidence": [{"pid": 7}]}]}
    )
    assert job.attempts[-1]["evidence"] == {"node1": 1}
    assert [d["attempt"] for _t, k, d in ctl.store.events(job.job_id) if k == "hang_evidence"] == [0]


def test_no_hang_is_judged_inside_a_declared_section(ctl: Controller) -> None:
    job = run(ctl, ["node1"], hang_timeout=60)
    report(ctl, "node1", job, step=1)
    advance(ctl, 10)
    report(ctl, "node1", job, section="checkpoint", section_time=now(ctl))
    advance(ctl, 300)
    assert ctl.liveness.check_nodes() == []
    report(ctl, "node1", job, section=None, section_time=now(ctl))  # the section ends
    advance(ctl, 59)
    assert ctl.liveness.check_nodes() == []  # quiet counts from the section's end
    advance(ctl, 2)
    assert [type(a) for a in ctl.liveness.check_nodes()] == [SignalJob]


def test_without_a_timeout_the_bound_is_three_median_steps_or_a_minute(ctl: Controller) -> None:
    assert auto_timeout([]) is None  # one step only: no step time, not watched
    assert auto_timeout([1.0, 2.0, 100.0]) == 60 - hang_grace(60)  # a minute at least
    assert auto_timeout([40.0, 50.0, 45.0]) == 135 - hang_grace(135)  # 3 x 45 s
    ctl.config.partition("gpu").params.pop("HangTimeout")
    job = run(ctl, ["node1"])
    for step in range(1, 5):
        report(ctl, "node1", job, step=step)
        advance(ctl, 50)  # 50 s a step: judged within 150 s of the last report
    advance(ctl, 150 - hang_grace(150) - 50 - 1)
    assert ctl.liveness.check_nodes() == []
    advance(ctl, 2)
    assert [type(a) for a in ctl.liveness.check_nodes()] == [SignalJob]
    advance(ctl, hang_grace(150))
    ctl.liveness.check_nodes()
    assert job.reason is Reason.HUNG


def test_the_partition_default_applies_and_silent_jobs_are_never_hung(ctl: Controller) -> None:
    quiet = run(ctl, ["node3"])  # reports nothing: no hang detection
    job = run(ctl, ["node4"])  # HangTimeout=2 (minutes) from the partition
    report(ctl, "node4", job, step=1)
    advance(ctl, 121)
    actions = ctl.liveness.check_nodes()
    assert [a.job_id for a in actions if isinstance(a, SignalJob)] == [job.job_id]
    assert quiet.state is JobState.RUNNING


def hang(ctl: Controller, job: Any, node: str) -> None:
    report(ctl, node, job, step=1)
    advance(ctl, 11)
    ctl.liveness.check_nodes()
    advance(ctl, hang_grace(10))
    ctl.liveness.check_nodes()
    assert job.reason is Reason.HUNG


def test_a_node_that_hosts_hangs_of_two_users_jobs_is_quarantined(ctl: Controller) -> None:
    for who in (ALICE, BOB):
        job = run(ctl, ["node1"], who, hang_timeout=10)
        hang(ctl, job, "node1")
        ctl.queue.cancel(job, who)
    node = ctl.nodes["node1"]
    assert node.drain and node.reason.startswith("quarantined: 2 failures in 86400 s (hang job ")


def test_hangs_of_one_users_jobs_never_drain_a_node(ctl: Controller) -> None:
    job = run(ctl, ["node1"], hang_timeout=10)
    hang(ctl, job, "node1")
    assert job.spec.exclude == ["node1"]
    job.spec.exclude = []  # hangs on node1 again, then on node2: the job's fault
    ctl.launches.apply_starts(
        [
            type(
                "S",
                (),
                {
                    "job_id": job.job_id,
                    "partition": "gpu",
                    "backfilled": False,
                    "alloc": [NodeAlloc("node1", 1, 0, [0, 1])],
                },
            )()
        ],
        now(ctl),
    )
    hang(ctl, job, "node1")
    ctl.queue.cancel(job, ALICE)
    other = run(ctl, ["node2"], hang_timeout=10)
    hang(ctl, other, "node2")
    assert not ctl.nodes["node1"].drain and not ctl.nodes["node2"].drain


def test_node_failures_still_drain_on_the_repeat(ctl: Controller) -> None:
    now_ = now(ctl)
    ctl.training.incident("node3", 1, "node failure", now_)
    ctl.training.incident("node3", 2, "node failure", now_)  # the same outage: one incident
    assert not ctl.nodes["node3"].drain
    ctl.training.incident("node3", 3, "node failure", now_ + 60)
    assert ctl.nodes["node3"].drain


# --- goodput ----------------------------------------------------------------------------------


def test_goodput_spans_attempts_and_counts_work_lost_since_the_checkpoint(ctl: Controller) -> None:
    job = run(ctl, ["node1"])  # 2 GPUs
    advance(ctl, 10)
    report(ctl, "node1", job, step=1)  # 10 s of startup
    advance(ctl, 30)
    report(ctl, "node1", job, step=30, ckpt=30)
    advance(ctl, 20)  # 20 s of work after the checkpoint, then the GPU fails
    ctl.agents.node_faults({"node": "node1", "faults": [{"kind": "gpu", "reason": "GPU 0: XID 79"}]})
    s = summary(job.to_dict(), now(ctl))
    assert s["attempts"] == 1 and s["elapsed_total"] == 60 and s["gpu_seconds"] == 120
    assert s["startup"] == 10 and s["lost"] == 20 and s["productive"] == 30
    assert s["goodput"] == pytest.approx(0.5)
    assert s["lost_per_attempt"][0]["lost_steps"] == 0


def test_a_job_that_reports_nothing_shows_allocated_time_only(ctl: Controller) -> None:
    job = run(ctl, ["node1"])
    advance(ctl, 50)
    s = summary(job.to_dict(), now(ctl))
    assert s["gpu_seconds"] == 100 and s["goodput"] is None and s["lost"] is None


def test_a_bad_partition_hang_timeout_is_a_config_error() -> None:
    from muster.core.config import ConfigError

    with pytest.raises(ConfigError, match="bad HangTimeout"):
        parse_config(CONF.replace("HangTimeout=2", "HangTimeout=soon"), "t.conf")


def test_sacct_reads_the_goodput_fields_from_the_record(ctl: Controller) -> None:
    from muster.ctld.records import record_wire

    job = run(ctl, ["node1"])
    report(ctl, "node1", job, step=1)
    advance(ctl, 10)
    report(ctl, "node1", job, step=5, ckpt=5)
    rec = record_wire(job.to_dict(), now(ctl), "t")
    assert (rec["last_step"], rec["last_ckpt"], rec["gpu_seconds"], rec["goodput"]) == (5, 5, 20, 1.0)


def test_weighted_goodput_counts_gpu_seconds_and_weighs_a_cpu_job_as_one_gpu() -> None:
    from muster.core import goodput

    attempt = {"attempt": 0, "start": 0.0, "end": 100.0, "outcome": "NODE_FAIL", "first": 10.0, "ckpt_time": 60.0}
    job = {"state": "PENDING", "restart_count": 1, "attempts": [{**attempt, "gpus": 4}]}
    w = goodput.weighted(job, 200.0)
    assert w == {"allocated": 400.0, "startup": 40.0, "lost": 160.0, "productive": 200.0, "reported": True}
    silent = {"state": "COMPLETED", "attempts": [{"attempt": 0, "start": 0.0, "end": 50.0, "gpus": 0}]}
    assert goodput.weighted(silent, 60.0)["allocated"] == 50.0
    assert goodput.weighted(silent, 60.0)["reported"] is False
