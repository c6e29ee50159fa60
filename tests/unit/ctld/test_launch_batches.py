"""A pass's launches to one node go in one request (``Dispatcher.launch_many``): each
answer is handled as a launch alone would be; a request sent again (no answer) carries
only the launches still wanted; an agent that refuses the batch gets them one by one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.ctld import dispatch
from muster.ctld.actions import Launch, NewLimit
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import Store
from muster.protocol.httpd import DaemonRequestError

CONF = """
ClusterName=t
NodeName=node[1-2] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


class _Start:
    def __init__(self, job_id: int, node: str) -> None:
        self.job_id, self.partition, self.backfilled = job_id, "gpu", False
        self.alloc = [NodeAlloc(node, 2, 100, [])]


class _Client:
    """Answers ``/v1/launches`` from a script of answers (an exception is raised)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, list[int]]] = []

    def url(self, addr: str, port: int, path: str) -> str:
        return path

    async def post(self, url: str, body: dict[str, Any], to: str | None = None) -> Any:
        ids = [one["job"]["job_id"] for one in body["launches"]] if "launches" in body else [body["job"]["job_id"]]
        self.sent.append((url, ids))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            await asyncio.sleep(0.01)  # sleep: the request was on its way a while
            raise answer
        return answer


def _running(tmp_path: Any, n: int) -> tuple[Controller, list[Launch]]:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    actions: list[Launch] = []
    for _ in range(n):
        job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/w"), ALICE)
        actions += [
            a for a in ctl.launches.apply_starts([_Start(job.job_id, "node1")], 1000.0) if isinstance(a, Launch)
        ]
    return ctl, actions


def test_each_answer_of_a_batch_is_handled_as_alone(tmp_path: Any) -> None:
    ctl, actions = _running(tmp_path, 3)
    failed = {"error": "cannot chdir", "code": "launch_failed", "fault": "job", "status": 500}
    client = _Client([{"answers": [{"ok": True}, failed, {"ok": True}]}])
    asyncio.run(dispatch.Dispatcher(ctl, client).launch_many("node1", actions))  # type: ignore[arg-type]
    assert client.sent == [("/v1/launches", [1, 2, 3])]
    assert [ctl.jobs[i].state for i in (1, 2, 3)] == [JobState.RUNNING, JobState.FAILED, JobState.RUNNING]
    assert not ctl.launching


def test_sent_again_with_only_the_launches_still_wanted(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "RETRY_DELAY", 0.0)
    ctl, actions = _running(tmp_path, 3)
    client = _Client([TimeoutError(), {"answers": [{"ok": True}, {"ok": True}]}])
    d = dispatch.Dispatcher(ctl, client)  # type: ignore[arg-type]

    async def run() -> None:
        task = asyncio.create_task(d.launch_many("node1", actions))
        await asyncio.sleep(0)  # the first request is on its way
        ctl.queue.cancel(ctl.jobs[2], ALICE)  # job 2 is cancelled meanwhile
        await task

    asyncio.run(run())
    assert client.sent == [("/v1/launches", [1, 2, 3]), ("/v1/launches", [1, 3])]
    assert ctl.jobs[2].state is JobState.CANCELLED and not ctl.launching


def test_a_batch_refused_whole_goes_one_by_one(tmp_path: Any) -> None:
    ctl, actions = _running(tmp_path, 2)
    client = _Client([DaemonRequestError(404, "Not Found"), {"ok": True}, {"ok": True}])
    asyncio.run(dispatch.Dispatcher(ctl, client).launch_many("node1", actions))  # type: ignore[arg-type]
    assert client.sent == [("/v1/launches", [1, 2]), ("/v1/launch", [1]), ("/v1/launch", [2])]
    assert not ctl.launching


class _SlowLaunches:
    """A launch answered only when the test says; every request noted as it is sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.answer = asyncio.Event()

    def url(self, addr: str, port: int, path: str) -> str:
        return path

    async def post(self, url: str, body: dict[str, Any], to: str | None = None) -> Any:
        self.sent.append(url)
        if url in ("/v1/launch", "/v1/launches"):
            await self.answer.wait()
            return {"answers": [{"ok": True}] * len(body["launches"])} if "launches" in body else {"ok": True}
        return {"ok": True, "running": True}


@pytest.mark.parametrize("n", [1, 2])
def test_a_new_time_limit_waits_for_its_jobs_launch(tmp_path: Any, n: int) -> None:
    # scontrol update TimeLimit= just after the job started: sent at once, the limit could
    # reach the agent before the job and find nothing to change.
    ctl, actions = _running(tmp_path, n)
    client = _SlowLaunches()
    d = dispatch.Dispatcher(ctl, client)  # type: ignore[arg-type]

    async def scenario() -> None:
        launch = asyncio.create_task(d.launch_many("node1", actions) if n > 1 else d.run(actions[0]))
        limit = asyncio.create_task(d.run(NewLimit(node="node1", job_id=actions[-1].job.job_id, time_limit=2)))
        await asyncio.sleep(0.05)  # sleep: time for the limit to be sent, were it not held back
        assert client.sent == ["/v1/launches" if n > 1 else "/v1/launch"]  # the limit waits
        client.answer.set()
        await asyncio.gather(launch, limit)
        assert client.sent[-1] == "/v1/update"
        assert not d._launching

    asyncio.run(scenario())


STILL_RUNS = {"error": "job 1 attempt 0 still runs on node1", "code": "launch_failed", "fault": "stale", "status": 500}


@pytest.mark.parametrize("n", [1, 2])
def test_a_launch_refused_while_an_older_attempt_ends_is_sent_again(
    tmp_path: Any, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 34: a requeued job's attempt reaches the node where its older attempt is still
    # being killed; it waits there (the job stays RUNNING, its launch under way), not NODE_FAIL
    monkeypatch.setattr(dispatch, "BUSY_RETRY", 0.0)
    ctl, actions = _running(tmp_path, n)
    refused: Any = (
        {"answers": [STILL_RUNS, {"ok": True}]} if n > 1 else DaemonRequestError(500, STILL_RUNS["error"], STILL_RUNS)
    )
    client = _Client([refused, {"ok": True}])
    d = dispatch.Dispatcher(ctl, client)  # type: ignore[arg-type]

    async def scenario() -> None:
        await (d.launch_many("node1", actions) if n > 1 else d.run(actions[0]))
        assert ctl.launching.get(1) is not None  # under way: not judged vanished meanwhile
        while d._retries:
            await asyncio.gather(*d._retries)

    asyncio.run(scenario())
    assert client.sent[-1] == ("/v1/launch", [1])
    assert all(ctl.jobs[i].state is JobState.RUNNING for i in range(1, n + 1))
    assert ctl.jobs[1].launch_failures == 0 and not ctl.launching and not d._busy


def test_an_older_attempt_that_never_ends_requeues_the_job_without_blaming_the_node(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "BUSY_RETRY", 0.0)
    monkeypatch.setattr(dispatch, "BUSY_SLACK", -1e9)  # out of time at once
    ctl, actions = _running(tmp_path, 1)
    client = _Client([DaemonRequestError(500, STILL_RUNS["error"], STILL_RUNS)] * 2)
    d = dispatch.Dispatcher(ctl, client)  # type: ignore[arg-type]

    async def scenario() -> None:
        await d.run(actions[0])
        while d._retries:
            await asyncio.gather(*d._retries)

    asyncio.run(scenario())
    job = ctl.jobs[1]
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert not ctl.nodes["node1"].drain
