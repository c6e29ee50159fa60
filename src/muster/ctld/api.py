"""HTTP routes of musterctld: validation, authentication and authorization only.

Every request body is validated by a pydantic model (a malformed body gets a 400 naming
the field); the caller's identity comes from the transport (SO_PEERCRED on the Unix
socket, or a credential on TCP: agent-signed, or MUNGE with
``AuthType=auth/munge``, see ``ctld.usercred``); agent routes require a request signed for
``ctld`` by the node it names. Over TCP nothing is served without one or the other (401,
one log line). ``PrivateData`` (``ctld.privacy``) decides what of other users a caller
sees. State changes are delegated to ``Controller``; side effects to the app (``context.Context``).

The handlers live in route modules by resource (``ctld.routes``: jobs, cluster, reservations;
``acct_api``, ``agent_api``, ``stepapi``...), each given ``Api``'s helpers by ``build_routes``.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from muster.core.errors import AuthError, InvalidRequest, MusterError, StaleCredential
from muster.core.hostlist import expand
from muster.ctld.acct_api import accounting_routes
from muster.ctld.agent_api import build_agent_routes
from muster.ctld.bodies import (
    known_only,
)
from muster.ctld.commits import GroupCommit
from muster.ctld.context import Context, Endpoint
from muster.ctld.dashboard import build_dashboard_routes
from muster.ctld.identity import Identity
from muster.ctld.jwtauth import USER_HEADER, JwtAuth, token_in
from muster.ctld.listing import JobListing
from muster.ctld.observe_api import build_observe_routes
from muster.ctld.partition_api import build_partition_routes
from muster.ctld.privacy import PrivateData
from muster.ctld.reconfig import build_reconfig_routes
from muster.ctld.routes.cluster import cluster_routes
from muster.ctld.routes.jobs import job_routes
from muster.ctld.routes.reservations import reservation_routes
from muster.ctld.stepapi import build_step_routes
from muster.ctld.token_api import build_token_routes
from muster.ctld.triggers import build_trigger_routes
from muster.protocol import versions
from muster.protocol.httpd import PEER_KEY, TLS_PEER_KEY, SignatureError, refusal
from muster.protocol.replay import StaleMessage
from muster.protocol.signing import CRED_HEADER

log = logging.getLogger("musterctld.api")
IDENTITY_KEY = "muster.identity"  # the caller, once proven, for the rest of the request
MUNGE_KEY = "muster.munge"  # munged's answer for the request's MUNGE credential, asked off the loop
IGNORED_KEY = "muster.ignored"  # the body's fields a newer command sent that this controller ignored
IGNORED_HEADER = "X-Muster-Ignored"  # ... named in the answer, for the command to say so
# Commands of the next release are served (the window runs both ways for commands: they
# may be upgraded before the controller, or it rolled back before them); their bodies'
# fields this controller does not know are ignored, logged and named in the answer.
NEWER_COMMANDS = versions.PROTOCOL + 1


def check_client_protocol(head: Any) -> int:
    """A command's protocol, when this controller serves it (N-1..N+1); else ``ProtocolMismatch``."""
    if versions.peer_protocol(head) == NEWER_COMMANDS:
        return NEWER_COMMANDS
    return versions.check(head, "client", "", "this controller")


class _Refused(Exception):
    """A daemon's signed request that must be refused (answered 401, logged once)."""

    def __init__(self, cause: SignatureError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def error_response(err: MusterError, **extra: Any) -> JSONResponse:
    body = {"error": str(err), "code": err.code, **extra}
    if err.detail:
        body["detail"] = err.detail
    return JSONResponse(body, status_code=err.http_status)


def _validation_message(e: ValidationError) -> str:
    first = e.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "spec") or "body"
    return f"invalid request: {where}: {first.get('msg', 'invalid value')}"


def prove_caller(ctx: Context, request: Request, jwt_auth: JwtAuth | None = None) -> Identity:
    """Who sent the request: proven once (a credential is good for one request). With
    ``jwt_auth``, a token proves its user over any transport (musterrestd's requests)."""
    known = request.scope.get(IDENTITY_KEY)
    if known is not None:
        return known  # type: ignore[no-any-return]
    peer = request.scope.get(PEER_KEY)
    token = token_in(request.headers) if jwt_auth is not None else None
    if token is not None:
        assert jwt_auth is not None
        tu = jwt_auth.verify(token, request.headers.get(USER_HEADER), ctx.clock.now())
        who = ctx.controller.identity(tu.uid, tu.gid, ctx.hostname)
    elif peer is not None:
        _pid, uid, gid = peer
        who = ctx.controller.identity(uid, gid, ctx.hostname)
    else:
        cred = request.headers.get(CRED_HEADER)
        if not cred:
            raise AuthError("Authentication failure: no credential")
        try:
            decoded = request.scope.get(MUNGE_KEY)
            uid, gid, host = ctx.credentials.verify(cred, ctx.clock.now(), ctx.verifier.guard, decoded)
        except StaleMessage as e:  # made before this controller started or took over
            raise StaleCredential(f"Invalid credential: {e}") from None
        except SignatureError as e:
            raise AuthError(f"Invalid credential: {e}") from None
        who = ctx.controller.identity(uid, gid, host)
    request.scope[IDENTITY_KEY] = who
    return who


