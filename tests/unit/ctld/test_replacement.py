"""ctld.replacement on a manual clock: a failed node of a running job that asked for
--spare-nodes is swapped for a free node (the spare pool first) in the same job id; the
change is stored; without the option, or when the batch host fails, the job is requeued."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from muster.core import goodput
from muster.core.clock import ManualClock
from muster.core.config import ConfigError, parse_config
from muster.core.job import Job, JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.ctld.actions import NewAllocation, SignalJob, Terminate
from muster.ctld.controller import Controller, Identity
from muster.ctld.replacement import GPU_FAULT, HANG, HEALTH_CHECK, NOT_RESPONDING, SET_DOWN
from muster.ctld.store import Store
from muster.sched.snapshot import partition_views

CONF = """
ClusterName=t
SlurmdTimeout=10
ReturnToService=1
NodeName=node[1-6] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP SpareNodes=node[5-6]
"""

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def running(ctl: Controller, nodes: list[str], **spec: Any) -> Job:
    job = ctl.queue.submit(JobSpec(**spec), ALICE)

    class S:
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job.job_id, "gpu", False
            self.alloc = [NodeAlloc(n, 4, 1000, [0, 1]) for n in nodes]

    ctl.launches.apply_starts([S()], ctl.clock.now())
    ctl.launches.launch_done(job.job_id)
    return job


def silence(ctl: Controller, dead: str) -> list[Any]:
    """Every node but ``dead`` answers until ``dead`` goes DOWN; the actions of that check."""
    clock = ctl.clock
    assert isinstance(clock, ManualClock)
    actions: list[Any] = []
    ctl.liveness.loop_tick()
    for _ in range(12):
        clock.advance(1)
        ctl.liveness.loop_tick()
        for name in ctl.nodes:
            if name != dead:  # a batch host says it runs its jobs
                mine = [[j.job_id, j.restart_count] for j in ctl.jobs.values() if j.batch_host == name]
                ctl.agents.heartbeat({"node": name, "running": mine})
        actions += ctl.liveness.check_nodes()
    assert not ctl.nodes[dead].responding
    return actions


def test_a_dead_node_is_replaced_by_a_spare_in_the_same_job(ctl: Controller, tmp_path: pathlib.Path) -> None:
    job = running(ctl, ["node1", "node2", "node3"], spare_nodes=1, min_nodes=3)
    actions = silence(ctl, "node2")
    assert job.state is JobState.RUNNING and job.restart_count == 0
    assert job.nodes == ["node1", "node5", "node3"]  # same place: SLURM_NODEID of the others kept
    assert job.alloc[1].gpu_ids == [0, 1] and job.alloc[1].cpus == 4 and job.alloc[1].mem == 1000
    assert ctl.nodes["node5"].allocs and not ctl.nodes["node2"].allocs
    (r,) = job.replacements
    assert (r["old"], r["new"], r["cause"], r["attempt"]) == ("node2", "node5", NOT_RESPONDING, 0)
    assert not any(isinstance(a, Terminate) for a in actions)  # the job goes on
    (told,) = [a for a in actions if isinstance(a, NewAllocation)]  # the other nodes are told
    assert told.nodes == ["node1", "node3"] and [a["node"] for a in told.alloc] == ["node1", "node5", "node3"]
    assert (told.old, told.new, told.cause) == ("node2", "node5", NOT_RESPONDING)
    # stored: a controller that starts on the same store sees the repaired allocation
    again = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1100.0))
    again.load()
    stored = again.jobs[job.job_id]
    assert stored.nodes == ["node1", "node5", "node3"] and stored.replacements[0]["new"] == "node5"
    assert again.nodes["node5"].allocs and not again.nodes["node2"].allocs
    assert "replaced" in [kind for _t, kind, _d in again.store.events(job.job_id)]


def test_the_budget_is_the_number_asked_for_then_the_job_is_requeued(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2", "node3"], spare_nodes=1, min_nodes=3)
    ctl.liveness.update_nodes(ROOT, ["node2"], "DOWN", "bad cable")
    assert job.state is JobState.RUNNING and job.nodes == ["node1", "node5", "node3"]
    assert job.replacements[0]["cause"] == SET_DOWN
    actions = ctl.liveness.update_nodes(ROOT, ["node3"], "DOWN", "bad cable")
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert any(isinstance(a, Terminate) for a in actions)


def test_without_spare_nodes_a_failed_node_requeues_the_job_as_before(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2"])
    silence(ctl, "node2")
    assert job.state is JobState.PENDING and job.restart_count == 1 and not job.replacements


def test_the_batch_host_is_not_replaced(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2"], spare_nodes=2)
    silence(ctl, "node1")
    assert job.state is JobState.PENDING and job.restart_count == 1 and not job.replacements


def test_a_drained_spare_is_never_taken_and_an_idle_node_is_taken_after_the_pool(ctl: Controller) -> None:
    ctl.liveness.update_nodes(ROOT, ["node5", "node6"], "DRAIN", "repair")
    job = running(ctl, ["node1", "node2"], spare_nodes=1)
    ctl.liveness.update_nodes(ROOT, ["node2"], "DOWN", "x")
    assert job.nodes == ["node1", "node3"]


def test_a_gpu_fault_and_a_failed_health_check_replace_the_node_and_stop_the_job_there(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2", "node3"], spare_nodes=2, replace_signal="USR2")
    actions = ctl.training.gpu_fault("node2", "GPU 1: XID 79")
    assert job.nodes == ["node1", "node5", "node3"] and job.replacements[-1]["cause"] == GPU_FAULT
    assert Terminate(job.job_id, 0, ["node2"], "node_fail") in actions
    sig = [a for a in actions if isinstance(a, SignalJob)]
    assert sig and sig[0].nodes == ["node1"] and sig[0].signal == 12
    actions = ctl.agents.node_faults({"node": "node3", "health": {"ok": False, "reason": "disk"}})
    assert job.nodes == ["node1", "node5", "node6"] and job.replacements[-1]["cause"] == HEALTH_CHECK
    assert ctl.nodes["node3"].drain and job.state is JobState.RUNNING


def test_a_failed_health_check_leaves_a_job_without_the_option_running_there(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2"])
    assert ctl.agents.node_faults({"node": "node2", "health": {"ok": False, "reason": "disk"}}) == []
    assert job.nodes == ["node1", "node2"] and job.state is JobState.RUNNING


def test_spares_are_kept_out_of_placement_and_must_be_nodes_of_the_partition() -> None:
    views = partition_views(parse_config(CONF, "t.conf"))
    assert views["gpu"].nodes == ("node1", "node2", "node3", "node4")
    with pytest.raises(ConfigError, match="SpareNodes"):
        parse_config(CONF.replace("SpareNodes=node[5-6]", "SpareNodes=node9"), "t.conf")


def test_the_work_since_the_last_checkpoint_counts_as_lost_in_goodput(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2"], spare_nodes=1)
    start = ctl.clock.now()
    job.progress = {"first": start + 10, "step": 50, "step_time": start + 100, "ckpt_step": 40, "ckpt_time": start + 80}
    clock = ctl.clock
    assert isinstance(clock, ManualClock)
    clock.advance(100)
    ctl.liveness.update_nodes(ROOT, ["node2"], "DOWN", "x")
    assert job.replacements[0]["lost"] == 20.0  # 100 - 80: the work since the checkpoint
    clock.advance(100)
    g = goodput.summary(job.to_dict(), ctl.clock.now())
    assert g["lost"] == 20.0 and g["startup"] == 10.0 and g["productive"] == 170.0


def _beat(ctl: Controller, seconds: float, progress: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """Time passes; every node answers, running its jobs (and reporting ``progress``)."""
    clock = ctl.clock
    assert isinstance(clock, ManualClock)
    clock.advance(seconds)
    for name, node in ctl.nodes.items():
        body: dict[str, Any] = {"node": name, "running": [list(k) for k in node.allocs]}
        if progress and name in progress:
            body["progress"] = progress[name]
        ctl.agents.heartbeat(body)


def test_ranks_hung_behind_on_one_node_get_that_node_replaced_not_the_job_requeued(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2", "node3"], spare_nodes=1, hang_timeout=60)
    t = ctl.clock.now()

    def step(n: int) -> dict[str, Any]:
        return {"job_id": job.job_id, "attempt": 0, "first": t, "step": n, "step_time": ctl.clock.now()}

    _beat(ctl, 1, {"node1": [step(5)], "node2": [step(4)], "node3": [step(5)]})  # node2's rank fell behind
    _beat(ctl, 61)
    ctl.liveness.check_nodes()  # judged hung: evidence asked for
    assert (job.progress or {}).get("hang_judged") is not None
    _beat(ctl, 20)
    actions = ctl.liveness.check_nodes()
    assert job.state is JobState.RUNNING and job.restart_count == 0
    assert job.nodes == ["node1", "node5", "node3"] and job.replacements[0]["cause"] == HANG
    assert "hang_judged" not in (job.progress or {})
    assert any(isinstance(a, NewAllocation) for a in actions)
    _beat(ctl, 30)  # silence counts from the repair: not judged again 30 s after it
    ctl.liveness.check_nodes()
    assert "hang_judged" not in (job.progress or {}) and job.state is JobState.RUNNING


def test_a_hang_without_a_node_singled_out_requeues_the_job_as_before(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2"], spare_nodes=1, hang_timeout=60)

    def step(n: int) -> dict[str, Any]:
        return {"job_id": job.job_id, "attempt": 0, "first": ctl.clock.now(), "step": n, "step_time": ctl.clock.now()}

    _beat(ctl, 1, {"node1": [step(5)], "node2": [step(5)]})  # every rank stopped at the same step
    _beat(ctl, 61)
    ctl.liveness.check_nodes()
    _beat(ctl, 20)
    ctl.liveness.check_nodes()
    assert job.state is JobState.PENDING and job.restart_count == 1 and not job.replacements


SCAVENGE = """
ClusterName=t
SlurmdTimeout=10
ReturnToService=1
NodeName=node[1-5] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=node[1-5] Default=YES MaxTime=INFINITE State=UP SpareNodes=node5 PriorityTier=10
PartitionName=scavenger Nodes=node5 MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=30
"""


def test_a_spare_running_preemptible_work_is_reclaimed_within_its_grace(tmp_path: pathlib.Path) -> None:
    c = Controller(parse_config(SCAVENGE, "t.conf"), Store(str(tmp_path / "s.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})

    def start(nodes: list[str], partition: str, cpus: int, **spec: Any) -> Job:
        job = c.queue.submit(JobSpec(partitions=[partition], **spec), ALICE)

        class S:
            def __init__(self) -> None:
                self.job_id, self.partition, self.backfilled = job.job_id, partition, False
                self.alloc = [NodeAlloc(n, cpus, 1000, [0, 1]) for n in nodes]

        c.launches.apply_starts([S()], c.clock.now())
        c.launches.launch_done(job.job_id)
        return job

    scavenger = start(["node5"], "scavenger", 32)  # all of node5's CPUs: nothing fits beside it
    start(["node4"], "gpu", 32)  # node4 is full: no free node but the spare
    job = start(["node1", "node2", "node3"], "gpu", 4, spare_nodes=1)
    actions = c.liveness.update_nodes(ROOT, ["node2"], "DOWN", "x")
    assert job.nodes == ["node1", "node5", "node3"] and job.replacements[0]["reclaimed"] == [scavenger.job_id]
    assert scavenger.preempted_by == job.job_id and scavenger.preempt_deadline == c.clock.now() + 30
    assert any(isinstance(a, SignalJob) and a.nodes == ["node5"] for a in actions)  # told to leave
    clock = c.clock
    assert isinstance(clock, ManualClock)
    clock.advance(31)
    ended = c.preemption.expire(c.clock.now())
    assert scavenger.state is JobState.PENDING and scavenger.restart_count == 1  # requeued at its deadline
    assert any(isinstance(a, Terminate) and a.job_id == scavenger.job_id and a.nodes == ["node5"] for a in ended)
    assert job.state is JobState.RUNNING and job.restart_count == 0


def test_work_of_an_equal_or_higher_tier_on_the_spare_is_never_taken(tmp_path: pathlib.Path) -> None:
    conf = SCAVENGE.replace("PriorityTier=1 PreemptMode=REQUEUE", "PriorityTier=10 PreemptMode=REQUEUE")
    c = Controller(parse_config(conf, "t.conf"), Store(str(tmp_path / "s.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    jobs = []
    for nodes, part, cpus, spec in (
        (["node5"], "scavenger", 32, {}),
        (["node4"], "gpu", 32, {}),
        (["node1", "node2", "node3"], "gpu", 4, {"spare_nodes": 1}),
    ):
        job = c.queue.submit(JobSpec(partitions=[part], **spec), ALICE)

        class S:
            def __init__(self, job: Job = job, part: str = part, nodes: list[str] = nodes, cpus: int = cpus) -> None:
                self.job_id, self.partition, self.backfilled = job.job_id, part, False
                self.alloc = [NodeAlloc(n, cpus, 1000, [0, 1]) for n in nodes]

        c.launches.apply_starts([S()], c.clock.now())
        jobs.append(job)
    c.liveness.update_nodes(ROOT, ["node2"], "DOWN", "x")
    assert jobs[2].state is JobState.PENDING and not jobs[2].replacements  # requeued as before
    assert jobs[0].preempted_by is None


IN_ALL_REDUCE = """Thread 0x00007f (most recent call first):
  File "/v/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 2806 in all_reduce
  File "/v/lib/python3.12/site-packages/torch/distributed/c10d_logger.py", line 81 in wrapper
  File "/w/train.py", line 40 in main
