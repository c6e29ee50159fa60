"""HTTP routes for job steps and interactive allocations (srun, salloc, squeue -s).

Validation and authorization only, as in ``api``; ``StepBook`` decides. Two routes long-poll
(``wait`` seconds at most, 300): a step that must wait for its job to start, or for other
steps to free resources, is answered as soon as it is placed, and otherwise with
``{"pending": ...}`` when the wait is over, for the command to print a note and ask again.

==========================================  ==================================================
``POST /v1/jobs/{id}/steps``                ``{"request": StepRequest, "name", "argv",
                                            "srun_host", "srun_pid", "wait", "busy_now"}`` ->
                                            ``{"step", "nodes", "grant", "sig", "kill_wait",
                                            "slurmd_timeout", "tree_width", "message_timeout"}``
                                            or ``{"pending": "job"|"step", "reason"}``
``POST /v1/jobs/{id}/steps/{step}/done``    ``{"exit_code", "signal", "cancelled", "end_job", "usage", "oom_kills"}``
                                            -> ``{"ok": true}``
``POST /v1/jobs/{id}/steps/{step}/signal``  ``{"signal": name or number, or null to cancel}``
                                            -> ``{"ok": true}`` (``scancel N.S``)
``POST /v1/jobs/{id}/await``                ``{"wait"}`` -> ``{"job": JobWire}`` once it runs,
                                            or ``{"pending": "job", "reason"}``
``POST /v1/jobs/{id}/complete``             ``{"exit_code", "signal"}`` (an interactive job's
                                            holder releases it) -> ``{"ok": true}``
``POST /v1/jobs/{id}/steps/{step}/watch``   ``{}`` -> ``{"step", "nodes", "tasks", "watch", "sig",
                                            "message_timeout"}``: sattach's signed watch of a
                                            running step (the job's user, root, SlurmUser)
``POST /v1/steps/no_allocate``, ``.../done``  srun -Z's step without a job (``ctld.noalloc``)
``GET /v1/steps?job_id=1,2&user=a``         ``{"steps": [StepWire], "now"}``: running steps,
                                            each batch job's ``N.batch`` first
``GET /v1/jobs/{id}/stats?node=N``          ``{"job_id", "nodes": {node: [{"step", "tasks":
                                            [{"task", "pids", "rss_kb", ...}]}]}, "errors":
                                            {node: text}}``: what the running job's steps use
                                            now on each of its nodes (or node ``N``), asked of
                                            the agents at once (sstat, ``scontrol listpids``;
                                            ``agent.stepstats``)
``POST /v1/agent/step_gone`` (signed)       ``{"node", "job_id", "attempt", "step_id",
                                            "exit_code", "signal"}``: a step whose srun went
                                            away has ended on that node -> ``{"ok": true}``
==========================================  ==================================================
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.errors import AuthError, InvalidJobId, InvalidRequest
from muster.core.gpubind import GpuBindError, parse_gpu_bind
from muster.core.states import JobState
from muster.core.steps import StepRejected, StepRequest, StepWait
from muster.ctld.actions import parse_signal
from muster.ctld.context import Context
from muster.ctld.identity import Identity
from muster.ctld.noalloc import NoAllocSteps
from muster.ctld.privacy import PrivateData
from muster.ctld.wire import job_wire
from muster.protocol.httpd import TLS_PEER_KEY, SignatureError

if TYPE_CHECKING:
    from muster.core.job import Job

MAX_WAIT = 20.0  # a long poll answers "still pending" at least this often; its caller asks again
POLL = 0.5  # seconds between re-checks while waiting (a cancel is seen this fast)


class StepRequestModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_nodes: int | None = Field(None, ge=1)
    ntasks: int | None = Field(None, ge=1)
    ntasks_per_node: int | None = Field(None, ge=1)
    cpus_per_task: int = Field(1, ge=1)
    gpus_per_task: int | None = Field(None, ge=0)
    gpus_per_node: int | None = Field(None, ge=0)
    gpus: int | None = Field(None, ge=0)
    distribution: str = Field("block", pattern="^(block|cyclic|arbitrary)$")
    exclusive: bool = False
    overlap: bool = False
    overcommit: bool = False
    nodelist: list[str] = []
    exclude: list[str] = []
    task_nodes: list[str] = Field([], max_length=100_000)  # -m arbitrary: each task's node
    gpu_bind: str | None = Field(None, max_length=4096)
    time_limit: int | None = Field(None, ge=1)


class StepBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request: StepRequestModel = Field(default_factory=StepRequestModel)  # type: ignore[arg-type]
    name: str = Field("", max_length=1024)
    argv: list[str] = []
    srun_host: str = Field("", max_length=255)
    srun_pid: int = 0
    wait: float = Field(0.0, ge=0)
    busy_now: bool = False  # answer at once when the step must wait for other steps


class StepUsage(BaseModel):
    """What a step's tasks used (getrusage of each task and the children it waited for)."""

    model_config = ConfigDict(extra="forbid")
    max_rss_kb: int = Field(ge=0)
    max_rss_node: str = Field("", max_length=255)
    max_rss_task: int = Field(0, ge=0)
    ave_rss_kb: float = Field(ge=0)
    user_cpu: float = Field(ge=0)
    system_cpu: float = Field(ge=0)


class DoneBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exit_code: int = Field(0, ge=0, le=255)
    signal: int = Field(0, ge=0, le=128)
    cancelled: bool = False
    end_job: bool = False
    usage: StepUsage | None = None
    oom_kills: int = Field(0, ge=0)  # OOM kills in its tasks' cgroups: OUT_OF_MEMORY


class StepSignalBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    signal: str | int | None = None  # None: cancel the step


class NoAllocBody(BaseModel):
    """srun -Z's step without a job (``ctld.noalloc``)."""

    model_config = ConfigDict(extra="forbid")
    nodes: list[str] = Field([], max_length=100_000)
    ntasks: int | None = Field(None, ge=1)
    ntasks_per_node: int | None = Field(None, ge=1)
    cpus_per_task: int = Field(1, ge=1)
    name: str | None = Field(None, max_length=1024)
    argv: list[str] = []
    workdir: str = Field("", max_length=4096)
    srun_host: str = Field("", max_length=255)


class AwaitBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    wait: float = Field(0.0, ge=0)


class CompleteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exit_code: int = Field(0, ge=0, le=255)
    signal: int = Field(0, ge=0, le=128)


class GoneBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str
    job_id: int
    attempt: int = 0
    step_id: int
    exit_code: int = 0
    signal: int = 0


async def parse_raw(raw: bytes, model: type[BaseModel]) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(json.loads(raw or b"{}"))
    except (ValueError, ValidationError) as e:
        raise InvalidRequest(f"invalid request: {e}") from None


def _revoked(job: Job) -> InvalidRequest:
    if job.start_time is None:
        return InvalidRequest(f"Job allocation {job.job_id} has been revoked")
    return InvalidRequest("Job/step already completing or completed")


