"""musterrestd's ``slurm`` job routes: list and show, submit (the job description through
sbatch's own option table, ``rest.jobdesc``), update, cancel or signal, requeue."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse

from muster.rest import layout, versions
from muster.rest.jobdesc import JobDescError, job_request, number_value
from muster.rest.routes.kit import ERRORS, INVALID, Kit, RestError

_UPDATES = {"name", "partition", "comment", "time_limit", "nice", "priority", "begin_time", "minimum_nodes", "hold"}

_REQUEUE_FLAGS = {"incomplete", "hold"}

_FINISHED = {"COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "CANCELLED", "PREEMPTED"}


class JobRoutes:
    """The job routes' handlers."""

    def __init__(self, kit: Kit) -> None:
        self.kit = kit

    def job_list(self, data: dict[str, Any]) -> dict[str, Any]:
        now = data.get("now")
        return {
            "jobs": [layout.job_info({**j, "cluster": self.kit.cluster}) for j in data.get("jobs") or []],
            "last_backfill": layout.epoch(now),
            "last_update": layout.epoch(now),
        }

    async def jobs(self, req: Request) -> JSONResponse:
        return self.kit.answer(req, self.job_list(await self.kit.ctld(req, "GET", "/v1/jobs")))

    async def job(self, req: Request) -> JSONResponse:
        data = await self.kit.ctld(req, "GET", f"/v1/jobs?job_id={self.kit.job_path(req)}")
        if not data.get("jobs"):
            raise RestError(404, f"Job {req.path_params['job_id']} not found", "invalid_job_id")
        return self.kit.answer(req, self.job_list(data))

    def caller_name(self, req: Request) -> str:
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

    async def submit(self, req: Request) -> JSONResponse:
        body = await self.kit.json_body(req)
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
            spec, warnings = job_request(job, body.get("script"), self.caller_name(req))
        except (JobDescError, ValueError) as e:
            raise RestError(400, str(e)) from None
        warnings = ignored + warnings
        data = await self.kit.ctld(req, "POST", "/v1/jobs", {"spec": spec})
        job_id = int(data["job_id"])
        result = {"job_id": job_id, "step_id": "batch", "error_code": 0, "error": "", "job_submit_user_msg": ""}
        return self.kit.answer(
            req,
            schema="openapi_job_submit_response",
            job_id=job_id,
            step_id="batch",
            job_submit_user_msg="",
            result=result,
            warnings=[{"description": w, "source": "job"} for w in warnings],
        )

    async def update_job(self, req: Request) -> JSONResponse:
        path = self.kit.job_path(req)
        body = await self.kit.json_body(req)
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
            await self.kit.ctld(req, "POST", f"/v1/jobs/{path}/update", changes)
        if body.get("hold") is True:
            await self.kit.ctld(req, "POST", f"/v1/jobs/{path}/hold", {"admin": False})
        elif body.get("hold") is False:
            await self.kit.ctld(req, "POST", f"/v1/jobs/{path}/release", {})
        jid = req.path_params["job_id"]
        entry = {"job_id": int(jid) if jid.isdigit() else 0, "step_id": "", "error": "", "error_code": 0, "why": ""}
        return self.kit.answer(
            req, schema="openapi_job_post_response", results=[entry], job_id=jid, step_id="", job_submit_user_msg=""
        )

    async def cancel_job(self, req: Request) -> JSONResponse:
        self.kit.job_path(req)  # checked here: a malformed id is a 404, not a controller round trip
        signal = req.query_params.get("signal")
        body: dict[str, Any] = {"job_ids": [req.path_params["job_id"]]}
        if signal:
            body["signal"] = signal
        flags = (req.query_params.get("flags") or "").upper()
        if "BATCH_JOB" in flags:
            body["batch_only"] = True
        data = await self.kit.ctld(req, "POST", "/v1/jobs/signal", body)
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
            return self.kit.answer(req, status=[status_entry])
        return self.kit.answer(req)

    def requeue_flags(self, flags: Any) -> tuple[bool, bool]:
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

    async def requeue_one(self, req: Request, text: str, flags: tuple[bool, bool]) -> dict[str, Any]:
        """One job requeued as the caller; its ``job_array_response_msg_entry``."""
        if not text or not all(c.isalnum() or c in "_[]-,%" for c in text):
            raise RestError(404, f"Invalid job id: {text}", "invalid_job_id")
        number = int(text) if text.isdigit() else 0
        hold, incomplete = flags
        if incomplete:  # only a job (or tasks) not yet finished
            data = await self.kit.ctld(req, "GET", f"/v1/jobs?job_id={quote(text, safe='')}")
            if any(str(j.get("state") or "") in _FINISHED for j in data.get("jobs") or []):
                raise RestError(400, "Job/step already completing or completed")
        await self.kit.ctld(req, "POST", f"/v1/jobs/{quote(text, safe='')}/requeue", {"hold": hold})
        return {"job_id": number, "step_id": "", "error": "No error", "error_code": 0, "why": ""}

    async def requeue_job(self, req: Request) -> JSONResponse:
        flags = self.requeue_flags(req.query_params.get("flags") or "")
        return self.kit.answer(req, status=[await self.requeue_one(req, req.path_params["job_id"], flags)])

    async def requeue_jobs(self, req: Request) -> JSONResponse:
        body = await self.kit.json_body(req)
        unknown = sorted(set(body) - {"flags", "jobs"})
        if unknown:
            raise RestError(400, f"{unknown[0]}: not a field of jobs/requeue")
        flags = self.requeue_flags(body.get("flags") or [])
        ids = body.get("jobs")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str | int) for i in ids):
            raise RestError(400, "jobs: expected a list of job ids")
        status = []
        for i in ids:  # each job on its own: one refused does not stop the others
            try:
                status.append([await self.requeue_one(req, str(i), flags)])
            except RestError as e:
                number_, text = ERRORS.get(e.code, INVALID)
                entry = {"job_id": int(i) if str(i).isdigit() else 0, "step_id": "", "error": text}
                status.append([{**entry, "error_code": number_, "why": e.description}])
        return self.kit.answer(req, status=status)
