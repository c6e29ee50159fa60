"""``ctld.unlaunched``: a start a previous controller committed and whose launch its batch
host never got is launched again at once by the next controller, and only then: not when
the agent runs it or has its report on the way, not when the agent restarted since (no
witness), not for a start of this controller's own."""

from __future__ import annotations

from typing import Any

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.ctld.actions import Launch
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import Store
from muster.ctld.unlaunched import relaunch_unlaunched

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


def _controller(tmp_path: Any, now: float, agent_start: float) -> Controller:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(now))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": [], "agent_start_time": agent_start})
    return ctl


def _started_then_crashed(tmp_path: Any) -> int:
    """A controller that committed job 1's start on node1 at t=1000 and died."""
    ctl = _controller(tmp_path, 1000.0, agent_start=900.0)
    job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/w"), ALICE)
    assert ctl.launches.apply_starts([_Start(job.job_id, "node1")], 1000.0)
    return job.job_id


def test_an_attempt_its_agent_neither_runs_nor_reports_is_launched_again_once(tmp_path: Any) -> None:
    job_id = _started_then_crashed(tmp_path)
    ctl = _controller(tmp_path, 1010.0, agent_start=900.0)  # the next controller
    actions = relaunch_unlaunched(ctl, "node1", [], [])
    assert [(type(a), a.job.job_id) for a in actions if isinstance(a, Launch)] == [(Launch, job_id)]
    job = ctl.jobs[job_id]
    assert (job.state, job.restart_count, job.nodes) == (JobState.RUNNING, 0, ["node1"])
    assert job_id in ctl.launching  # under way: not judged vanished meanwhile
    assert relaunch_unlaunched(ctl, "node1", [], []) == []  # sent once
    assert relaunch_unlaunched(ctl, "node2", [], []) == []  # not its batch host


@pytest.mark.parametrize(
    ("running", "ended"),
    [([(1, 0)], []), ([], [(1, 0)])],
    ids=["the agent runs it", "its report is on the way"],
)
def test_an_attempt_the_agent_got_is_not_launched_again(tmp_path: Any, running: Any, ended: Any) -> None:
    _started_then_crashed(tmp_path)
    ctl = _controller(tmp_path, 1010.0, agent_start=900.0)
    assert relaunch_unlaunched(ctl, "node1", running, ended) == []
    assert not ctl.launching


def test_an_agent_restarted_since_the_start_is_no_witness(tmp_path: Any) -> None:
    _started_then_crashed(tmp_path)
    ctl = _controller(tmp_path, 1010.0, agent_start=1005.0)  # it may have lost the run
    assert relaunch_unlaunched(ctl, "node1", [], []) == []


def test_a_start_of_this_controller_is_left_to_its_own_launch(tmp_path: Any) -> None:
    ctl = _controller(tmp_path, 1000.0, agent_start=900.0)
    job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/w"), ALICE)
    ctl.launches.apply_starts([_Start(job.job_id, "node1")], 1001.0)
    ctl.launches.launch_done(job.job_id)  # answered: then it vanished, judged as before
    assert relaunch_unlaunched(ctl, "node1", [], []) == []
