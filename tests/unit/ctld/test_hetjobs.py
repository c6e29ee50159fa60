"""Heterogeneous jobs in the controller: one submission, all of it or nothing; the leader
decides for the whole job; references ``N`` and ``N+k``; the wire and the agent's view."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.arrays import parse_job_ref
from muster.core.errors import InvalidRequest, Unsatisfiable
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.ctld.actions import Launch, Terminate
from muster.ctld.hetindex import with_id_sets
from muster.ctld.hetjobs import launch_view
from muster.ctld.wire import job_wire

from .test_controller import ALICE, make, register_all


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "muster.db")


def spec(**kw: object) -> JobSpec:
    fields: dict[str, object] = {"name": "h", "script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", **kw}
    return JobSpec(**fields)  # type: ignore[arg-type]


def start_all(ctl, jobs, nodes: list[list[str]]) -> list:  # noqa: ANN001
    class S:
        def __init__(self, job_id: int, names: list[str]) -> None:
            self.job_id, self.partition, self.backfilled = job_id, "gpu", False
            self.alloc = [NodeAlloc(n, 1, 0, []) for n in names]

    return ctl.launches.apply_starts([S(j.job_id, n) for j, n in zip(jobs, nodes, strict=True)], ctl.clock.now())


def test_components_take_consecutive_ids_and_only_the_leader_runs_a_script(db: str) -> None:
    ctl = make(db)
    jobs = ctl.hets.submit([spec(min_nodes=1), spec(min_nodes=2, script=None)], ALICE)
    leader = jobs[0].job_id
    assert [(j.job_id, j.het_job_id, j.het_job_offset) for j in jobs] == [(leader, leader, 0), (leader + 1, leader, 1)]
    assert not jobs[0].spec.interactive and jobs[1].spec.interactive
    assert ctl.next_job_id == leader + 2
    # durable, and the references name them: N all, N+k one
    again = make(db)
    again.hets.load()
    assert again.hets.live == {leader}
    assert [j.job_id for j in again.queue.resolve(parse_job_ref(str(leader)))] == [leader, leader + 1]
    assert [j.job_id for j in again.queue.resolve(parse_job_ref(f"{leader}+1"))] == [leader + 1]
    assert again.queue.resolve(parse_job_ref(f"{leader}+2")) == []
    assert again.queue.job_ids([parse_job_ref(str(leader))]) == [leader, leader + 1]


def test_one_impossible_component_refuses_the_whole_submission(db: str) -> None:
    ctl = make(db)
    with pytest.raises(Unsatisfiable):
        ctl.hets.submit([spec(min_nodes=1), spec(min_nodes=9)], ALICE)
    with pytest.raises(InvalidRequest, match="Job arrays of heterogeneous jobs are not supported"):
        ctl.hets.submit([spec(array="1-2"), spec()], ALICE)
    assert not ctl.jobs and ctl.next_job_id == 1


def test_components_end_with_their_leader_and_free_what_they_hold(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    jobs = ctl.hets.submit([spec(), spec(min_nodes=2)], ALICE)
    actions = start_all(ctl, jobs, [["node1"], ["node2", "node3"]])
    assert [type(a) for a in actions] == [Launch]  # the leader's script only
    assert ctl.hets.sweep() == []  # all running: nothing to do
    ctl.launches.launch_done(jobs[0].job_id)
    ctl.launches.job_done({"job_id": jobs[0].job_id, "node": "node1", "restart_count": 0, "exit_code": 3, "signal": 0})
    actions = ctl.hets.sweep()
    assert jobs[1].state is JobState.FAILED and jobs[1].exit_code == 3
    assert [(type(a), a.nodes) for a in actions] == [(Terminate, ["node2", "node3"])]
    assert not any(key[0] == jobs[1].job_id for n in ctl.nodes.values() for key in n.allocs)
    assert ctl.hets.sweep() == [] and ctl.hets.live == set()


def test_a_cancelled_leader_cancels_the_rest(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    jobs = ctl.hets.submit([spec(), spec()], ALICE)
    start_all(ctl, jobs, [["node1"], ["node2"]])
    ctl.queue.cancel(jobs[0], ALICE)
    ctl.hets.sweep()
    assert jobs[1].state is JobState.CANCELLED and jobs[1].cancelled_by == ALICE.uid


def test_the_leader_tells_its_agent_every_components_layout_and_commands_see_the_id_set(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    jobs = ctl.hets.submit([spec(), spec(min_nodes=2)], ALICE)
    start_all(ctl, jobs, [["node1"], ["node2", "node3"]])
    view = launch_view(jobs[0], ctl.jobs)
    assert [c["job_id"] for c in view["het_components"]] == [j.job_id for j in jobs]
    assert [a["node"] for a in view["het_components"][1]["alloc"]] == ["node2", "node3"]
    wired = with_id_sets([job_wire(j, 0.0) for j in jobs], ctl.jobs)
    assert {w["het_job_id_set"] for w in wired} == {f"{jobs[0].job_id}-{jobs[1].job_id}"}
    assert "het_components" not in launch_view(ctl.queue.submit(spec(), ALICE), ctl.jobs)


def test_a_component_that_loses_its_node_requeues_the_whole_job(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    jobs = ctl.hets.submit([spec(), spec(min_nodes=2)], ALICE)
    start_all(ctl, jobs, [["node1"], ["node2", "node3"]])
    ctl.launches.launch_done(jobs[0].job_id)
    ctl.node_failed_job(jobs[1], ctl.clock.now(), "node3 down")  # requeued (JobRequeue=1)
    assert jobs[1].state is JobState.PENDING
    actions = ctl.hets.sweep()
    assert jobs[0].state is JobState.PENDING and jobs[0].restart_count == 1
    assert [(type(a), a.job_id, a.nodes, a.reason) for a in actions] == [
        (Terminate, jobs[0].job_id, ["node1"], "requeue")
    ]
    assert ctl.hets.sweep() == []  # all pending again: the pass places them together


def test_a_component_that_ends_node_fail_ends_the_whole_job(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    jobs = ctl.hets.submit([spec(), spec(requeue=False)], ALICE)
    start_all(ctl, jobs, [["node1"], ["node2"]])
    ctl.node_failed_job(jobs[1], ctl.clock.now(), "node2 down")
    assert jobs[1].state is JobState.NODE_FAIL
    actions = ctl.hets.sweep()
    assert jobs[0].state is JobState.NODE_FAIL and jobs[0].completing
    assert [(type(a), a.nodes) for a in actions] == [(Terminate, ["node1"])]
