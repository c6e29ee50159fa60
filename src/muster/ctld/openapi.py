"""The controller's HTTP API described as OpenAPI 3.1 (``protocol.openapi``): which model
validates each route's body (``BODIES``) and which query parameters each GET handler
reads (``QUERIES``). ``openapi_route`` serves it at ``GET /openapi.json``, behind the
same authentication as the rest of the API.

The document is the input of the API fuzzing test (schemathesis, tests/security). A
route missing from ``BODIES`` with a body is described as taking any JSON object; a
unit test keeps the tables complete.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.errors import AuthError
from muster.ctld.acct_api import SacctmgrBody
from muster.ctld.api import error_response, prove_caller
from muster.ctld.bodies import (
    HoldBody,
    NodeUpdateBody,
    RequeueBody,
    ReservationBody,
    SignalBody,
    SubmitBody,
    UpdateBody,
)
from muster.ctld.context import Context
from muster.ctld.partition_api import PartitionBody
from muster.ctld.stepapi import AwaitBody, CompleteBody, DoneBody, GoneBody, NoAllocBody, StepBody, StepSignalBody
from muster.ctld.token_api import TokenBody
from muster.ctld.triggers import TriggerQueryBody, TriggerSetBody
from muster.protocol import openapi
from muster.protocol.messages import Heartbeat, Heartbeats, JobDone, JobsDone, Register
from muster.protocol.signing import CRED_HEADER

__all__ = ["BODIES", "QUERIES", "document", "openapi_route"]

log = logging.getLogger("musterctld.api")

BODIES: dict[tuple[str, str], type[BaseModel]] = {
    ("POST", "/v1/jobs"): SubmitBody,
    ("POST", "/v1/jobs/signal"): SignalBody,
    ("POST", "/v1/jobs/{job_id}/hold"): HoldBody,
    ("POST", "/v1/jobs/{job_id}/update"): UpdateBody,
    ("POST", "/v1/jobs/{job_id}/requeue"): RequeueBody,
    ("POST", "/v1/nodes/update"): NodeUpdateBody,
    ("POST", "/v1/reservations"): ReservationBody,
    ("POST", "/v1/partitions"): PartitionBody,
    ("POST", "/v1/triggers"): TriggerSetBody,
    ("POST", "/v1/triggers/get"): TriggerQueryBody,
    ("POST", "/v1/triggers/clear"): TriggerQueryBody,
    ("POST", "/v1/reservations/{name}/update"): ReservationBody,
    ("POST", "/v1/accounting/sacctmgr"): SacctmgrBody,
    ("POST", "/v1/jobs/{job_id}/steps"): StepBody,
    ("POST", "/v1/jobs/{job_id}/steps/{step_id}/done"): DoneBody,
    ("POST", "/v1/jobs/{job_id}/steps/{step_id}/signal"): StepSignalBody,
    ("POST", "/v1/jobs/{job_id}/await"): AwaitBody,
    ("POST", "/v1/jobs/{job_id}/complete"): CompleteBody,
    ("POST", "/v1/steps/no_allocate"): NoAllocBody,
    ("POST", "/v1/agent/register"): Register,
    ("POST", "/v1/agent/heartbeat"): Heartbeat,
    ("POST", "/v1/agent/heartbeats"): Heartbeats,
    ("POST", "/v1/agent/job_done"): JobDone,
    ("POST", "/v1/agent/jobs_done"): JobsDone,
    ("POST", "/v1/agent/step_gone"): GoneBody,
    ("POST", "/v1/token"): TokenBody,
}

# Query parameters each GET handler reads (all text; lists are comma-separated).
_ACCT = ["job_id", "user", "account", "partition", "state", "qos", "name", "nodelist", "start", "end", "duplicates"]
QUERIES: dict[str, list[str]] = {
    "/v1/jobs": ["job_id", "user", "name", "partition", "state", "view", "fields"],
    "/v1/nodes": ["name", "fields", "partitions"],
    "/v1/steps": ["job_id", "user"],
    "/v1/jobs/{job_id}/stats": ["node"],
    "/v1/accounting/jobs": _ACCT,
    "/v1/accounting/usage": ["start", "end"],
    "/dash/login": ["token"],
    "/dash/api/state": ["since"],
}

CREDENTIAL = {"type": "apiKey", "in": "header", "name": CRED_HEADER.title()}
NOTES = {"/v1/agent/": "From node agents only: signed with the cluster key (X-Muster-* headers)."}


def document(routes: list[Any]) -> dict[str, Any]:
    """The OpenAPI 3.1 description of the controller's ``routes``."""
    return openapi.document("musterctld", routes, BODIES, QUERIES, CREDENTIAL, NOTES)


def openapi_route(ctx: Context, routes: list[Any]) -> Route:
    """``GET /openapi.json``, for callers proven as every other route's are."""
    doc: dict[str, Any] = {}

    async def openapi(request: Request) -> JSONResponse:
        try:
            prove_caller(ctx, request)
        except AuthError as e:
            client = request.client.host if request.client else "?"
            log.warning("refused %s %s from %s: %s", request.method, request.url.path, client, e)
            return error_response(e)
        if not doc:
            doc.update(document(routes))
        return JSONResponse(doc)

    return Route("/openapi.json", openapi, methods=["GET"])
