"""The controller's HTTP API described as OpenAPI 3.1, from the routes and the pydantic
models that validate their bodies (one schema: what is documented is what is checked).

Starlette makes no OpenAPI document by itself. ``document(routes)`` walks the app's
routes and describes each method and path: its path parameters, the query parameters
its handler reads (``QUERIES``), its JSON body (``BODIES``: the very model the handler
validates with) and the error shape every route answers with. ``openapi_route`` serves
it at ``GET /openapi.json``, behind the same authentication as the rest of the API.

The document is the input of the API fuzzing test (schemathesis, tests/security). A
route missing from ``BODIES`` with a body is described as taking any JSON object; a
unit test keeps the tables complete.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster import __version__
from muster.core.errors import AuthError
from muster.ctld.acct_api import SacctmgrBody
from muster.ctld.api import (
    HoldBody,
    NodeUpdateBody,
    RequeueBody,
    ReservationBody,
    SignalBody,
    SubmitBody,
    UpdateBody,
    error_response,
    prove_caller,
)
from muster.ctld.context import Context
from muster.ctld.stepapi import AwaitBody, CompleteBody, DoneBody, GoneBody, StepBody, StepSignalBody
from muster.protocol.messages import Heartbeat, JobDone, Register
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
    ("POST", "/v1/reservations/{name}/update"): ReservationBody,
    ("POST", "/v1/accounting/sacctmgr"): SacctmgrBody,
    ("POST", "/v1/jobs/{job_id}/steps"): StepBody,
    ("POST", "/v1/jobs/{job_id}/steps/{step_id}/done"): DoneBody,
    ("POST", "/v1/jobs/{job_id}/steps/{step_id}/signal"): StepSignalBody,
    ("POST", "/v1/jobs/{job_id}/await"): AwaitBody,
    ("POST", "/v1/jobs/{job_id}/complete"): CompleteBody,
    ("POST", "/v1/agent/register"): Register,
    ("POST", "/v1/agent/heartbeat"): Heartbeat,
    ("POST", "/v1/agent/job_done"): JobDone,
    ("POST", "/v1/agent/step_gone"): GoneBody,
}

# Query parameters each GET handler reads (all text; lists are comma-separated).
_ACCT = ["job_id", "user", "account", "partition", "state", "qos", "name", "nodelist", "start", "end", "duplicates"]
QUERIES: dict[str, list[str]] = {
    "/v1/jobs": ["job_id", "user", "name", "partition", "state", "view"],
    "/v1/nodes": ["name"],
    "/v1/steps": ["job_id", "user"],
    "/v1/accounting/jobs": _ACCT,
    "/v1/accounting/usage": ["start", "end"],
}

# Bodies that need no fields: an empty JSON object is a valid request.
_EMPTY_BODY = {"type": "object"}

_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "code": {"type": "string"}},
    "required": ["error"],
}


def _schema(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in schema.pop("$defs", {}).items():
        components[name] = sub
    components[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _operation(method: str, path: str, components: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{method.lower()}_{re.sub(r'[^A-Za-z0-9]+', '_', path).strip('_')}",
        "responses": {
            "200": {"description": "done", "content": {"application/json": {"schema": {"type": "object"}}}},
            "default": {"description": "refused, with the reason", "content": {"application/json": {"schema": _ERROR}}},
        },
    }
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", path)
    ]
    if method == "GET":
        params += [{"name": q, "in": "query", "schema": {"type": "string"}} for q in QUERIES.get(path, [])]
    if params:
        op["parameters"] = params
    if method == "POST":
        model = BODIES.get((method, path))
        schema = _schema(model, components) if model is not None else _EMPTY_BODY
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    if path.startswith("/v1/agent/"):
        op["description"] = "From node agents only: signed with the cluster key (X-Muster-* headers)."
    return op


def document(routes: list[Any]) -> dict[str, Any]:
    """The OpenAPI 3.1 description of ``routes`` (Starlette ``Route`` objects)."""
    paths: dict[str, dict[str, Any]] = {}
    components: dict[str, Any] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            paths.setdefault(route.path, {})[method.lower()] = _operation(method, route.path, components)
    return {
        "openapi": "3.1.0",
        "info": {"title": "musterctld", "version": __version__},
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"credential": {"type": "apiKey", "in": "header", "name": CRED_HEADER.title()}},
        },
        "security": [{"credential": []}],
    }


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
