"""Agents' reports of ended runs that arrive together are committed in one transaction
(``ctld.commits``), acknowledged only after it; a group that fails is undone whole and its
reports applied one by one."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import StorageError
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.ctld.commits import GroupCommit
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import Store

CONF = """
ClusterName=t
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


class _Start:
    def __init__(self, job_id: int, node: str) -> None:
        self.job_id, self.partition, self.backfilled = job_id, "gpu", False
        self.alloc = [NodeAlloc(node, 2, 100, [])]


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "muster.db")


def _running(db: str, n: int) -> Controller:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(db), ManualClock(1000.0))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    for k in range(n):
        job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/w"), ALICE)
        ctl.launches.apply_starts([_Start(job.job_id, f"node{k % 4 + 1}")], 1000.0)
        ctl.launches.launch_done(job.job_id)
    return ctl


def _report(job_id: int, node: str, exit_code: int = 0) -> dict:
    return {"job_id": job_id, "node": node, "restart_count": 0, "exit_code": exit_code}


async def _all(group: GroupCommit, bodies: list[dict]) -> list:
    return await asyncio.gather(*(group.submit(b) for b in bodies), return_exceptions=True)


def _stored_states(db: str) -> dict[int, JobState]:
    return {j.job_id: j.state for j in Store(db).load_jobs()}


def test_reports_that_arrive_together_are_one_commit_and_durable(db: str) -> None:
    ctl = _running(db, 6)
    group = GroupCommit(ctl, ctl.launches.job_done)
    bodies = [_report(i, f"node{(i - 1) % 4 + 1}", exit_code=i % 2) for i in range(1, 7)]
    answers = asyncio.run(_all(group, bodies))
    assert answers == [[]] * 6 and group.commits == 1
    assert {j.job_id: j.state for j in ctl.jobs.values()} == _stored_states(db)
    assert _stored_states(db) == {i: JobState.FAILED if i % 2 else JobState.COMPLETED for i in range(1, 7)}
    assert all(not node.allocs for node in ctl.nodes.values())


def test_a_report_alone_is_committed_alone(db: str) -> None:
    ctl = _running(db, 1)
    group = GroupCommit(ctl, ctl.launches.job_done)
    assert asyncio.run(_all(group, [_report(1, "node1")])) == [[]]
    assert _stored_states(db) == {1: JobState.COMPLETED} and group.commits == 0


def test_a_bad_report_fails_alone_and_the_others_are_applied(db: str) -> None:
    ctl = _running(db, 3)
    group = GroupCommit(ctl, ctl.launches.job_done)
    bodies = [_report(1, "node1"), {"job_id": "nonsense"}, _report(3, "node3")]
    answers = asyncio.run(_all(group, bodies))
    assert answers[0] == [] and answers[2] == [] and isinstance(answers[1], Exception)
    assert group.commits == 0  # undone whole, then one by one
    assert _stored_states(db) == {1: JobState.COMPLETED, 2: JobState.RUNNING, 3: JobState.COMPLETED}
    assert {j.job_id: j.state for j in ctl.jobs.values()} == _stored_states(db)


def test_a_group_whose_commit_fails_is_undone_in_memory_too(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ctl = _running(db, 3)
    group = GroupCommit(ctl, ctl.launches.job_done)
    real = ctl.store.db.execute

    def full_disk(sql: str, *args: object) -> object:
        if sql == "COMMIT":
            real("ROLLBACK")
            raise StorageError("No space left on device")
        return real(sql, *args)

    monkeypatch.setattr(ctl.store, "db", type("Db", (), {"execute": staticmethod(full_disk)})())
    answers = asyncio.run(_all(group, [_report(i, f"node{i}") for i in (1, 2, 3)]))
    assert all(isinstance(a, StorageError) for a in answers)
    monkeypatch.undo()
    assert {j.job_id: j.state for j in ctl.jobs.values()} == {i: JobState.RUNNING for i in (1, 2, 3)}
    assert _stored_states(db) == {i: JobState.RUNNING for i in (1, 2, 3)}
    assert all(ctl.nodes[f"node{i}"].allocs for i in (1, 2, 3))  # still held, as the store says


def test_an_agents_batch_of_reports_is_one_commit_each_answered(db: str) -> None:
    """``/v1/agent/jobs_done``: one agent's pending reports, in one request, one commit;
    a report that fails is answered with its error, the others are committed."""
    ctl = _running(db, 4)
    group = GroupCommit(ctl, ctl.launches.job_done)
    bodies = [_report(i, f"node{i}") for i in range(1, 4)]
    assert asyncio.run(group.submit_many(bodies)) == [[], [], []] and group.commits == 1
    assert _stored_states(db) == {
        1: JobState.COMPLETED,
        2: JobState.COMPLETED,
        3: JobState.COMPLETED,
        4: JobState.RUNNING,
    }
    # a misfit among them fails alone, after the group is undone and replayed one by one
    answers = asyncio.run(group.submit_many([_report(4, "node4"), {"job_id": "x"}]))
    assert answers[0] == [] and isinstance(answers[1], Exception)
    assert _stored_states(db)[4] is JobState.COMPLETED
