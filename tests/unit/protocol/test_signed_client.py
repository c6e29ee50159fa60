"""A daemon's signed client keeps at most ``IN_FLIGHT`` requests in flight: a burst of a
thousand launches waits at its gate, not in httpx's pool (whose queue costs O(n) a request)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from muster.core.clock import ManualClock
from muster.protocol import httpd
from muster.protocol.httpd import SignedClient


def test_a_burst_of_requests_is_sent_at_most_in_flight_at_once_and_all_are_answered() -> None:
    in_flight = 0
    most = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.001)  # sleep: each request stays in flight a moment, so the burst overlaps
        in_flight -= 1
        return httpx.Response(200, json={"ok": True, "path": request.url.path})

    async def burst() -> list[object]:
        client = SignedClient(b"k" * 32, ManualClock(1000.0), sender="ctld", receiver="node1")
        await client._client.aclose()
        client._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        try:
            return await asyncio.gather(
                *(client.post(f"http://node{i % 8}/v1/launch", {"i": i}) for i in range(3 * httpd.IN_FLIGHT))
            )
        finally:
            await client.aclose()

    answers = asyncio.run(burst())
    assert len(answers) == 3 * httpd.IN_FLIGHT and all(a == {"ok": True, "path": "/v1/launch"} for a in answers)
    assert most == httpd.IN_FLIGHT  # the gate was full, never over


def test_a_controller_that_timed_out_is_tried_last_until_a_controller_asks_for_us() -> None:
    tried: list[str] = []
    standby = {"head2"}

    async def handler(request: httpx.Request) -> httpx.Response:
        tried.append(request.url.host)
        if request.url.host == "head1":
            raise httpx.ReadTimeout("hung", request=request)  # accepted, never answered
        if request.url.host in standby:
            return httpx.Response(503, json={"error": "Slurm backup controller in standby mode", "code": "standby"})
        return httpx.Response(200, json={"ok": True})

    async def run() -> None:
        clock = ManualClock(1000.0)
        client = SignedClient(b"k" * 32, clock, sender="node1")
        await client._client.aclose()
        client._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        client.use_controllers(["http://head1", "http://head2"])
        try:
            for _ in range(2):  # head1 hung, head2 still in standby
                with pytest.raises((httpd.DaemonRequestError, httpx.ReadTimeout)):
                    await client.post("http://head1/v1/agent/heartbeat", {})
            assert tried == ["head1", "head2", "head2", "head1"]  # the hung one is tried last
            standby.clear()  # head2 took over and asks for us
            client.prefer_controller(1)
            tried.clear()
            assert await client.post("http://head1/v1/agent/heartbeat", {}) == {"ok": True}
            assert tried == ["head2"]
            clock.advance(httpd.HUNG_MEMORY + 1)  # forgotten after a while
            assert client._order() == [1, 0]
        finally:
            await client.aclose()

    asyncio.run(run())
