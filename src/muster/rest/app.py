"""musterrestd's routes: Slurm's REST API (OpenAPI plugins ``slurmctld`` and ``slurmdbd``,
data_parser v0.0.40 to v0.0.45: each version a view of one model, ``rest.versions``) in front
of the controller's own API.

Every request is made to the controller *as the caller*: with the caller's token
(``X-SLURM-USER-NAME``/``X-SLURM-USER-TOKEN`` or ``Authorization: Bearer``), which the
controller verifies itself, or, on a Unix socket, as musterrestd's own user when the peer
(SO_PEERCRED) is that very user (Slurm's ``rest_auth/local``). musterrestd holds no key and
decides nothing about permissions: the controller applies the same rules as for the
commands. See docs/rest.md and docs/security.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.client.controller import connect, connect_message, user_credential
from muster.client.settings import ClientSettings
from muster.core.clock import SystemClock
from muster.protocol.client import ApiError, ConnectError, request
from muster.protocol.httpd import PEER_KEY
from muster.rest import layout, versions
from muster.rest.jobdesc import JobDescError, job_request, number_value

log = logging.getLogger("musterrestd")

VERSION = "v0.0.40"
SLURM = f"/slurm/{VERSION}"
SLURMDB = f"/slurmdb/{VERSION}"
VERSIONS = versions.VERSIONS  # every version served: one model, each version a view (rest.versions)
_FORWARDED = ("x-slurm-user-name", "x-slurm-user-token", "authorization")

# The controller's error codes as Slurm's error numbers and texts.
_ERRORS = {
    "invalid_job_id": (2017, "Invalid job id specified"),
    "permission_denied": (2002, "Access/permission denied"),
    "invalid_partition": (2000, "Invalid partition name specified"),
    "auth": (1007, "Protocol authentication error"),
    "not_found": (2018, "Invalid node name specified"),
    "busy": (2051, "Resource temporarily unavailable"),
    "unsatisfiable": (2014, "Requested node configuration is not available"),
}
_INVALID = (9000, "Unable to parse query or body")


# Guarded's refusals (protocol.httpd: a body too large, too much in flight, too many
# failed authentications) as Slurm's error numbers and texts.
_REFUSALS = {"busy": _ERRORS["busy"], "rate_limited": _ERRORS["auth"]}


def refusal_document(scope: dict[str, Any], status: int, message: str, code: str, cluster: str = "") -> dict[str, Any]:
    """What musterrestd answers for a request its server refused before any route saw it
    (``httpd.make_server``'s ``refusal``): Slurm's ``errors[]`` document, as for any error."""
    number, text = _REFUSALS.get(code, _INVALID)
    command = [str(scope.get("method", "")), str(scope.get("path", ""))]
    return layout.error_document(command, message, text, number, "musterrestd", cluster)


class RestError(Exception):
    """An answer in ``errors[]`` form with this HTTP status."""

    def __init__(self, status: int, description: str, code: str = "invalid") -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.code = code


def openapi_document() -> dict[str, Any]:
    text = resources.files("muster.rest").joinpath("openapi.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


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


def _pings(settings: ClientSettings, clock: Any) -> list[dict[str, Any]]:
    """Every SlurmctldHost asked directly: UP or DOWN, and how long it took to answer."""
    from muster.client.failover import mode

    out = []
    for index, (host, _addr) in enumerate(settings.controllers):
        started = clock.monotonic()
        state = mode(settings, index, user_credential)
        out.append(
            {
                "hostname": host,
                "pinged": "DOWN" if state == "down" else "UP",
                "latency": int((clock.monotonic() - started) * 1e6),
                "mode": "primary" if index == 0 else "backup",
            }
        )
    return out


def build_app(settings: ClientSettings, local: bool = True) -> Starlette:
    """The REST API; ``local``: a Unix-socket peer that is musterrestd's own user needs no token."""
    upstream = Upstream(settings)
    clock = SystemClock()
    cluster = settings.cluster_name
    doc = versions.combined_document(openapi_document())

    def credentials(req: Request) -> dict[str, str] | None:
        """The headers that prove the caller to the controller; None for rest_auth/local."""
        token = (req.headers.get("x-slurm-user-token") or "").strip()
        bearer = (req.headers.get("authorization") or "").strip()
        if token or bearer.lower().startswith("bearer ") and bearer[7:].strip():
            return {k: req.headers[k] for k in _FORWARDED if k in req.headers}
        peer = req.scope.get(PEER_KEY)
        if local and peer is not None and peer[1] == os.getuid():
            return None
        raise RestError(401, "Authentication failure: no token (X-SLURM-USER-TOKEN) given", "auth")

    async def ctld(req: Request, method: str, path: str, body: Any = None) -> Any:
        headers = credentials(req)
        try:
            return await run_in_threadpool(upstream.call, method, path, body, headers)
        except ApiError as e:
            raise RestError(e.status, e.message, e.code) from None
        except ConnectError as e:
            raise RestError(502, connect_message(e), "connect") from None

    def answer(
        req: Request, body: dict[str, Any] | None = None, *, schema: str | None = None, **fields: Any
    ) -> JSONResponse:
        """The answer in v0.0.40's layout, shown as the request's version shows it."""
        who = req.headers.get("x-slurm-user-name", "")
        document = layout.document([req.method, req.url.path], cluster, who, **(body or {}), **fields)
        path = req.url.path
        return JSONResponse(versions.render(versions.version_of(path), path, document, schema))

    def route(fn: Callable[[Request], Awaitable[JSONResponse]]) -> Callable[[Request], Awaitable[JSONResponse]]:
        async def wrapped(req: Request) -> JSONResponse:
            try:
                return await fn(req)
            except RestError as e:
                number, text = _ERRORS.get(e.code, _INVALID if e.status == 400 else (-1, "Unspecified error"))
                status = e.status if e.status < 500 or e.status in (502, 503) else 500
                path = req.url.path
                document = layout.error_document([req.method, path], e.description, text, number, fn.__name__, cluster)
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

    async def json_body(req: Request) -> dict[str, Any]:
        raw = await req.body()
        try:
            data = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            raise RestError(400, "body is not valid JSON") from None
        if not isinstance(data, dict):
            raise RestError(400, "body must be a JSON object")
        return data

    def job_path(req: Request) -> str:
        text = req.path_params["job_id"]
        if not text or not all(c.isalnum() or c in "_[]-,%" for c in text):
            raise RestError(404, f"Invalid job id: {text}", "invalid_job_id")
        return quote(text, safe="")

    # --- slurm: the controller --------------------------------------------------------

    @route
    async def ping(req: Request) -> JSONResponse:
        if len(settings.ctld_hosts) > 1:  # each controller, as scontrol ping shows them
            await ctld(req, "GET", "/v1/ping")  # the caller proven by the active one
            return answer(req, pings=await asyncio.to_thread(_pings, settings, clock))
        started = clock.monotonic()
        await ctld(req, "GET", "/v1/ping")
        latency = int((clock.monotonic() - started) * 1e6)  # microseconds, as Slurm reports it
        host = settings.ctld_host
        return answer(req, pings=[{"hostname": host, "pinged": "UP", "latency": latency, "mode": "primary"}])

    @route
    async def diag(req: Request) -> JSONResponse:
        conf = await ctld(req, "GET", "/v1/config")
        jobs = await ctld(req, "GET", "/v1/jobs?view=brief")
        now = float(conf.get("now") or 0)
        stats = layout.diag(jobs.get("jobs") or [], now, float(conf.get("boot_time") or 0))
        return answer(req, statistics=stats)

    def job_list(data: dict[str, Any]) -> dict[str, Any]:
        now = data.get("now")
        return {
            "jobs": [layout.job_info({**j, "cluster": cluster}) for j in data.get("jobs") or []],
            "last_backfill": layout.epoch(now),
            "last_update": layout.epoch(now),
        }

    @route
    async def jobs(req: Request) -> JSONResponse:
        return answer(req, job_list(await ctld(req, "GET", "/v1/jobs")))

    @route
    async def job(req: Request) -> JSONResponse:
        data = await ctld(req, "GET", f"/v1/jobs?job_id={job_path(req)}")
        if not data.get("jobs"):
            raise RestError(404, f"Job {req.path_params['job_id']} not found", "invalid_job_id")
        return answer(req, job_list(data))

    def caller_name(req: Request) -> str:
        """Whose defaults a submission gets (the home directory): the named user, else the
        token's, else ours (local mode). Only defaults: the controller decides who it is."""
        named = req.headers.get("x-slurm-user-name")
        if named:
            return named
        token = (req.headers.get("x-slurm-user-token") or "").strip()
        bearer = (req.headers.get("authorization") or "").strip()
        if not token and bearer.lower().startswith("bearer "):
            token = bearer[7:].strip()
        if token:
            import jwt

            try:
                claims = jwt.decode(token, options={"verify_signature": False})
            except jwt.PyJWTError:
                claims = {}
            if isinstance(claims.get("sun"), str):
                return str(claims["sun"])
        import pwd

        try:
            return pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            return str(os.getuid())

    @route
    async def submit(req: Request) -> JSONResponse:
        body = await json_body(req)
        if body.get("jobs") is not None:
            raise RestError(400, "jobs: heterogeneous jobs are not supported by muster; submit one job")
        job = body.get("job")
        if job is None:
            raise RestError(400, "job: missing (a job description is required)")
        try:
            if isinstance(job, dict):
                job, ignored = versions.job_desc(versions.version_of(req.url.path), job)
            else:
                ignored = []
            spec, warnings = job_request(job, body.get("script"), caller_name(req))
        except (JobDescError, ValueError) as e:
            raise RestError(400, str(e)) from None
        warnings = ignored + warnings
        data = await ctld(req, "POST", "/v1/jobs", {"spec": spec})
        job_id = int(data["job_id"])
        result = {"job_id": job_id, "step_id": "batch", "error_code": 0, "error": "", "job_submit_user_msg": ""}
        return answer(
            req,
            schema="openapi_job_submit_response",
            job_id=job_id,
            step_id="batch",
            job_submit_user_msg="",
            result=result,
            warnings=[{"description": w, "source": "job"} for w in warnings],
        )

    _UPDATES = {"name", "partition", "comment", "time_limit", "nice", "priority", "begin_time", "minimum_nodes", "hold"}

    @route
    async def update_job(req: Request) -> JSONResponse:
        path = job_path(req)
        body = await json_body(req)
        unknown = sorted(set(body) - _UPDATES)
        if unknown:
            raise RestError(400, f"{unknown[0]}: cannot be updated by muster")
        changes: dict[str, Any] = {}
        for field in ("name", "partition", "comment"):
            if body.get(field) is not None:
                if not isinstance(body[field], str):
                    raise RestError(400, f"{field}: expected a string")
                changes[field] = body[field]
        numbers = {"nice": "nice", "priority": "priority", "begin_time": "begin_time", "minimum_nodes": "min_nodes"}
        try:
            for field, key in numbers.items():
                if body.get(field) is not None:
                    value = number_value(body[field], field)
                    if value is not None:
                        changes[key] = value
            if body.get("time_limit") is not None:
                minutes = number_value(body["time_limit"], "time_limit")
                changes["time_limit"] = None if minutes is None else minutes * 60
        except JobDescError as e:
            raise RestError(400, str(e)) from None
        if changes.get("time_limit", 0) is None:
            raise RestError(400, "time_limit: muster cannot lift a job's limit to UNLIMITED by update")
        if changes:
            await ctld(req, "POST", f"/v1/jobs/{path}/update", changes)
        if body.get("hold") is True:
            await ctld(req, "POST", f"/v1/jobs/{path}/hold", {"admin": False})
        elif body.get("hold") is False:
            await ctld(req, "POST", f"/v1/jobs/{path}/release", {})
        jid = req.path_params["job_id"]
        entry = {"job_id": int(jid) if jid.isdigit() else 0, "step_id": "", "error": "", "error_code": 0, "why": ""}
        return answer(
            req, schema="openapi_job_post_response", results=[entry], job_id=jid, step_id="", job_submit_user_msg=""
        )

    @route
    async def cancel_job(req: Request) -> JSONResponse:
        job_path(req)  # checked here: a malformed id is a 404, not a controller round trip
        signal = req.query_params.get("signal")
        body: dict[str, Any] = {"job_ids": [req.path_params["job_id"]]}
        if signal:
            body["signal"] = signal
        flags = (req.query_params.get("flags") or "").upper()
        if "BATCH_JOB" in flags:
            body["batch_only"] = True
        data = await ctld(req, "POST", "/v1/jobs/signal", body)
        for r in data.get("results") or []:
            if not r.get("ok", True):
                code = str(r.get("code") or "error")
                status = {"invalid_job_id": 404, "permission_denied": 403}.get(code, 400)
                raise RestError(status, str(r.get("error") or "failed"), code)
        if versions.at_least(versions.version_of(req.url.path), "v0.0.42"):  # openapi_kill_job_resp
            jid = req.path_params["job_id"]
            number = int(jid) if jid.isdigit() else 0
            status_entry = {
                "error": {"string": "No error", "code": 0, "message": "No error"},
                "step_id": jid,
                "job_id": {"set": True, "infinite": False, "number": number},
                "federation": {"sibling": ""},
            }
            return answer(req, status=[status_entry])
        return answer(req)

    _REQUEUE_FLAGS = {"incomplete", "hold"}

    def requeue_flags(flags: Any) -> tuple[bool, bool]:
        """Whether the requeued jobs are held, and whether only unfinished ones are
        (Incomplete); only flags muster honours are accepted."""
        if isinstance(flags, str):
            flags = [f for f in flags.split(",") if f]
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise RestError(400, "flags: expected a list of flags (Incomplete, Hold)")
        unknown = [f for f in flags if f.lower() not in _REQUEUE_FLAGS]
        if unknown:
            raise RestError(400, f"flags: {unknown[0]} is not supported by muster (Incomplete, Hold)")
        return any(f.lower() == "hold" for f in flags), any(f.lower() == "incomplete" for f in flags)

    _FINISHED = {"COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "CANCELLED", "PREEMPTED"}

    async def requeue_one(req: Request, text: str, flags: tuple[bool, bool]) -> dict[str, Any]:
        """One job requeued as the caller; its ``job_array_response_msg_entry``."""
        if not text or not all(c.isalnum() or c in "_[]-,%" for c in text):
            raise RestError(404, f"Invalid job id: {text}", "invalid_job_id")
        number = int(text) if text.isdigit() else 0
        hold, incomplete = flags
        if incomplete:  # only a job (or tasks) not yet finished
            data = await ctld(req, "GET", f"/v1/jobs?job_id={quote(text, safe='')}")
            if any(str(j.get("state") or "") in _FINISHED for j in data.get("jobs") or []):
                raise RestError(400, "Job/step already completing or completed")
        await ctld(req, "POST", f"/v1/jobs/{quote(text, safe='')}/requeue", {"hold": hold})
        return {"job_id": number, "step_id": "", "error": "No error", "error_code": 0, "why": ""}

    @route
    async def requeue_job(req: Request) -> JSONResponse:
        flags = requeue_flags(req.query_params.get("flags") or "")
        return answer(req, status=[await requeue_one(req, req.path_params["job_id"], flags)])

    @route
    async def requeue_jobs(req: Request) -> JSONResponse:
        body = await json_body(req)
        unknown = sorted(set(body) - {"flags", "jobs"})
        if unknown:
            raise RestError(400, f"{unknown[0]}: not a field of jobs/requeue")
        flags = requeue_flags(body.get("flags") or [])
        ids = body.get("jobs")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str | int) for i in ids):
            raise RestError(400, "jobs: expected a list of job ids")
        status = []
        for i in ids:  # each job on its own: one refused does not stop the others
            try:
                status.append([await requeue_one(req, str(i), flags)])
            except RestError as e:
                number_, text = _ERRORS.get(e.code, _INVALID)
                entry = {"job_id": int(i) if str(i).isdigit() else 0, "step_id": "", "error": text}
                status.append([{**entry, "error_code": number_, "why": e.description}])
        return answer(req, status=status)

    def node_list(data: dict[str, Any]) -> dict[str, Any]:
        return {
            "nodes": [layout.node(n, cluster) for n in data.get("nodes") or []],
            "last_update": layout.epoch(data.get("now")),
        }

    @route
    async def nodes(req: Request) -> JSONResponse:
        return answer(req, node_list(await ctld(req, "GET", "/v1/nodes")))

    @route
    async def node(req: Request) -> JSONResponse:
        name = req.path_params["node_name"]
        data = await ctld(req, "GET", "/v1/nodes?" + urlencode({"name": name}))
        if not data.get("nodes"):
            raise RestError(404, f"Invalid node name specified: {name}", "not_found")
        shown = node_list(data)
        for out, raw in zip(shown["nodes"], data["nodes"], strict=True):
            out["failures"] = raw.get("failures") or []  # muster's: the failure ledger's latest records
        return answer(req, shown)

    @route
    async def update_node(req: Request) -> JSONResponse:
        name = req.path_params["node_name"]
        body = await json_body(req)
        unknown = sorted(set(body) - {"state", "reason", "comment", "name"})
        if unknown:
            raise RestError(400, f"{unknown[0]}: cannot be updated by muster")
        states = body.get("state") or []
        if isinstance(states, str):
            states = [states]
        if not isinstance(states, list) or len(states) > 1 or not all(isinstance(s, str) for s in states):
            raise RestError(400, "state: expected one state (DRAIN, RESUME, UNDRAIN, DOWN, IDLE, FAIL)")
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise RestError(400, "reason: expected a string")
        await ctld(
            req, "POST", "/v1/nodes/update", {"names": [name], "state": states[0] if states else None, "reason": reason}
        )
        return answer(req)

    def partition_list(data: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        parts = [p for p in data.get("partitions") or [] if name is None or p.get("name") == name]
        if name is not None and not parts:
            raise RestError(404, f"Invalid partition name specified: {name}", "invalid_partition")
        return {
            "partitions": [layout.partition(p, cluster) for p in parts],
            "last_update": layout.epoch(data.get("now")),
        }

    @route
    async def partitions(req: Request) -> JSONResponse:
        return answer(req, partition_list(await ctld(req, "GET", "/v1/partitions")))

    @route
    async def partition(req: Request) -> JSONResponse:
        data = await ctld(req, "GET", "/v1/partitions")
        return answer(req, partition_list(data, req.path_params["partition_name"]))

    @route
    async def reservations(req: Request) -> JSONResponse:
        data = await ctld(req, "GET", "/v1/reservations")
        out = [layout.reservation(r) for r in data.get("reservations") or []]
        return answer(req, reservations=out, last_update=layout.epoch(data.get("now")))

    @route
    async def reservation(req: Request) -> JSONResponse:
        name = req.path_params["reservation_name"]
        data = await ctld(req, "GET", "/v1/reservations")
        out = [layout.reservation(r) for r in data.get("reservations") or [] if r.get("name") == name]
        if not out:
            raise RestError(404, f"Reservation {name} not found", "not_found")
        return answer(req, reservations=out, last_update=layout.epoch(data.get("now")))

    @route
    async def shares(req: Request) -> JSONResponse:
        data = await ctld(req, "GET", "/v1/accounting/shares")
        return answer(req, shares=layout.shares(data.get("rows") or [], cluster))

    # --- slurmdb: accounting ----------------------------------------------------------

    _DB_QUERY = {
        "users": "user",
        "account": "account",
        "partition": "partition",
        "state": "state",
        "job_name": "name",
        "qos": "qos",
        "node": "nodelist",
        "start_time": "start",
        "end_time": "end",
    }

    @route
    async def db_jobs(req: Request) -> JSONResponse:
        query = {ours: req.query_params[theirs] for theirs, ours in _DB_QUERY.items() if req.query_params.get(theirs)}
        for key in ("start", "end"):
            if key in query:
                try:
                    float(query[key])
                except ValueError:
                    raise RestError(400, f"{key}_time: expected a time in seconds since the epoch") from None
        data = await ctld(req, "GET", "/v1/accounting/jobs" + ("?" + urlencode(query) if query else ""))
        return answer(req, jobs=[layout.sacct_record(r) for r in data.get("jobs") or []])

    @route
    async def db_job(req: Request) -> JSONResponse:
        path = job_path(req)
        data = await ctld(req, "GET", f"/v1/accounting/jobs?job_id={path}")
        if not data.get("jobs"):
            raise RestError(404, f"Job {req.path_params['job_id']} not found", "invalid_job_id")
        return answer(req, jobs=[layout.sacct_record(r) for r in data["jobs"]])

    async def objects(req: Request) -> dict[str, Any]:
        return await ctld(req, "GET", "/v1/accounting/objects")  # type: ignore[no-any-return]

    @route
    async def accounts(req: Request) -> JSONResponse:
        o = await objects(req)
        assocs = o.get("assocs") or []
        return answer(req, accounts=[layout.account(a, assocs, cluster) for a in o.get("accounts") or []])

    @route
    async def users(req: Request) -> JSONResponse:
        o = await objects(req)
        assocs = o.get("assocs") or []
        return answer(req, users=[layout.user(u, assocs, cluster) for u in o.get("users") or []])

    @route
    async def associations(req: Request) -> JSONResponse:
        o = await objects(req)
        return answer(req, associations=[layout.assoc(a, cluster) for a in o.get("assocs") or []])

    @route
    async def qos(req: Request) -> JSONResponse:
        o = await objects(req)
        return answer(req, qos=[layout.qos(q) for q in o.get("qos") or []])

    async def openapi(req: Request) -> JSONResponse:
        return JSONResponse(doc)

    def version_routes(v: str) -> list[Route]:
        """One version's routes: the same handlers, each answer shown as ``v`` shows it."""
        s, db = f"/slurm/{v}", f"/slurmdb/{v}"
        out = [
            Route(f"{s}/ping", ping),
            Route(f"{s}/diag", diag),
            Route(f"{s}/jobs", jobs),
            Route(f"{s}/job/submit", submit, methods=["POST"]),
            Route(f"{s}/job/{{job_id}}", job, methods=["GET"]),
            Route(f"{s}/job/{{job_id}}", update_job, methods=["POST"]),
            Route(f"{s}/job/{{job_id}}", cancel_job, methods=["DELETE"]),
            Route(f"{s}/nodes", nodes),
            Route(f"{s}/node/{{node_name}}", node, methods=["GET"]),
            Route(f"{s}/node/{{node_name}}", update_node, methods=["POST"]),
            Route(f"{s}/partitions", partitions),
            Route(f"{s}/partition/{{partition_name}}", partition),
            Route(f"{s}/reservations", reservations),
            Route(f"{s}/reservation/{{reservation_name}}", reservation),
            Route(f"{s}/shares", shares),
            Route(f"{db}/jobs", db_jobs),
            Route(f"{db}/job/{{job_id}}", db_job),
            Route(f"{db}/accounts", accounts),
            Route(f"{db}/users", users),
            Route(f"{db}/associations", associations),
            Route(f"{db}/qos", qos),
        ]
        if versions.at_least(v, versions.REQUEUE_SINCE):
            out.append(Route(f"{s}/job/{{job_id}}/requeue", requeue_job, methods=["GET"]))
            out.append(Route(f"{s}/jobs/requeue", requeue_jobs, methods=["POST"]))
        return out

    async def no_route(req: Request, exc: Exception) -> JSONResponse:
        """An unknown URL (another plugin version included) or method, in ``errors[]`` form."""
        status = getattr(exc, "status_code", 404)
        path = req.url.path
        # "/slurm/v0.0.40" and the like: the plugins and versions served, read from the routes
        prefixes = {"/".join(str(getattr(r, "path", "")).split("/")[:3]) for r in req.app.routes}
        parts = path.split("/")
        if status == 405:
            description = f"Method {req.method} not allowed for {path}"
        elif len(parts) > 2 and parts[1] in ("slurm", "slurmdb") and f"/{parts[1]}/{parts[2]}" not in prefixes:
            speaks = ", ".join(sorted({p.rsplit("/", 1)[1] for p in prefixes if p.startswith(f"/{parts[1]}/")}))
            description = f"Unsupported API version {parts[2]!r} in {path}: this server speaks {speaks}"
        else:
            description = f"Unable to find requested URL: {path}"
        document = layout.error_document(
            [req.method, path], description, _INVALID[1], _INVALID[0], "musterrestd", cluster
        )
        return JSONResponse(document, status_code=status)

    return Starlette(
        exception_handlers={404: no_route, 405: no_route},
        routes=[
            Route("/openapi/v3", openapi),
            Route("/openapi.json", openapi),
            *(r for v in VERSIONS for r in version_routes(v)),
        ],
    )
