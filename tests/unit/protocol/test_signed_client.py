"""A daemon's signed client keeps at most ``IN_FLIGHT`` requests in flight: a burst of a
thousand launches waits at its gate, not in httpx's pool (whose queue costs O(n) a request)."""

from __future__ import annotations

import asyncio

import httpx

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
        await asyncio.sleep(0.001)
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
