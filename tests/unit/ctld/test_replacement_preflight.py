"""A node swapped into a running job that asked for the pre-flight gate (``--preflight``)
passes the gate before the job's other nodes are told of it (``Dispatcher.replacement_gate``):
one that fails is drained with the evidence and the next candidate tried; none left, the
job is requeued. A job without the gate is not checked."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import Job, JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.ctld import dispatch
from muster.ctld.actions import Launch
from muster.ctld.controller import Controller, Identity
from muster.ctld.replacement import NOT_RESPONDING, PREFLIGHT
from muster.ctld.store import Store

CONF = """
ClusterName=t
NodeName=node[1-6] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP SpareNodes=node[5-6]
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


class _Client:
    """Answers ``/v1/preflight`` from a verdict per node (a reason: failed); records every post."""

    def __init__(self, failing: dict[str, str]) -> None:
        self.failing = failing
        self.sent: list[tuple[str, str | None]] = []

    def url(self, addr: str, port: int, path: str) -> str:
        return path

    async def post(self, url: str, body: dict[str, Any], to: str | None = None, timeout: float | None = None) -> Any:
        self.sent.append((url, to))
        if url == "/v1/preflight" and to in self.failing:
            return {"ok": False, "reason": f"preflight failed: {self.failing[to]}"}
        return {"ok": True}

    def checked(self) -> list[str | None]:
        return [to for url, to in self.sent if url == "/v1/preflight"]


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def _running(ctl: Controller, **spec: Any) -> Job:
    job = ctl.queue.submit(JobSpec(min_nodes=3, **spec), ALICE)

    class S:
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job.job_id, "gpu", False
            self.alloc = [NodeAlloc(n, 4, 1000, [0, 1]) for n in ("node1", "node2", "node3")]

    ctl.launches.apply_starts([S()], ctl.clock.now())
    ctl.launches.launch_done(job.job_id)
    return job


def _swap(ctl: Controller, job: Job, client: _Client) -> None:
    """node2 lost: the replacement's actions dispatched as the controller does."""
    actions = ctl.training.replacements.job_lost_node(job, "node2", NOT_RESPONDING, "node node2 not responding", 1000.0)
    assert actions is not None
    d = dispatch.Dispatcher(ctl, client)  # type: ignore[arg-type]

    async def go() -> None:
        for a in actions:
            await d.run(a)

    asyncio.run(go())


def test_a_replacement_that_fails_the_gate_is_drained_and_the_next_one_swapped_in(ctl: Controller) -> None:
    job = _running(ctl, spare_nodes=1, preflight=True)
    client = _Client({"node5": "GPU 0: no device file (/dev/nvidia0)"})
    _swap(ctl, job, client)
    assert client.checked() == ["node5", "node6"]
    assert job.state is JobState.RUNNING and job.restart_count == 0
    assert job.nodes == ["node1", "node6", "node3"]  # the same position, the next spare
    node5 = ctl.nodes["node5"]
    assert node5.drain and "GPU 0: no device file" in node5.reason
    assert node5.allocs == {}  # what the job held there moved to node6
    kinds = [e.failure.kind for e in ctl.ledger.history("node5")]
    assert "preflight" in kinds
    assert [e["cause"] for e in job.replacements] == [NOT_RESPONDING, PREFLIGHT]
    # the job's other nodes were told the allocation with node6 only, never with node5
    told = [to for url, to in client.sent if url == "/v1/allocation"]
    assert "node5" not in told and "node6" not in told


def test_a_failed_gate_does_not_use_another_of_the_jobs_spares(ctl: Controller) -> None:
    job = _running(ctl, spare_nodes=1, preflight=True)
    _swap(ctl, job, _Client({"node5": "disk: 3 MB free"}))
    assert job.nodes == ["node1", "node6", "node3"] and job.state is JobState.RUNNING


def test_no_replacement_passing_the_gate_requeues_the_job(ctl: Controller) -> None:
    job = _running(ctl, spare_nodes=1, preflight=True)
    client = _Client({"node4": "clock: 90 s behind", "node5": "GPU 1: no device file", "node6": "disk: 2 MB free"})
    _swap(ctl, job, client)
    assert sorted(str(n) for n in client.checked()) == ["node4", "node5", "node6"]  # each tried once
    assert job.state is JobState.PENDING and job.restart_count == 1  # requeued, as after any lost node
    assert all(ctl.nodes[n].drain for n in ("node4", "node5", "node6"))


