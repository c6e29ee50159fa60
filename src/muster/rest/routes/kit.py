"""What every route of musterrestd shares: reaching the controller as the caller
(``Upstream``, ``Kit.ctld``: the caller's token forwarded, or musterrestd's own user for
``rest_auth/local``), answers in v0.0.40's layout shown as the request's version shows them
(``Kit.answer``), errors in Slurm's ``errors[]`` form (``RestError``, ``Kit.route``), and what
a route reads of a request (``json_body``, ``job_path``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from muster.client.controller import connect, connect_message, user_credential
from muster.client.settings import ClientSettings
from muster.core.clock import SystemClock
from muster.protocol.client import ApiError, ConnectError, request
from muster.protocol.httpd import PEER_KEY
from muster.rest import layout, versions

log = logging.getLogger("musterrestd")

_FORWARDED = ("x-slurm-user-name", "x-slurm-user-token", "authorization")

# The controller's error codes as Slurm's error numbers and texts.
ERRORS = {
    "invalid_job_id": (2017, "Invalid job id specified"),
    "permission_denied": (2002, "Access/permission denied"),
    "invalid_partition": (2000, "Invalid partition name specified"),
    "auth": (1007, "Protocol authentication error"),
    "not_found": (2018, "Invalid node name specified"),
    "busy": (2051, "Resource temporarily unavailable"),
    "unsatisfiable": (2014, "Requested node configuration is not available"),
}
INVALID = (9000, "Unable to parse query or body")


class RestError(Exception):
    """An answer in ``errors[]`` form with this HTTP status."""

    def __init__(self, status: int, description: str, code: str = "invalid") -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.code = code


class Upstream:
    """How musterrestd reaches the controller for one request."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings

    def call(self, method: str, path: str, body: Any, headers: dict[str, str] | None) -> Any:
        if headers is None:  # rest_auth/local: as musterrestd's own user, like a command
            return connect("musterrestd", self.settings).call(method, path, body)
        if len(self.settings.ctld_hosts) > 1:  # a primary and backups: whichever is active
            from muster.client.failover import call_active

            return call_active(self.settings, method, path, body, 60.0, user_credential, headers)
        sock = self.settings.ctld_socket
        if os.path.exists(sock):  # the token decides who this is, on either transport
            return request(method, path, body, unix_path=sock, headers=headers)
        return request(method, path, body, address=(self.settings.ctld_addr, self.settings.ctld_port), headers=headers)


class Kit:
    """One musterrestd's helpers for its routes; ``local``: a Unix-socket peer that is
    musterrestd's own user needs no token."""

    def __init__(self, settings: ClientSettings, local: bool = True) -> None:
        self.settings = settings
        self.local = local
        self.upstream = Upstream(settings)
        self.clock = SystemClock()
        self.cluster = settings.cluster_name

    def credentials(self, req: Request) -> dict[str, str] | None:
        """The headers that prove the caller to the controller; None for rest_auth/local."""
        token = (req.headers.get("x-slurm-user-token") or "").strip()
        bearer = (req.headers.get("authorization") or "").strip()
        if token or bearer.lower().startswith("bearer ") and bearer[7:].strip():
            return {k: req.headers[k] for k in _FORWARDED if k in req.headers}
        peer = req.scope.get(PEER_KEY)
        if self.local and peer is not None and peer[1] == os.getuid():
            return None
        raise RestError(401, "Authentication failure: no token (X-SLURM-USER-TOKEN) given", "auth")

    async def ctld(self, req: Request, method: str, path: str, body: Any = None) -> Any:
        headers = self.credentials(req)
        try:
            return await run_in_threadpool(self.upstream.call, method, path, body, headers)
        except ApiError as e:
            raise RestError(e.status, e.message, e.code) from None
        except ConnectError as e:
            raise RestError(502, connect_message(e), "connect") from None

    def answer(
        self, req: Request, body: dict[str, Any] | None = None, *, schema: str | None = None, **fields: Any
    ) -> JSONResponse:
        """The answer in v0.0.40's layout, shown as the request's version shows it."""
        who = req.headers.get("x-slurm-user-name", "")
        document = layout.document([req.method, req.url.path], self.cluster, who, **(body or {}), **fields)
        path = req.url.path
        return JSONResponse(versions.render(versions.version_of(path), path, document, schema))

    def route(self, fn: Callable[[Request], Awaitable[JSONResponse]]) -> Callable[[Request], Awaitable[JSONResponse]]:
        async def wrapped(req: Request) -> JSONResponse:
            try:
                return await fn(req)
            except RestError as e:
                number, text = ERRORS.get(e.code, INVALID if e.status == 400 else (-1, "Unspecified error"))
                status = e.status if e.status < 500 or e.status in (502, 503) else 500
                path = req.url.path
                document = layout.error_document(
                    [req.method, path], e.description, text, number, fn.__name__, self.cluster
                )
                return JSONResponse(versions.render(versions.version_of(path), path, document), status_code=status)
            except Exception as e:  # a bug: one line to the client, the traceback to the log
                log.exception("%s %s failed", req.method, req.url.path)
                return JSONResponse(
                    layout.error_document(
                        [req.method, req.url.path], f"{type(e).__name__}: {e}", "Unspecified error", -1, "musterrestd"
                    ),
                    status_code=500,
                )

        return wrapped

    async def json_body(self, req: Request) -> dict[str, Any]:
        raw = await req.body()
        try:
            data = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            raise RestError(400, "body is not valid JSON") from None
        if not isinstance(data, dict):
            raise RestError(400, "body must be a JSON object")
        return data

    def job_path(self, req: Request) -> str:
        text = req.path_params["job_id"]
        if not text or not all(c.isalnum() or c in "_[]-,%" for c in text):
            raise RestError(404, f"Invalid job id: {text}", "invalid_job_id")
        return quote(text, safe="")
