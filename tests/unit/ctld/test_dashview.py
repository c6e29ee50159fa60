"""What the dashboard shows of nodes and jobs: each GPU's state, jobs named only to those
who may see them, a bounded ring of samples, and a job's timeline."""

from __future__ import annotations

from muster.ctld.dashview import Samples, counts, gpu_cells, node_view, timeline
from muster.ctld.nodes import NodeRuntime


def node(name: str = "node1", gpus: int = 4, **kw: object) -> NodeRuntime:
    n = NodeRuntime(name, 0, "127.0.0.1", 1, 8, 16000, gpus, None, f"gpu:{gpus}", (), 1)
    n.registered = n.responding = True
    for k, v in kw.items():
        setattr(n, k, v)
    return n


def test_each_gpu_is_allocated_to_its_job_or_idle() -> None:
    n = node(allocs={(7, 0): (2, 100, (0, 2)), (9, 1): (1, 100, (3,))})
    assert gpu_cells(n, None) == [
        {"index": 0, "state": "alloc", "job_id": 7},
        {"index": 1, "state": "idle"},
        {"index": 2, "state": "alloc", "job_id": 7},
        {"index": 3, "state": "alloc", "job_id": 9},
    ]
    assert (
        node_view(n, None)["jobs"] == [7, 9] and node_view(n, None)["state"] == "MIXED"
    )  # one GPU and CPUs still free


def test_a_job_the_caller_may_not_see_is_not_named() -> None:
    n = node(allocs={(7, 0): (2, 100, (0,)), (9, 0): (1, 100, (1,))})
    cells = gpu_cells(n, {9})
    assert cells[0] == {"index": 0, "state": "alloc"} and cells[1]["job_id"] == 9
    assert node_view(n, {9})["jobs"] == [9]


def test_a_drained_node_shows_drained_gpus_and_its_reason() -> None:
    n = node(drain=True, reason="bad fan", allocs={(7, 0): (1, 100, (1,))})
    assert [c["state"] for c in gpu_cells(n, None)] == ["drain", "alloc", "drain", "drain"]
    view = node_view(n, None)
    assert view["state"] == "DRAINING" and view["reason"] == "bad fan"
    n.allocs = {}
    assert node_view(n, None)["state"] == "DRAINED"


def test_a_down_node_shows_its_gpus_down() -> None:
    n = node(responding=False, reason="Not responding")
    assert {c["state"] for c in gpu_cells(n, None)} == {"down"}
    assert node_view(n, None)["state"] == "DOWN"
    assert counts([n, node("node2")], [])["gpus_out"] == 4


def test_the_ring_of_samples_is_bounded_and_read_from_a_time_on() -> None:
    ring = Samples(every=10, kept=3)
    for t in range(5):
        ring.take([node()], [], 100.0 + t)
    assert [s["t"] for s in ring.since(0)] == [102.0, 103.0, 104.0]
    assert [s["t"] for s in ring.since(102.5)] == [103.0, 104.0]
    assert ring.since(104.0) == []
    assert ring.since(0)[0]["gpus"] == 4


def test_the_timeline_leaves_out_progress_reports_and_flattens_details() -> None:
    events = [
        (1.0, "submit", {"uid": 0, "host": "h"}),
        (2.0, "start", {"nodes": ["node1", "node2"], "attempt": 0}),
        (3.0, "progress", {"node": "node1", "step": 5}),
        (4.0, "completed", {"exit_code": 0, "nested": {"x": 1}}),
    ]
    assert timeline(events) == [
        {"time": 1.0, "event": "submit", "details": {"uid": 0, "host": "h"}},
        {"time": 2.0, "event": "start", "details": {"nodes": "node1,node2", "attempt": 0}},
        {"time": 4.0, "event": "completed", "details": {"exit_code": 0}},
    ]


def test_the_queue_sends_running_jobs_then_pending_by_priority_and_at_most_its_cap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from muster.core.clock import ManualClock
    from muster.core.config import parse_config
    from muster.core.job import JobSpec
    from muster.core.states import JobState
    from muster.ctld.controller import Controller, Identity
    from muster.ctld.dashview import queue
    from muster.ctld.store import Store

    conf = "ClusterName=t\nNodeName=node1 CPUs=8 RealMemory=16000 Gres=gpu:4\nPartitionName=p Nodes=ALL Default=YES\n"
    ctl = Controller(parse_config(conf, "t.conf"), Store(str(tmp_path / "db")), ManualClock(1000.0))
    ctl.load()
    who = Identity(1001, 1001, "alice", "alice", "h", admin=False)
    jobs = [ctl.queue.submit(JobSpec(name=f"j{i}", script="#!/bin/sh\n", workdir="/w"), who) for i in range(5)]
    jobs[3].priority = 50
    jobs[4].state, jobs[4].start_time = JobState.RUNNING, 1000.0
    rows = queue(jobs, 1001.0, shown=3)
    assert [(r["id"], r["state"]) for r in rows] == [("5", "RUNNING"), ("4", "PENDING"), ("1", "PENDING")]
    assert rows[1]["name"] == "j3" and rows[1]["user"] == "alice" and rows[1]["reason"]
    assert len(queue(jobs, 1001.0)) == 5
