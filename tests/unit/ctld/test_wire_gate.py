"""The controller's side of the versioned wire: what it sends a node depends on the protocol
its agent registered with (new fields only to agents that know them), ``MinAgentProtocol``
keeps new work off nodes whose agent is older, and a launch the agent answers with an
error status is a failed launch (requeued, the node judged), never a success."""

from __future__ import annotations

import asyncio
from typing import Any

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState
from muster.ctld import dispatch
from muster.ctld.actions import Launch, SignalJob
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
    """Answers each request with the next of ``answers`` (an exception is raised); keeps
    what was sent."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.bodies: list[tuple[str, dict[str, Any]]] = []

    def url(self, addr: str, port: int, path: str) -> str:
        return path

    async def post(self, url: str, body: dict[str, Any], to: str | None = None) -> Any:
        self.bodies.append((url, body))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _controller(tmp_path: Any, conf: str = CONF) -> Controller:
    ctl = Controller(parse_config(conf, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    return ctl


def _started(ctl: Controller, node: str = "node1", **spec: Any) -> Launch:
    job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/w", **spec), ALICE)
    (launch,) = [a for a in ctl.launches.apply_starts([_Start(job.job_id, node)], 1000.0) if isinstance(a, Launch)]
    return launch


def _launch(ctl: Controller, client: _Client, action: Launch) -> None:
    asyncio.run(dispatch.Dispatcher(ctl, client).run(action))  # type: ignore[arg-type]


def test_a_launch_refused_with_a_4xx_is_requeued_and_its_node_drained(tmp_path: Any) -> None:
    ctl = _controller(tmp_path)
    ctl.agents.register({"node": "node1", "gpus": 8}, protocol=3)
    action = _started(ctl)
    refusal = DaemonRequestError(400, "invalid LaunchRequest: job.spec: Input should be a valid dictionary")
    _launch(ctl, _Client([refusal]), action)
    job = ctl.jobs[action.job.job_id]
    assert job.state is JobState.PENDING and job.launch_failures == 1
    assert "HTTP 400: invalid LaunchRequest" in (job.system_comment or "")
    node = ctl.nodes["node1"]
    assert node.drain and node.reason.startswith("launch failed: HTTP 400: invalid LaunchRequest")
    assert not ctl.launching


def test_a_launch_answered_5xx_is_requeued_without_draining(tmp_path: Any) -> None:
    ctl = _controller(tmp_path)
    ctl.agents.register({"node": "node1", "gpus": 8}, protocol=3)
    action = _started(ctl)
    _launch(ctl, _Client([DaemonRequestError(503, "memory budget exhausted")]), action)
    assert ctl.jobs[action.job.job_id].state is JobState.PENDING
    assert not ctl.nodes["node1"].drain


def test_a_launch_of_a_batch_answered_with_an_error_status_is_a_failure(tmp_path: Any) -> None:
    ctl = _controller(tmp_path)
    ctl.agents.register({"node": "node1", "gpus": 8}, protocol=3)
    actions = [_started(ctl), _started(ctl)]
    client = _Client([{"answers": [{"ok": True}, {"error": "invalid job", "code": "invalid", "status": 400}]}])
    asyncio.run(dispatch.Dispatcher(ctl, client).launch_many("node1", actions))  # type: ignore[arg-type]
    first, second = (ctl.jobs[a.job.job_id] for a in actions)
    assert first.state is JobState.RUNNING and second.state is JobState.PENDING
    assert ctl.nodes["node1"].drain


def test_new_fields_reach_only_agents_that_know_them(tmp_path: Any) -> None:
    ctl = _controller(tmp_path)
    ctl.agents.register({"node": "node1", "gpus": 8}, protocol=2)  # muster 0.2.0
    ctl.agents.register({"node": "node2", "gpus": 8}, protocol=3)
    old = _started(ctl, "node1", mail_type=["END"], mail_user="alice@example.org")
    new = _started(ctl, "node2", mail_type=["END"], mail_user="alice@example.org")
    client = _Client([{"ok": True}, {"ok": True}])
    _launch(ctl, client, old)
    _launch(ctl, client, new)
    (_, to_old), (_, to_new) = client.bodies
    assert "mail_type" not in to_old["job"]["spec"] and "mail_user" not in to_old["job"]["spec"]
    assert to_new["job"]["spec"]["mail_type"] == ["END"]
    assert to_new["job"]["spec"]["mail_user"] == "alice@example.org"
    assert to_old["job"]["spec"]["stdin"] is None  # a job's None values travel, as 0.2.0 sent them


def test_registration_answers_the_controllers_protocol(tmp_path: Any) -> None:
    ctl = _controller(tmp_path)
    answer = ctl.agents.register({"node": "node1", "gpus": 8, "version": "0.1.0"}, protocol=2)
    assert answer["protocol"] == 3 and answer["ok"] is True
    assert ctl.agents.protocol("node1") == 2 and ctl.agents.protocol("node2") == 2  # unknown: the oldest


def test_min_agent_protocol_drains_older_agents_until_they_upgrade(tmp_path: Any) -> None:
    ctl = _controller(tmp_path, CONF + "MinAgentProtocol=3\n")
    ctl.agents.register({"node": "node1", "gpus": 8, "version": "0.1.0"}, protocol=2)
    node = ctl.nodes["node1"]
    assert node.drain and node.reason == "Agent too old: protocol 2 (muster 0.1.0) < MinAgentProtocol=3"
    ctl.agents.register({"node": "node1", "gpus": 8, "version": "0.3.0"}, protocol=3)
    assert not node.drain and node.reason == ""
    # a node drained for another reason keeps it
    ctl.agents.register({"node": "node2", "gpus": 8}, protocol=3)
    ctl.nodes["node2"].drain, ctl.nodes["node2"].reason = True, "maintenance"
    ctl.agents.register({"node": "node2", "gpus": 8}, protocol=2)
    assert ctl.nodes["node2"].reason == "maintenance"
    ctl.agents.register({"node": "node2", "gpus": 8}, protocol=3)
    assert ctl.nodes["node2"].drain and ctl.nodes["node2"].reason == "maintenance"


def test_a_reconfigured_min_agent_protocol_is_applied_at_the_next_heartbeat(tmp_path: Any) -> None:
    ctl = _controller(tmp_path)
    ctl.agents.register({"node": "node1", "gpus": 8, "version": "0.1.0"}, protocol=2)
    ctl.config.settings["MinAgentProtocol"] = "3"  # as scontrol reconfigure would bring it
    ctl.agents.heartbeat({"node": "node1"})
    assert ctl.nodes["node1"].drain and ctl.nodes["node1"].reason.startswith("Agent too old: protocol 2")
    del ctl.config.settings["MinAgentProtocol"]
    ctl.agents.heartbeat({"node": "node1"})
    assert not ctl.nodes["node1"].drain and ctl.nodes["node1"].reason == ""


def test_a_route_new_in_protocol_3_is_not_called_on_older_agents(tmp_path: Any) -> None:
    ctl = _controller(tmp_path)
    ctl.agents.register({"node": "node1", "gpus": 8}, protocol=2)
    ctl.agents.register({"node": "node2", "gpus": 8}, protocol=3)
    client = _Client([{"ok": True}])
    action = SignalJob(job_id=7, nodes=["node1", "node2"], signal=10, batch_only=False, evidence=True)
    asyncio.run(dispatch.Dispatcher(ctl, client).run(action))  # type: ignore[arg-type]
    assert [url for url, _body in client.bodies] == ["/v1/hang_evidence"]  # node2's only
