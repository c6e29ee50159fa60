"""HTTP routes for accounting: what sacct, sacctmgr, sshare, sprio and sreport ask.

Reads come from the controller (records from the store, the rest from memory); commands
never open the database. Only sacctmgr's changes need privileges (root, AdminUsers, or an
AdminLevel of Operator or Administrator); ``build_routes`` hands in its helpers for the
caller's identity, body validation and error answers.

| method, path | query or body | answer |
|---|---|---|
| ``GET /v1/accounting/jobs`` | ``job_id user account partition state qos name nodelist start end duplicates`` | ``{"jobs": [record], "now"}`` |
| ``GET /v1/accounting/objects`` | | ``{"cluster", "accounts", "users", "assocs", "qos"}`` |
| ``POST /v1/accounting/sacctmgr`` | ``{"verb", "entity", "names", "where", "set", "dry_run"}`` | ``{"lines": [...], "changed": n, "nothing": bool}`` |
| ``GET /v1/accounting/shares`` | | ``{"rows": [...], "now"}`` |
| ``GET /v1/accounting/priority`` | | ``{"weights", "jobs": [...], "multifactor"}`` |
| ``GET /v1/accounting/usage`` | ``start end`` | ``{"allocated", "capacity", "usage": [...]}`` |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.errors import InvalidRequest
from muster.core.states import job_state_name
from muster.ctld.context import Context, Handler
from muster.ctld.privacy import PrivateData
from muster.ctld.records import Query


class SacctmgrBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verb: str
    entity: str
    names: list[str] = []
    where: dict[str, list[str]] = {}
    set: dict[str, str] = {}
    dry_run: bool = False


def parse_states(values: list[str]) -> list[str]:
    """State names or codes as long names (``core.states``); unknown ones kept as given,
    upper case, so they match nothing."""
    out = []
    for v in values:
        out.append(job_state_name(v) or v.strip().upper())
    return out


def qlist(request: Request, key: str) -> list[str] | None:
    v = request.query_params.get(key)
    return [x for x in v.split(",") if x] if v else None


def qtime(request: Request, key: str) -> float | None:
    v = request.query_params.get(key)
    if v is None or v == "":
        return None
    try:
        return float(v)
    except ValueError:
        raise InvalidRequest(f"invalid request: {key}: not a time") from None


def job_query(request: Request) -> Query:
    """sacct's query (``GET /v1/accounting/jobs``) read from the request's parameters."""
    job_ids: list[int] = []
    tasks: set[tuple[int, int]] = set()
    for text in qlist(request, "job_id") or []:
        base, _, task = text.partition(".")[0].partition("_")
        base, plus, offset = base.partition("+")
        try:
            if plus:  # component ``offset`` of heterogeneous job ``base``
                job_ids.append(int(base) + int(offset))
            elif task:
                tasks.add((int(base), int(task)))
            else:
                job_ids.append(int(base))
        except ValueError:
            raise InvalidRequest(f"Invalid job id: {text}") from None
    return Query(
        job_ids=job_ids or None,
        array_tasks=tasks or None,
        users=qlist(request, "user"),
        accounts=qlist(request, "account"),
        partitions=qlist(request, "partition"),
        states=parse_states(qlist(request, "state") or []) or None,
        qos=qlist(request, "qos"),
        names=qlist(request, "name"),
        nodes=qlist(request, "nodelist"),
        start=qtime(request, "start"),
        end=qtime(request, "end"),
        duplicates=request.query_params.get("duplicates") in ("1", "true", "yes"),
    )


def accounting_routes(
    ctx: Context, caller: Callable[[Request], Any], parse: Any, handler: Handler, private: PrivateData | None = None
) -> list[Route]:
    ctl = ctx.controller
    private = private or PrivateData(ctl.config)

    def acct() -> Any:
        if ctl.accounting is None:
            raise InvalidRequest("accounting is not available")
        return ctl.accounting

    @handler
    async def jobs(request: Request) -> JSONResponse:
        who = caller(request)
        now = ctx.clock.now()
        q = job_query(request)
        return JSONResponse({"jobs": private.job_rows(acct().jobs(q, now), who), "now": now})

    @handler
    async def objects(request: Request) -> JSONResponse:
        who = caller(request)
        return JSONResponse({**private.objects(acct().db.objects(), who), "now": ctx.clock.now()})

    @handler
    async def sacctmgr(request: Request) -> JSONResponse:
        who = caller(request)
        body = await parse(request, SacctmgrBody)
        result = acct().sacctmgr(body.model_dump(), who, ctx.clock.now())
        if result.changes and not body.dry_run:
            ctx.kick()  # limits and shares may let jobs start (or stop them starting)
        return JSONResponse({"lines": result.lines, "changed": len(result.changes), "nothing": result.nothing})

    @handler
    async def shares(request: Request) -> JSONResponse:
        who = caller(request)
        a = acct()
        a.charge(ctl.jobs, ctx.clock.now())
        a.refresh()
        return JSONResponse(
            {"rows": private.usage_rows(a.shares(), who), "cluster": ctl.config.cluster_name, "now": ctx.clock.now()}
        )

    @handler
    async def priority(request: Request) -> JSONResponse:
        caller(request)
        return JSONResponse({**acct().priorities(ctl, ctx.clock.now()), "now": ctx.clock.now()})

    @handler
    async def usage(request: Request) -> JSONResponse:
        who = caller(request)
        now = ctx.clock.now()
        start = qtime(request, "start")
        end = qtime(request, "end")
        if start is None or end is None or end <= start:
            raise InvalidRequest("invalid request: start and end must be given, start before end")
        report = acct().usage_report(start, end, now, ctl)
        report["usage"] = private.usage_rows(report["usage"], who)
        report["goodput"] = private.usage_rows(report["goodput"], who)
        return JSONResponse({**report, "now": now})

    return [
        Route("/v1/accounting/jobs", jobs),
        Route("/v1/accounting/objects", objects),
        Route("/v1/accounting/sacctmgr", sacctmgr, methods=["POST"]),
        Route("/v1/accounting/shares", shares),
        Route("/v1/accounting/priority", priority),
        Route("/v1/accounting/usage", usage),
    ]