class StepRoutes:
    """The step routes' handlers, over the controller's ``StepBook`` and srun -Z's steps."""

    def __init__(
        self,
        ctx: Context,
        caller: Callable[[Request], Identity],
        parse: Callable[[Request, type[BaseModel]], Any],
        private: PrivateData | None,
    ) -> None:
        self.ctx = ctx
        self.ctl = ctx.controller
        self.book = ctx.steps
        self.unallocated = NoAllocSteps(self.ctl, self.book.key)  # srun --no-allocate (ctld.noalloc)
        self.caller = caller
        self.parse = parse
        self.private = private

    def job_of(self, request: Request) -> Job:
        try:
            return self.ctl.queue.get_job(int(request.path_params["job_id"]))
        except ValueError:
            raise InvalidJobId() from None

    async def create_step(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, StepBody)
        job = self.job_of(request)
        self.book.check_owner(job, who)
        self.book.watch(job)
        try:
            step_request = StepRequest.from_dict(body.request.model_dump())
            if ":" in (step_request.gpu_bind or ""):  # an older srun sent only the word before ':'
                parse_gpu_bind(step_request.gpu_bind)
        except (StepRejected, GpuBindError) as e:
            raise InvalidRequest(str(e)) from None
        deadline = self.ctx.clock.monotonic() + min(body.wait, MAX_WAIT)
        while True:
            changed = self.book.changed()  # before the check: see StepBook's docstring
            if job.state is JobState.PENDING:
                pending = {"pending": "job", "reason": str(job.reason), "job_id": job.job_id}
            elif self.ctl.training.replacements.holds_steps(job.job_id):  # a node swapped in, still gated
                pending = {"pending": "step", "reason": "a replacement node's pre-flight", "job_id": job.job_id}
                if body.busy_now:
                    return JSONResponse(pending)
            elif job.state is JobState.RUNNING and not job.completing:
                outcome = self.book.create(job, who, step_request, body.name, body.argv, body.srun_host, body.srun_pid)
                if not isinstance(outcome, StepWait):
                    return JSONResponse(self.book.answer(job, outcome))
                pending = {"pending": "step", "reason": outcome.reason, "job_id": job.job_id}
                if body.busy_now:
                    return JSONResponse(pending)  # the caller tells its user, then asks again
            else:
                raise _revoked(job)
            left = deadline - self.ctx.clock.monotonic()
            if left <= 0:
                return JSONResponse(pending)
            await self.book.wait(changed, min(left, POLL))
            job = self.ctl.jobs.get(job.job_id) or job

    async def step_done(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, DoneBody)
        job = self.job_of(request)
        try:
            step_id = int(request.path_params["step_id"])
        except ValueError:
            raise InvalidRequest(f"Invalid job step id: {request.path_params['step_id']}") from None
        actions = self.book.finish(
            job,
            who,
            step_id,
            body.exit_code,
            body.signal,
            body.cancelled,
            body.end_job,
            body.usage.model_dump() if body.usage is not None else None,
            body.oom_kills,
        )
        self.ctx.perform(actions)
        if body.end_job:
            self.ctx.kick()
        return JSONResponse({"ok": True})

    async def signal_step(self, request: Request) -> JSONResponse:

        who = self.caller(request)
        body = await self.parse(request, StepSignalBody)
        job = self.job_of(request)
        try:
            step_id = int(request.path_params["step_id"])
        except ValueError:
            raise InvalidRequest(f"Invalid job step id: {request.path_params['step_id']}") from None
        sig = parse_signal(body.signal) if body.signal is not None else None
        self.ctx.perform(self.book.signal_step(job, who, step_id, sig))
        return JSONResponse({"ok": True})

    async def await_job(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, AwaitBody)
        job = self.job_of(request)
        self.book.check_owner(job, who)
        self.book.watch(job)
        deadline = self.ctx.clock.monotonic() + min(body.wait, MAX_WAIT)
        while True:
            changed = self.book.changed()
            if job.state is JobState.RUNNING and not job.completing:
                return JSONResponse({"job": job_wire(job, self.ctx.clock.now())})
            if job.state is not JobState.PENDING:
                raise _revoked(job)
            left = deadline - self.ctx.clock.monotonic()
            if left <= 0:
                return JSONResponse({"pending": "job", "reason": str(job.reason), "job_id": job.job_id})
            await self.book.wait(changed, min(left, POLL))
            job = self.ctl.jobs.get(job.job_id) or job

    async def complete(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, CompleteBody)
        job = self.job_of(request)
        self.ctx.perform(self.book.complete_allocation(job, who, body.exit_code, body.signal))
        self.ctx.kick()
        return JSONResponse({"ok": True})

    async def list_steps(self, request: Request) -> JSONResponse:
        ids = request.query_params.get("job_id")
        users = request.query_params.get("user")
        try:
            job_ids = [int(i) for i in ids.split(",") if i] if ids else None
        except ValueError:
            raise InvalidJobId() from None
        jobs = self.ctl.queue.select_jobs(job_ids, [u for u in users.split(",") if u] if users else None)
        jobs = [j for j in jobs if j.state is JobState.RUNNING]
        if self.private is not None:
            jobs = self.private.jobs(jobs, self.caller(request))
        return JSONResponse({"steps": self.book.listing(jobs), "now": self.ctx.clock.now()})

    async def watch_step(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        job = self.job_of(request)
        try:
            step_id = int(request.path_params["step_id"])
        except ValueError:
            raise InvalidJobId() from None
        return JSONResponse(self.book.watch_answer(job, who, step_id))

    async def job_stats(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        job = self.job_of(request)
        self.book.check_owner(job, who)
        if job.state is not JobState.RUNNING:
            raise InvalidRequest(f"job {job.job_id} is not running")
        nodes = list(job.nodes)
        wanted = request.query_params.get("node")
        if wanted:
            if wanted not in nodes:
                raise InvalidRequest(f"job {job.job_id} does not run on node {wanted}")
            nodes = [wanted]

        async def one(node: str) -> tuple[str, Any]:
            try:
                return node, await self.ctx.ask_agent(node, "/v1/step_stats", {"job_id": job.job_id})
            except Exception as exc:  # noqa: BLE001 - one silent node must not hide the others
                return node, exc

        found: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for node, answer in await asyncio.gather(*(one(n) for n in nodes)):
            if isinstance(answer, dict):
                found[node] = answer.get("steps") or []
            elif answer is None:
                errors[node] = "its agent is too old to say"
            elif getattr(answer, "status", None) == 404:
                found[node] = []  # nothing of the job runs there now
            else:
                errors[node] = str(answer) or type(answer).__name__
        return JSONResponse({"job_id": job.job_id, "nodes": found, "errors": errors})

    async def step_gone(self, request: Request) -> JSONResponse:
        raw = await request.body()
        path = request.scope["path"]
        if request.scope.get("query_string"):
            path += "?" + request.scope["query_string"].decode()
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            sender = self.ctx.verifier.verify(request.method, path, raw, headers, request.scope.get(TLS_PEER_KEY))
        except SignatureError as e:
            raise AuthError(f"unauthenticated daemon request: {e}") from None
        body = await parse_raw(raw, GoneBody)
        if body.node != sender:
            raise AuthError(f"unauthenticated daemon request: message from {sender} speaks for node {body.node}")
        self.book.gone(body.job_id, body.attempt, body.step_id, body.node, body.exit_code, body.signal)
        self.ctx.perform(self.unallocated.gone(body.job_id, body.node))
        return JSONResponse({"ok": True})

    async def no_allocate(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, NoAllocBody)
        return JSONResponse(self.unallocated.answer(who, body.model_dump()))

    async def no_allocate_done(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        try:
            job_id = int(request.path_params["job_id"])
        except ValueError:
            raise InvalidJobId() from None
        self.ctx.perform(self.unallocated.done(who, job_id))
        return JSONResponse({"ok": True})


def build_step_routes(
    ctx: Context,
    caller: Callable[[Request], Identity],
    parse: Callable[[Request, type[BaseModel]], Any],
    handler: Callable[[Any], Any],
    private: PrivateData | None = None,
) -> list[Route]:
    steps = StepRoutes(ctx, caller, parse, private)
    return [
        Route("/v1/agent/step_gone", handler(steps.step_gone), methods=["POST"]),
        Route("/v1/jobs/{job_id}/steps", handler(steps.create_step), methods=["POST"]),
        Route("/v1/jobs/{job_id}/steps/{step_id}/done", handler(steps.step_done), methods=["POST"]),
        Route("/v1/jobs/{job_id}/steps/{step_id}/signal", handler(steps.signal_step), methods=["POST"]),
        Route("/v1/jobs/{job_id}/steps/{step_id}/watch", handler(steps.watch_step), methods=["POST"]),
        Route("/v1/jobs/{job_id}/await", handler(steps.await_job), methods=["POST"]),
        Route("/v1/jobs/{job_id}/stats", handler(steps.job_stats), methods=["GET"]),
        Route("/v1/jobs/{job_id}/complete", handler(steps.complete), methods=["POST"]),
        Route("/v1/steps", handler(steps.list_steps), methods=["GET"]),
        Route("/v1/steps/no_allocate", handler(steps.no_allocate), methods=["POST"]),
        Route("/v1/steps/no_allocate/{job_id}/done", handler(steps.no_allocate_done), methods=["POST"]),
    ]
