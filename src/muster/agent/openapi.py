"""The agent's signed HTTP API described as OpenAPI 3.1 (``protocol.openapi``), served at
``GET /openapi.json`` to the controller (signed, like every other TCP request here).

It describes the orders the controller sends (``BODIES``: the models that validate
them). srun's ``/v1/steps/*`` streams, authorized by step grants and not plain JSON
request/response pairs, and the Unix socket's ``/v1/credential`` are not in it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.protocol import openapi
from muster.protocol.messages import (
    LaunchRequest,
    LaunchRequests,
    SignalRequest,
    SuspendRequest,
    TerminateRequest,
    UpdateRequest,
)
from muster.protocol.signing import SIG_HEADER

__all__ = ["BODIES", "openapi_route"]

BODIES: dict[tuple[str, str], type[BaseModel]] = {
    ("POST", "/v1/launch"): LaunchRequest,
    ("POST", "/v1/launches"): LaunchRequests,
    ("POST", "/v1/signal"): SignalRequest,
    ("POST", "/v1/hang_evidence"): SignalRequest,
    ("POST", "/v1/step_stats"): SignalRequest,
    ("POST", "/v1/terminate"): TerminateRequest,
    ("POST", "/v1/update"): UpdateRequest,
    ("POST", "/v1/suspend"): SuspendRequest,
}
SIGNATURE = {
    "type": "apiKey",
    "in": "header",
    "name": SIG_HEADER.title(),
    "description": "HMAC-SHA256 by the controller with the cluster key, with X-Muster-Time, -Nonce, -From "
    "and -To (protocol.signing); over TLS, from the controller's certificate",
}


def openapi_route(routes: list[Route]) -> Route:
    """``GET /openapi.json``: the description of ``routes`` (and of itself)."""
    doc: dict[str, Any] = {}

    async def describe(request: Request) -> JSONResponse:
        if not doc:
            doc.update(openapi.document("musterd", [*routes, route], BODIES, {}, SIGNATURE))
        return JSONResponse(doc)

    route = Route("/openapi.json", describe, methods=["GET"])
    return route