class Api:
    """What every route shares: body validation (``parse``), the caller proven once
    (``caller``), a daemon's signed body (``signed_body``) and the wrapper that checks the
    command's protocol and turns errors into Slurm's answers (``handler``)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.jwt_auth = JwtAuth(ctx.controller.config)  # AuthAltTypes=auth/jwt: tokens from scontrol token

    async def parse(self, request: Request, model: type[BaseModel]) -> Any:
        raw = await request.body()
        try:
            data = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            raise InvalidRequest("invalid request: body is not valid JSON") from None
        protocol = versions.peer_protocol(request.headers)
        if protocol > versions.PROTOCOL:  # a newer command: its new fields are ignored, said so
            data, ignored = known_only(model, data)
            if ignored:
                log.warning(
                    "%s %s: a command of protocol %d sent fields this controller (protocol %d) does not know; "
                    "ignored: %s",
                    request.method,
                    request.url.path,
                    protocol,
                    versions.PROTOCOL,
                    ", ".join(ignored),
                )
                request.scope[IGNORED_KEY] = ignored
        try:  # the same protocol or older: an unknown field is refused, named (a typo, a bug)
            return model.model_validate(data)
        except ValidationError as e:
            raise InvalidRequest(_validation_message(e)) from None

    def caller(self, request: Request) -> Identity:
        return prove_caller(self.ctx, request, self.jwt_auth)

    async def signed_body(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        path = request.scope["path"]
        if request.scope.get("query_string"):
            path += "?" + request.scope["query_string"].decode()
        try:
            headers = {k.lower(): v for k, v in request.headers.items()}
            sender = self.ctx.verifier.verify(request.method, path, raw, headers, request.scope.get(TLS_PEER_KEY))
        except SignatureError as e:
            raise _Refused(e) from None
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            raise InvalidRequest("invalid request: body is not valid JSON") from None
        if not isinstance(body, dict):
            raise InvalidRequest("invalid request: body must be a JSON object")
        named = body.get("node")
        if named is not None and named != sender:  # a node speaks for itself only
            raise _Refused(SignatureError(f"message from {sender} speaks for node {named}"))
        for key in ("heartbeats", "reports"):
            batch = body.get(key)
            if isinstance(batch, list):  # the nodes one agent process hosts: its sender names them
                hosted = set(expand(sender))
                for one in batch:
                    named = one.get("node") if isinstance(one, dict) else None
                    if (key == "heartbeats" or named is not None) and named not in hosted:
                        raise _Refused(SignatureError(f"message from {sender} speaks for node {named}"))
        return body

    def handler(self, fn: Endpoint) -> Endpoint:
        async def wrapped(request: Request) -> Response:
            try:
                if not request.url.path.startswith("/v1/agent/"):  # a daemon's: ``signing.check_protocol``
                    check_client_protocol(request.headers)
                unproven = request.scope.get(PEER_KEY) is None or token_in(request.headers) is not None
                if unproven and not request.url.path.startswith("/v1/agent/"):
                    if IDENTITY_KEY not in request.scope:  # MUNGE: munged is asked in a thread
                        decoded = await self.ctx.credentials.decode_munge(request.headers.get(CRED_HEADER))
                        if decoded is not None:
                            request.scope[MUNGE_KEY] = decoded
                    self.caller(request)  # over TCP (or with a token) nothing is served to an unproven caller
                response = await fn(request)
                ignored = request.scope.get(IGNORED_KEY)
                if ignored:
                    response.headers[IGNORED_HEADER] = ",".join(ignored)
                return response
            except _Refused as e:
                client = request.client.host if request.client else "?"
                log.warning(
                    "refused %s %s from %s (sender %s, receiver %s): %s",
                    request.method,
                    request.url.path,
                    client,
                    request.headers.get("x-muster-from", "-"),
                    request.headers.get("x-muster-to", "-"),
                    e.cause,
                )
                return JSONResponse(refusal(e.cause), status_code=getattr(e.cause, "status", 401))
            except versions.ProtocolMismatch as e:
                log.warning("refused %s %s: %s", request.method, request.url.path, e)
                return JSONResponse({"error": str(e), "code": "protocol"}, status_code=e.status)
            except AuthError as e:
                client = request.client.host if request.client else "?"
                log.warning("refused %s %s from %s: %s", request.method, request.url.path, client, e)
                return error_response(e)
            except MusterError as e:
                return error_response(e)
            except Exception as e:  # a bug: one line to the caller, the traceback to the log
                log.exception("%s %s failed", request.method, request.url.path)
                return JSONResponse(
                    {"error": f"Unexpected error in the controller: {type(e).__name__}: {e}", "code": "internal"},
                    status_code=500,
                )

        return wrapped


def build_routes(ctx: Context) -> list[Route]:
    ctl = ctx.controller
    api = Api(ctx)
    caller, parse, handler = api.caller, api.parse, api.handler
    private = PrivateData(ctl.config)
    # jobs encoded once per change (ctld.listing); the test suite has it check itself
    listing = JobListing(ctl.job_versions, check=os.environ.get("MUSTER_CHECK_LISTING") == "1")
    ended = GroupCommit(ctl, ctl.launches.job_done)  # agents' reports, one commit a group
    return accounting_routes(ctx, caller, parse, handler, private) + [
        *cluster_routes(ctx, caller, parse, handler),
        *job_routes(ctx, caller, parse, handler, private, listing),
        *reservation_routes(ctx, caller, parse, handler),
        *build_agent_routes(ctx, api.signed_body, handler, ended),
        *build_step_routes(ctx, caller, parse, handler, private),
        *build_reconfig_routes(ctx, caller, handler),
        *build_partition_routes(ctx, caller, handler),
        *build_observe_routes(ctx, caller, handler),
        *build_dashboard_routes(ctx, caller, handler, private),
        *build_token_routes(ctx, caller, parse, handler, api.jwt_auth),
        *build_trigger_routes(lambda: ctl.triggers, caller, handler),
    ]
