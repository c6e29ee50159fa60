"""musterrestd's ``slurmdb`` routes: accounting records of jobs (sacct's), and the
accounts, users, associations and QOS (sacctmgr's), from the controller's accounting API."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse

from muster.rest import layout
from muster.rest.routes.kit import Kit, RestError

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


class AccountingRoutes:
    """The slurmdb routes' handlers."""

    def __init__(self, kit: Kit) -> None:
        self.kit = kit

    async def db_jobs(self, req: Request) -> JSONResponse:
        query = {ours: req.query_params[theirs] for theirs, ours in _DB_QUERY.items() if req.query_params.get(theirs)}
        for key in ("start", "end"):
            if key in query:
                try:
                    float(query[key])
                except ValueError:
                    raise RestError(400, f"{key}_time: expected a time in seconds since the epoch") from None
        data = await self.kit.ctld(req, "GET", "/v1/accounting/jobs" + ("?" + urlencode(query) if query else ""))
        return self.kit.answer(req, jobs=[layout.sacct_record(r) for r in data.get("jobs") or []])

    async def db_job(self, req: Request) -> JSONResponse:
        path = self.kit.job_path(req)
        data = await self.kit.ctld(req, "GET", f"/v1/accounting/jobs?job_id={path}")
        if not data.get("jobs"):
            raise RestError(404, f"Job {req.path_params['job_id']} not found", "invalid_job_id")
        return self.kit.answer(req, jobs=[layout.sacct_record(r) for r in data["jobs"]])

    async def objects(self, req: Request) -> dict[str, Any]:
        return await self.kit.ctld(req, "GET", "/v1/accounting/objects")  # type: ignore[no-any-return]

    async def accounts(self, req: Request) -> JSONResponse:
        o = await self.objects(req)
        assocs = o.get("assocs") or []
        return self.kit.answer(
            req, accounts=[layout.account(a, assocs, self.kit.cluster) for a in o.get("accounts") or []]
        )

    async def users(self, req: Request) -> JSONResponse:
        o = await self.objects(req)
        assocs = o.get("assocs") or []
        return self.kit.answer(req, users=[layout.user(u, assocs, self.kit.cluster) for u in o.get("users") or []])

    async def associations(self, req: Request) -> JSONResponse:
        o = await self.objects(req)
        return self.kit.answer(req, associations=[layout.assoc(a, self.kit.cluster) for a in o.get("assocs") or []])

    async def qos(self, req: Request) -> JSONResponse:
        o = await self.objects(req)
        return self.kit.answer(req, qos=[layout.qos(q) for q in o.get("qos") or []])
