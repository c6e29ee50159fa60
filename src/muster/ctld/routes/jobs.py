"""The controller's job routes: submit (``sbatch``, a heterogeneous job's components), list
and show (``squeue``, ``scontrol show job``: encoded once per change by ``ctld.listing``), a
hung job's evidence, signal and cancel (``scancel``), hold, release, update, requeue,
suspend and resume (``scontrol``). Checks of the body and the caller only; the changes are
the controller's (``jobs``, ``suspend``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from muster.core.arrays import parse_array
from muster.core.errors import InvalidJobId, InvalidRequest, MusterError, ResourceBusy
from muster.core.hetjob import NOT_WHOLE
from muster.core.job import Job
from muster.core.states import JobState
from muster.ctld.actions import parse_signal
from muster.ctld.bodies import HoldBody, RequeueBody, SignalBody, SpecModel, SubmitBody, UpdateBody
from muster.ctld.context import Context, Handler
from muster.ctld.identity import Identity
from muster.ctld.listing import JobListing
from muster.ctld.listing import select as select_fields
from muster.ctld.privacy import PrivateData
from muster.ctld.routes.params import job_ref, query_list

log = logging.getLogger("musterctld.api")

Parse = Callable[[Request, type[BaseModel]], Awaitable[Any]]


def _cancelled_pending(job: Job | None) -> bool:
    return job is not None and job.state is JobState.CANCELLED and job.start_time is None


class JobRoutes:
    """The job routes' handlers, over the controller and the API's helpers."""

    def __init__(
        self,
        ctx: Context,
        caller: Callable[[Request], Identity],
        parse: Parse,
        private: PrivateData,
        listing: JobListing,
    ) -> None:
        self.ctx = ctx
        self.ctl = ctx.controller
        self.caller = caller
        self.parse = parse
        self.private = private
        self.listing = listing

    def check_limits(self, spec: SpecModel, who: Identity) -> None:
        """Script size, MaxJobCount and the per-user cap: before any work is done."""
        cfg = self.ctl.config
        if spec.script is not None:
            size = len(spec.script.encode())
            if size > cfg.max_script_size:
                raise InvalidRequest(  # Slurm's words (ESLURM_PATHNAME_TOO_LONG), and why
                    "Pathname of a file, directory or other parameter too long "
                    f"(the batch script has {size} bytes; max_script_size is {cfg.max_script_size})"
                )
        adding = 1
        if spec.array:
            try:
                adding = len(parse_array(spec.array, cfg.max_array_size).indices)
            except ValueError:
                adding = 1  # the controller says what is wrong with it
        if len(self.ctl.jobs) + adding > cfg.max_job_count:
            log.warning(
                "refused a submission of %d job(s) by %s: %d jobs in memory, MaxJobCount=%d",
                adding,
                who.user,
                len(self.ctl.jobs),
                cfg.max_job_count,
            )
            raise ResourceBusy()
        cap = 0 if who.admin else cfg.max_submit_jobs_per_user  # a cap on users, not on operators
        queued = (
            j for j in self.ctl.jobs.values() if j.uid == who.uid and (j.state is JobState.PENDING or j.is_active)
        )
        if cap and sum(1 for _ in queued) + adding > cap:
            log.warning("refused a submission by %s: max_submit_jobs_per_user=%d reached", who.user, cap)
            raise ResourceBusy()

    async def submit(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, SubmitBody)
        self.check_limits(body.spec, who)
        if body.components:
            for part in body.components[1:]:
                self.check_limits(part, who)
            token = request.headers.get("x-muster-request")
            jobs = self.ctl.hets.submit([part.to_spec() for part in body.components], who, token)
            self.ctx.kick()
            return JSONResponse({"job_id": jobs[0].job_id, "job_ids": [j.job_id for j in jobs]})
        # the client's token for this submission: a retry after a lost answer (the controller
        # died, a backup took over) gets the same job back (client.failover)
        job = self.ctl.queue.submit(body.spec.to_spec(), who, request.headers.get("x-muster-request"))
        if not job.hold or job.spec.deadline is not None:
            # A held job (an array's tasks alike) can start in no pass, and a pass would
            # tell nothing new of it (its reason is set, its priority 0), so it asks for
            # none (one with a --deadline does: a pass ends it if it can no longer be met).
            # A stream of held submissions then costs no pass over the whole queue each;
            # the periodic pass (SchedulerInterval) still sees them.
            self.ctx.kick()
        return JSONResponse({"job_id": job.job_id})

    async def list_jobs(self, request: Request) -> Response:
        now = self.ctx.clock.now()
        ids = query_list(request, "job_id")
        refs = [job_ref(i) for i in ids or ()]
        job_ids = self.ctl.queue.job_ids(refs) if ids else None
        if job_ids and all(ref.tasks is not None for ref in refs):
            # As in Slurm, an array task cancelled while it pended leaves no job record
            # of its own (only accounting knows it): asked for by its task id, it is gone.
            job_ids = [i for i in job_ids if not _cancelled_pending(self.ctl.jobs.get(i))]
            if not job_ids:
                raise InvalidJobId()
        selected = self.ctl.queue.select_jobs(
            job_ids,
            query_list(request, "user"),
            request.query_params.get("name"),
            query_list(request, "partition"),
            query_list(request, "state"),
        )
        if self.private.hides("jobs", self.caller(request)):
            selected = self.private.jobs(selected, self.caller(request))
        if ids and not selected and len(ids) == 1:
            raise InvalidJobId()
        if job_ids is None:
            self.listing.prune(self.ctl.jobs)
        brief = request.query_params.get("view") == "brief"
        fields = query_list(request, "fields")
        if fields is not None and not brief:
            raise InvalidRequest("fields= narrows the brief view only (view=brief)")
        narrowed = select_fields(fields) if fields is not None else None
        body = self.listing.body(selected, now, brief, self.ctl.jobs, narrowed)
        return Response(body, media_type="application/json")

    async def get_job(self, request: Request) -> Response:
        ref = job_ref(request.path_params["job_id"])
        if ref.tasks is None:
            job = self.ctl.queue.get_job(ref.job_id)
        else:
            found = self.ctl.queue.resolve(ref)
            if not found:
                raise InvalidJobId()
            job = found[0]
        if not self.private.jobs([job], self.caller(request)):
            raise InvalidJobId()  # PrivateData=jobs: another user's job is not there
        now = self.ctx.clock.now()
        frag = self.listing.fragment(job, now, False, self.ctl.jobs)
        body = b'{"job":' + frag + b',"now":' + json.dumps(now).encode() + b"}"
        return Response(body, media_type="application/json")

    async def hang_evidence(self, request: Request) -> JSONResponse:
        """What each process of the job's hung attempts was doing (``ctld.training``): the
        ``hang_evidence`` events of the job, oldest first."""
        job = self.ctl.queue.get_job(job_ref(request.path_params["job_id"]).job_id)
        if not self.private.jobs([job], self.caller(request)):
            raise InvalidJobId()
        found = [{"time": t, **d} for t, kind, d in self.ctl.store.events(job.job_id) if kind == "hang_evidence"]
        return JSONResponse({"job_id": job.job_id, "evidence": found})

    async def signal_jobs(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, SignalBody)
        sig = parse_signal(body.signal) if body.signal is not None else None
        filters = (
            [body.user] if body.user else None,
            body.name,
            [body.partition] if body.partition else None,
            body.states,
        )
        results: list[dict[str, Any]] = []
        targets: list[Job]
        if body.job_ids:
            targets = []
            for item in body.job_ids:
                ref = job_ref(str(item))
                jobs = self.ctl.queue.resolve(ref)
                if not jobs or (sig is None and ref.offset and jobs[0].state is JobState.PENDING):
                    # one component of a pending het job cannot be cancelled, only the whole
                    err = InvalidRequest(NOT_WHOLE) if jobs else InvalidJobId()
                    results.append({"job_id": str(ref), "ok": False, "error": str(err), "code": err.code})
                    continue
                chosen = {j.job_id for j in self.ctl.queue.select_jobs([j.job_id for j in jobs], *filters)}
                targets.extend(j for j in jobs if j.job_id in chosen)
        else:
            targets = self.ctl.queue.select_jobs(None, *filters)
            if not who.admin and body.user is None:
                targets = [j for j in targets if j.uid == who.uid]
        if sig is None:
            # cancelling: one transaction for all (a whole array is many jobs)
            actions, done = self.ctl.queue.cancel_all(targets, who)
            self.ctx.perform(actions)
            results.extend(done)
            targets = []
        for job in targets:
            try:
                if sig is None:
                    actions = self.ctl.queue.cancel(job, who)
                else:
                    actions = self.ctl.queue.signal(job, who, sig, body.batch_only)
                self.ctx.perform(actions)
                results.append({"job_id": job.job_id, "ok": True})
            except MusterError as e:
                results.append({"job_id": job.job_id, "ok": False, "error": str(e), "code": e.code})
        if sig is None:
            self.ctx.kick()
        return JSONResponse({"results": results})

    def each_job(self, request: Request, act: Any) -> None:
        """Apply ``act`` to every job the path's id names (an array id: all its tasks).
        An error is raised only when it failed for every one of them."""
        jobs = self.ctl.queue.resolve(job_ref(request.path_params["job_id"]))
        if not jobs:
            raise InvalidJobId()
        first_error: MusterError | None = None
        done = 0
        for job in jobs:
            try:
                act(job)
                done += 1
            except MusterError as e:
                first_error = first_error or e
        if not done and first_error is not None:
            raise first_error

    async def hold(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, HoldBody)
        self.each_job(request, lambda job: self.ctl.queue.hold(job, who, body.admin))
        return JSONResponse({"ok": True})

    async def release(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        self.each_job(request, lambda job: self.ctl.queue.release(job, who))
        self.ctx.kick()
        return JSONResponse({"ok": True})

    async def update(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, UpdateBody)
        changes = body.model_dump(exclude_none=True)
        self.each_job(request, lambda job: self.ctx.perform(self.ctl.queue.update(job, who, changes)))
        self.ctx.kick()
        return JSONResponse({"ok": True})

    async def requeue(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, RequeueBody)
        self.each_job(request, lambda job: self.ctx.perform(self.ctl.queue.requeue_job(job, who, body.hold)))
        self.ctx.kick()
        return JSONResponse({"ok": True})

    async def suspend(self, request: Request) -> JSONResponse:
        """``scontrol suspend`` (``/suspend``) and ``scontrol resume`` (``/resume``)."""
        who = self.caller(request)
        op = self.ctl.suspensions.resume if request.url.path.endswith("/resume") else self.ctl.suspensions.suspend
        self.each_job(request, lambda job: self.ctx.perform(op(job, who)))
        return JSONResponse({"ok": True})


def job_routes(
    ctx: Context,
    caller: Callable[[Request], Identity],
    parse: Parse,
    handler: Handler,
    private: PrivateData,
    listing: JobListing,
) -> list[Route]:
    jobs = JobRoutes(ctx, caller, parse, private, listing)
    return [
        Route("/v1/jobs", handler(jobs.submit), methods=["POST"]),
        Route("/v1/jobs", handler(jobs.list_jobs), methods=["GET"]),
        Route("/v1/jobs/signal", handler(jobs.signal_jobs), methods=["POST"]),
        Route("/v1/jobs/{job_id}", handler(jobs.get_job), methods=["GET"]),
        Route("/v1/jobs/{job_id}/hang_evidence", handler(jobs.hang_evidence), methods=["GET"]),
        Route("/v1/jobs/{job_id}/hold", handler(jobs.hold), methods=["POST"]),
        Route("/v1/jobs/{job_id}/release", handler(jobs.release), methods=["POST"]),
        Route("/v1/jobs/{job_id}/update", handler(jobs.update), methods=["POST"]),
        Route("/v1/jobs/{job_id}/requeue", handler(jobs.requeue), methods=["POST"]),
        Route("/v1/jobs/{job_id}/suspend", handler(jobs.suspend), methods=["POST"]),
        Route("/v1/jobs/{job_id}/resume", handler(jobs.suspend), methods=["POST"]),
    ]
