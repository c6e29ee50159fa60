"""The heartbeats of co-hosted nodes travel in one request and are answered one by one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from muster.agent.host import HeartbeatBatch
from muster.protocol.httpd import DaemonRequestError


class Controller:
    """Stands for the signed client: answers a batch as ``ctld.agent_api`` does."""

    def __init__(self, unknown: set[str] = frozenset(), down: bool = False) -> None:  # type: ignore[assignment]
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.unknown = unknown
        self.down = down

    async def post(self, url: str, body: dict[str, Any]) -> Any:
        self.requests.append((url, body))
        if self.down:
            raise OSError("connection refused")
        return {
            "answers": [
                {"error": "unknown node", "code": "not_found", "status": 404}
                if hb["node"] in self.unknown
                else {"ok": True, "kill": [[7, 0]] if hb["node"] == "node2" else []}
                for hb in body["heartbeats"]
            ]
        }


def beat(batch: HeartbeatBatch, *names: str) -> list[Any]:
    async def go() -> list[Any]:
        sends = [batch.send({"node": n, "running": []}) for n in names]
        return await asyncio.gather(*sends, return_exceptions=True)

    return asyncio.run(go())


def test_heartbeats_sent_together_go_in_one_request_and_each_gets_its_own_answer() -> None:
    ctl = Controller(unknown={"node3"})
    batch = HeartbeatBatch(ctl, "http://ctld:1/", window=0.01)  # type: ignore[arg-type]
    one, two, three = beat(batch, "node1", "node2", "node3")
    assert [url for url, _ in ctl.requests] == ["http://ctld:1/v1/agent/heartbeats"]
    assert [hb["node"] for hb in ctl.requests[0][1]["heartbeats"]] == ["node1", "node2", "node3"]
    assert one == {"ok": True, "kill": []} and two == {"ok": True, "kill": [[7, 0]]}
    assert isinstance(three, DaemonRequestError) and three.status == 404  # that node registers again


def test_an_unreachable_controller_fails_every_heartbeat_of_the_batch() -> None:
    batch = HeartbeatBatch(Controller(down=True), "http://ctld:1", window=0.01)  # type: ignore[arg-type]
    answers = beat(batch, "node1", "node2")
    assert all(isinstance(a, OSError) for a in answers)


@pytest.mark.parametrize("rounds", [2, 3])
def test_each_round_is_a_new_request(rounds: int) -> None:
    ctl = Controller()
    batch = HeartbeatBatch(ctl, "http://ctld:1", window=0.01)  # type: ignore[arg-type]
    for _ in range(rounds):
        beat(batch, "node1", "node2")
    assert len(ctl.requests) == rounds