"""
ELSEWHERE = """Thread 0x00007f (most recent call first):
  File "/w/train.py", line 37 in main
"""


def _same_step_then_evidence(ctl: Controller, job: Job, stacks: dict[str, str]) -> list[Any]:
    """Every rank reports step 5, then nothing: judged hung; each node's evidence is its
    rank's Python stack. The actions of the check after the evidence came."""
    t = ctl.clock.now()

    def step(n: int) -> dict[str, Any]:
        return {"job_id": job.job_id, "attempt": 0, "first": t, "step": n, "step_time": ctl.clock.now()}

    _beat(ctl, 1, {n: [step(5)] for n in job.nodes})
    _beat(ctl, 61)
    ctl.liveness.check_nodes()
    assert (job.progress or {}).get("hang_judged") is not None
    evidence = {
        n: [{"job_id": job.job_id, "attempt": 0, "evidence": [{"pid": 7, "cmdline": "python train.py", "python": s}]}]
        for n, s in stacks.items()
    }
    _beat(ctl, 1, evidence)
    return ctl.liveness.check_nodes()


def test_ranks_at_the_same_step_the_node_whose_rank_never_entered_the_collective_is_replaced(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2", "node3"], spare_nodes=1, hang_timeout=60)
    _same_step_then_evidence(ctl, job, {"node1": IN_ALL_REDUCE, "node2": ELSEWHERE, "node3": IN_ALL_REDUCE})
    assert job.state is JobState.RUNNING and job.restart_count == 0  # every node's evidence in: no grace wait
    assert job.nodes == ["node1", "node5", "node3"] and job.replacements[0]["cause"] == HANG
    _beat(ctl, 100)  # the restarted ranks have not reported yet: twice the timeout (a slow start)
    ctl.liveness.check_nodes()
    assert "hang_judged" not in (job.progress or {}) and job.state is JobState.RUNNING
    report = {"job_id": job.job_id, "attempt": 0, "step": 4, "step_time": ctl.clock.now()}
    _beat(ctl, 1, {"node5": [report]})  # resumed from its checkpoint: the timeout again
    _beat(ctl, 61)
    ctl.liveness.check_nodes()
    assert (job.progress or {}).get("hang_judged") is not None


def test_restarted_ranks_that_never_report_after_a_repair_are_judged_at_twice_the_timeout(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2", "node3"], spare_nodes=1, hang_timeout=60)
    _same_step_then_evidence(ctl, job, {"node1": IN_ALL_REDUCE, "node2": ELSEWHERE, "node3": IN_ALL_REDUCE})
    assert job.nodes == ["node1", "node5", "node3"]
    _beat(ctl, 100)
    ctl.liveness.check_nodes()
    assert "hang_judged" not in (job.progress or {})
    _beat(ctl, 25)  # stuck before their first step (a rendezvous that never completes)
    ctl.liveness.check_nodes()
    assert (job.progress or {}).get("hang_judged") is not None


def test_without_spares_the_job_is_requeued_off_the_node_whose_rank_never_entered_the_collective(
    ctl: Controller,
) -> None:
    job = running(ctl, ["node1", "node2", "node3"], hang_timeout=60, requeue=True)
    _same_step_then_evidence(ctl, job, {"node1": IN_ALL_REDUCE, "node2": IN_ALL_REDUCE, "node3": ELSEWHERE})
    assert job.state is JobState.PENDING and job.restart_count == 1 and not job.replacements
    assert job.spec.exclude == ["node3"]
    assert "suspect nodes: node3;" in (job.system_comment or "")


def test_stacks_that_single_out_no_node_suspect_them_all(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2"], spare_nodes=1, hang_timeout=60, requeue=True)
    _same_step_then_evidence(ctl, job, {"node1": ELSEWHERE, "node2": ELSEWHERE})  # nobody in a collective
    assert job.state is JobState.PENDING and not job.replacements
    assert "suspect nodes: node1,node2;" in (job.system_comment or "")


def test_a_hung_node_is_not_excluded_when_only_spares_would_be_left_to_place_the_job_on(ctl: Controller) -> None:
    job = running(ctl, ["node1", "node2", "node3", "node4"], min_nodes=4, hang_timeout=60, requeue=True)
    ctl.training.avoid(job, ["node2"])  # node5 and node6 are spares: never placed on
    assert job.spec.exclude == []
    small = running(ctl, ["node1", "node2"], min_nodes=2, hang_timeout=60, requeue=True)
    ctl.training.avoid(small, ["node2"])
    assert small.spec.exclude == ["node2"]
