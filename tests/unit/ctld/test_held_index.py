"""The per-node index of jobs (``NodeRuntime.allocs``) and its reverse (``ClusterState.held``)
stay equal to what the jobs say, across starts, ends, requeues, node failures and restarts:
a heartbeat and the node check read them instead of scanning every job."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.ctld.controller import Controller, Identity, Launch
from muster.ctld.store import Store

CONF = """
ClusterName=t
SlurmdTimeout=10
ReturnToService=1
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "muster.db")


def make(db: str, clock: ManualClock | None = None) -> Controller:
    ctl = Controller(parse_config(CONF, "test.conf"), Store(db), clock or ManualClock(1000.0))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    return ctl


def start(ctl: Controller, nodes: list[str], job_id: int | None = None) -> int:
    if job_id is None:
        job_id = ctl.queue.submit(JobSpec(min_nodes=len(nodes)), ALICE).job_id

    class S:  # the scheduler's Start, reduced to what apply_starts reads
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job_id, "gpu", False
            self.alloc = [NodeAlloc(n, 1, 0, [0]) for n in nodes]

    assert [type(a) for a in ctl.launches.apply_starts([S()], ctl.clock.now())] == [Launch]
    ctl.launches.launch_done(job_id)
    return job_id


def done(ctl: Controller, job_id: int, node: str, attempt: int, by: str | None = None) -> None:
    ctl.launches.job_done(
        {"node": node, "job_id": job_id, "restart_count": attempt, "exit_code": 0, "signal": 0, "terminated_by": by}
    )


def check(ctl: Controller) -> dict[str, list[int]]:
    """The index equals a full scan; returns each node's jobs (as ``job_ids_on`` says)."""
    from_nodes: dict[int, dict[int, set[str]]] = {}
    for node in ctl.nodes.values():
        for job_id, attempt in node.allocs:
            from_nodes.setdefault(job_id, {}).setdefault(attempt, set()).add(node.name)
    assert ctl.held == from_nodes
    for job in ctl.jobs.values():
        if job.state is JobState.RUNNING:
            assert ctl.held[job.job_id][job.restart_count] == set(job.nodes)
    return {name: ctl.job_ids_on(name) for name in ctl.nodes if ctl.job_ids_on(name)}


def test_a_start_indexes_the_job_on_its_nodes_and_its_end_removes_it(db: str) -> None:
    ctl = make(db)
    a = start(ctl, ["node1", "node2"])
    b = start(ctl, ["node2"])
    assert check(ctl) == {"node1": [a], "node2": [a, b]}
    done(ctl, a, "node1", 0)
    assert ctl.jobs[a].state is JobState.COMPLETED
    assert check(ctl) == {"node2": [b]}
    done(ctl, b, "node2", 0)
    assert check(ctl) == {} and ctl.held == {}


def test_a_requeued_job_keeps_its_old_run_indexed_until_cleaned_then_its_new_one(db: str) -> None:
    ctl = make(db)
    job_id = start(ctl, ["node1"])
    ctl.queue.requeue_job(ctl.jobs[job_id], ALICE)
    assert check(ctl) == {"node1": [job_id]} and ctl.held == {job_id: {0: {"node1"}}}
    start(ctl, ["node3"], job_id)  # the next attempt elsewhere while the first is cleaned
    assert check(ctl) == {"node1": [job_id], "node3": [job_id]}
    done(ctl, job_id, "node1", 0, "requeue")
    assert check(ctl) == {"node3": [job_id]} and ctl.held == {job_id: {1: {"node3"}}}


def test_a_dead_node_leaves_the_index_with_its_jobs(db: str) -> None:
    clock = ManualClock(1000.0)
    ctl = make(db, clock)
    a = start(ctl, ["node1", "node2"])
    b = start(ctl, ["node3"])
    clock.advance(5)
    for name in ("node2", "node3", "node4"):
        ctl.agents.heartbeat({"node": name, "running": []})
    clock.advance(6)  # node1 silent past SlurmdTimeout
    ctl.liveness.check_nodes()
    assert ctl.jobs[a].state is JobState.PENDING
    assert check(ctl) == {"node3": [b]}


def test_a_node_set_down_leaves_the_index_with_its_jobs(db: str) -> None:
    ctl = make(db)
    a = start(ctl, ["node1", "node2"])
    b = start(ctl, ["node3"])
    ctl.liveness.update_nodes(ROOT, ["node2"], "down", "maintenance")
    assert ctl.jobs[a].state is JobState.PENDING and ctl.jobs[a].restart_count == 1
    assert check(ctl) == {"node3": [b]}


def test_a_restarted_controller_rebuilds_the_index_from_the_store(db: str) -> None:
    ctl = make(db)
    a = start(ctl, ["node1", "node2"])
    b = start(ctl, ["node2"])
    done(ctl, b, "node2", 0)
    reborn = make(db)
    assert check(reborn) == {"node1": [a], "node2": [a]}
    assert reborn.held == {a: {0: {"node1", "node2"}}}


def test_a_heartbeat_reads_its_own_nodes_jobs_only(db: str) -> None:
    """A job on another node is not this heartbeat's business: it is neither killed nor
    judged lost from a heartbeat of a node that does not host it."""
    ctl = make(db)
    a = start(ctl, ["node1"])
    answer = ctl.agents.heartbeat({"node": "node2", "running": [[a, 0]]})
    assert answer["kill"] == [a]  # node2 runs it, but it belongs to node1
    assert ctl.agents.heartbeat({"node": "node1", "running": [[a, 0]]})["kill"] == []
    assert ctl.lost == {}