def test_a_job_without_the_gate_is_not_checked(ctl: Controller) -> None:
    job = _running(ctl, spare_nodes=1)
    client = _Client({"node5": "would fail"})
    _swap(ctl, job, client)
    assert client.checked() == []
    assert job.nodes == ["node1", "node5", "node3"] and not ctl.nodes["node5"].drain


def test_a_partitions_preflight_gates_a_replacement(tmp_path: pathlib.Path) -> None:
    conf = CONF.replace("SpareNodes=node[5-6]", "SpareNodes=node[5-6] Preflight=YES")
    c = Controller(parse_config(conf, "t.conf"), Store(str(tmp_path / "p.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    job = _running(c, spare_nodes=1)
    client = _Client({"node5": "PreflightProgram: exit 1"})
    _swap(c, job, client)
    assert client.checked() == ["node5", "node6"] and job.nodes == ["node1", "node6", "node3"]


def _starting(ctl: Controller, **spec: Any) -> tuple[Job, Launch]:
    """A job placed on node1-3 whose launch (and gate) is still to come."""
    job = ctl.queue.submit(JobSpec(min_nodes=3, script="#!/bin/sh\ntrue\n", workdir="/w", **spec), ALICE)

    class S:
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job.job_id, "gpu", False
            self.alloc = [NodeAlloc(n, 4, 1000, [0, 1]) for n in ("node1", "node2", "node3")]

    (launch,) = [a for a in ctl.launches.apply_starts([S()], ctl.clock.now()) if isinstance(a, Launch)]
    return job, launch


class _Launching(_Client):
    """Also keeps the allocation each launch carried."""

    def __init__(self, failing: dict[str, str]) -> None:
        super().__init__(failing)
        self.launched: list[list[str]] = []

    async def post(self, url: str, body: dict[str, Any], to: str | None = None, timeout: float | None = None) -> Any:
        if url == "/v1/launch":
            self.launched.append([a["node"] for a in body["job"]["alloc"]])
        return await super().post(url, body, to, timeout)


def test_spares_replace_a_node_that_fails_the_gate_before_the_start(ctl: Controller) -> None:
    job, launch = _starting(ctl, spare_nodes=2, preflight=True)
    client = _Launching({"node2": "GPU 0: no device file", "node5": "disk: 1 MB free"})
    asyncio.run(dispatch.Dispatcher(ctl, client).gated_launch(launch))  # type: ignore[arg-type]
    # node2 failed: node5 swapped in, failed too: node6 swapped in, passed; then the launch
    assert client.checked() == ["node2", "node3", "node5", "node6"]
    assert client.launched == [["node1", "node6", "node3"]]
    assert job.state is JobState.RUNNING and job.restart_count == 0 and job.nodes == ["node1", "node6", "node3"]
    assert ctl.nodes["node2"].drain and ctl.nodes["node5"].drain and not ctl.nodes["node6"].drain
    assert [e.failure.kind for e in ctl.ledger.history("node2")].count("preflight") == 1
    # the start's swap used one of the job's two; node5's failed swap was repaired free
    assert [bool(e.get("again")) for e in job.replacements] == [False, True]


def test_without_a_spare_left_a_failed_gate_requeues_the_job(ctl: Controller) -> None:
    job, launch = _starting(ctl, spare_nodes=1, preflight=True)
    client = _Launching({"node2": "GPU 0: no device file", "node3": "clock: 60 s behind"})
    asyncio.run(dispatch.Dispatcher(ctl, client).gated_launch(launch))  # type: ignore[arg-type]
    assert client.launched == []
    assert job.state is JobState.PENDING and job.restart_count == 1  # requeued, as without spares
    assert ctl.nodes["node2"].drain and ctl.nodes["node3"].drain


class _AllReduce(_Launching):
    """``/v1/preflight`` with the all-reduce: the nodes named fail by themselves, the others
    (when any failed) fail waiting on their peers."""

    def __init__(self, failing: dict[str, str]) -> None:
        super().__init__(failing)
        self.allreduce: list[bool] = []

    async def post(self, url: str, body: dict[str, Any], to: str | None = None, timeout: float | None = None) -> Any:
        if url == "/v1/preflight":
            self.allreduce.append(bool(body.get("allreduce")))
            self.sent.append((url, to))
            if to in self.failing:
                return {"ok": False, "reason": f"preflight failed: all-reduce: {self.failing[to]}", "peer": False}
            if self.failing:
                return {"ok": False, "reason": "preflight failed: all-reduce: DistStoreError: timed out", "peer": True}
            return {"ok": True}
        return await super().post(url, body, to, timeout)


def _allreduce_ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(
        parse_config(CONF.replace("ClusterName=t", "ClusterName=t\nPreflightAllReduce=YES"), "t.conf"),
        Store(str(tmp_path / "a.db")),
        ManualClock(1000.0),
    )
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def test_the_all_reduce_asks_every_node_at_once_and_blames_the_rank_that_failed(tmp_path: pathlib.Path) -> None:
    c = _allreduce_ctl(tmp_path)
    job, launch = _starting(c, preflight=True)
    client = _AllReduce({"node3": "rank 2 of 3: exit"})
    asyncio.run(dispatch.Dispatcher(c, client).gated_launch(launch))  # type: ignore[arg-type]
    assert sorted(str(n) for n in client.checked()) == ["node1", "node2", "node3"]  # the batch host too
    assert client.allreduce == [True, True, True]
    assert job.state is JobState.PENDING and job.restart_count == 1 and client.launched == []
    assert c.nodes["node3"].drain and "rank 2 of 3" in c.nodes["node3"].reason
    assert not c.nodes["node1"].drain and not c.nodes["node2"].drain  # waited on it: not blamed


def test_an_all_reduce_that_fails_with_no_rank_to_blame_requeues_undrained(tmp_path: pathlib.Path) -> None:
    c = _allreduce_ctl(tmp_path)
    job, launch = _starting(c, preflight=True)
    client = _AllReduce({"elsewhere": "x"})  # every node answers: failed waiting on its peers
    asyncio.run(dispatch.Dispatcher(c, client).gated_launch(launch))  # type: ignore[arg-type]
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert not any(n.drain for n in c.nodes.values())


def test_the_all_reduce_is_opt_in(ctl: Controller) -> None:
    job, launch = _starting(ctl, preflight=True)
    client = _AllReduce({})
    asyncio.run(dispatch.Dispatcher(ctl, client).gated_launch(launch))  # type: ignore[arg-type]
    assert client.checked() == ["node2", "node3"] and client.allreduce == [False, False]
    assert client.launched == [["node1", "node2", "node3"]]


def test_a_gated_replacement_holds_the_jobs_new_steps_until_its_gate_answers(ctl: Controller) -> None:
    job = _running(ctl, spare_nodes=1, preflight=True)
    replacements = ctl.training.replacements
    actions = replacements.job_lost_node(job, "node2", NOT_RESPONDING, "node node2 not responding", 1000.0)
    assert actions is not None and job.nodes == ["node1", "node5", "node3"]
    assert replacements.holds_steps(job.job_id)  # swapped in, not yet checked: srun waits

    class _Holding(_Client):
        async def post(
            self, url: str, body: dict[str, Any], to: str | None = None, timeout: float | None = None
        ) -> Any:
            if url == "/v1/preflight":
                assert replacements.holds_steps(job.job_id)  # still held while the gate runs
            return await super().post(url, body, to, timeout)

    d = dispatch.Dispatcher(ctl, _Holding({}))  # type: ignore[arg-type]
    for a in actions:
        asyncio.run(d.run(a))
    assert not replacements.holds_steps(job.job_id) and job.nodes == ["node1", "node5", "node3"]


def test_an_ungated_replacement_holds_no_step(ctl: Controller) -> None:
    job = _running(ctl, spare_nodes=1)
    assert ctl.training.replacements.job_lost_node(job, "node2", NOT_RESPONDING, "gone", 1000.0) is not None
    assert not ctl.training.replacements.holds_steps(job.job_id)
