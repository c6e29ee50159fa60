"""musterd's HTTP face: the signed API for the controller, the credential socket for users.

One ASGI application serves both listening sockets and tells them apart by the peer
credentials that ``protocol.httpd`` puts in the scope:

* **TCP** (NodeAddr:Port): only requests the controller signed with the cluster key *for
  this node*. The signature covers the method, the raw path *with* its query string, the
  body, the time/nonce headers and the sender and receiver names; a request from anyone
  but ``ctld``, addressed to another node, replayed (even across a restart of this agent:
  see ``protocol.replay``) or unsigned is answered 401 before any route runs, with one
  log line naming what was refused. With ``TLSType=tls/muster`` the port speaks TLS and a
  signed request must come over a connection whose client certificate is the controller's.

  ==========================  ==============================================================
  ``POST /v1/launch``         ``{"job", "cluster", "ctld", "kill_wait"}`` -> ``{"ok": true}``
                              once the script runs; otherwise 500 ``{"error", "code":
                              "launch_failed"}``, and a ``job_done`` report (exit code 1,
                              ``reason``) has already been saved for delivery
  ``POST /v1/launches``       ``{"launches": [<launch>...]}`` (one pass's launches to this
                              node) -> ``{"answers": [...]}``: each launch's answer as
                              above, in order, a failure with its ``"status"``
  ``POST /v1/preflight``      ``<launch>`` (muster's: a ``--preflight`` job's node that is not
                              its batch host) -> ``{"ok", "reason"}``: the pre-flight gate's
                              verdict here (``agent.preflight``), before the launch
  ``POST /v1/signal``         ``{"job_id", "signal", "batch_only"}`` -> ``{"ok": true}``
  ``POST /v1/hang_evidence``  ``{"job_id"}`` -> ``{"ok": true, "processes": n}``: the
                              controller judged the job hung; the evidence of each of its
                              processes here (``agent.hangevidence``; SIGUSR1 only to those
                              that catch it) goes with the next heartbeat
  ``POST /v1/terminate``      ``{"job_id", "reason", "kill_wait", "restart_count"?}`` ->
                              ``{"ok": true, "running": bool}``
  ``POST /v1/allocation``     ``AllocationRequest`` (muster's: a failed node of a running
                              job was replaced) -> ``{"ok": true, "running": bool}``
  ``POST /v1/update``         ``{"job_id", "time_limit"}`` (muster's addition: a new limit
                              for a running job) -> ``{"ok": true, "running": bool}``
  ``POST /v1/suspend``        ``{"job_id", "suspend"}`` (``scontrol suspend``/``resume``):
                              the job frozen or thawed here (``agent.suspend``) ->
                              ``{"ok": true, "how": "freezer"|"SIGSTOP"}``; 404 when
                              nothing of the job is here
  ``POST /v1/step_stats``     ``{"job_id"}`` -> ``{"node", "steps": [{"step", "tasks": [{"task",
                              "pids", "rss_kb", "vmsize_kb", "cpu_s", "pages", "read_bytes",
                              "write_bytes"}]}]}``: what the job's running steps (and its
                              batch script, step ``batch``) use here now (sstat,
                              ``agent.stepstats``); 404 ``invalid_job_id`` if none runs here
  ``GET /v1/status``          ``{"node", "running": [job_id], "attempts": [[id, restarts]],
                              "pending_reports": n, "registered": bool}``
  ``POST /v1/register``       ``{"controller": index}`` -> ``{"ok": true}``: a controller that
                              just started or took over asks the agent to register with it
                              now (``controller``: its index among the SlurmctldHost lines)
                              rather than at its next heartbeat
  ``GET /openapi.json``       these routes as OpenAPI 3.1 (``agent.openapi``)
  ==========================  ==============================================================

  ``/v1/signal`` for a job that does not run here answers 404 ``invalid_job_id``.
  ``/v1/signal`` and ``/v1/terminate`` reach the job's steps here too (``agent.steps``);
  ``POST /v1/step_signal`` ``{"job_id", "attempt", "step_id", "signal", "kill"}`` signals or
  stops one step (``scancel N.S``).

  ``/v1/steps/*`` (srun launching, feeding and signalling job steps) is the one exception to
  the signature rule: those requests carry a step credential the controller signed instead
  (see ``muster.agent.stepapi``).

* **Unix socket** (``<AgentSocketDir>/musterd-<node>.sock``, mode 0666):
  ``POST /v1/credential``, which vouches for the connecting process's uid/gid as the kernel
  reports them (SO_PEERCRED): ``{"credential": "..."}``; and, for a root peer only,
  ``POST /v1/adopt`` ``{"user", "pid"}`` (``muster-adopt``, ``agent.adopt``) ->
  ``{"job_id": N|null, "contained": bool, "reason"?}``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
import ssl
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.agent import hangevidence, stepstats
from muster.agent.adopt import Adoption
from muster.agent.limits import parse_signal
from muster.agent.openapi import openapi_route
from muster.agent.progress import progress_dir, save_allocation, save_deadline, save_evidence, stacks_path
from muster.agent.stepapi import StepApi
from muster.agent.steps import StepRunner
from muster.agent.supervisor import LaunchError, Supervisor
from muster.core.clock import Clock
from muster.core.hostlist import compress
from muster.protocol.httpd import (
    PEER_KEY,
    TLS_PEER_KEY,
    SignatureError,
    Verifier,
    read_body,
    refusal,
    send_json,
)
from muster.protocol.messages import (
    AllocationRequest,
    LaunchRequest,
    LaunchRequests,
    M,
    MessageError,
    RegisterAgainRequest,
    SignalRequest,
    StepSignalRequest,
    SuspendRequest,
    TerminateRequest,
    UpdateRequest,
    read,
)
from muster.protocol.replay import GrantLedger
from muster.protocol.signing import CTLD, make_credential

__all__ = ["build_app"]

log = logging.getLogger(__name__)

ASGIApp = Callable[..., Any]


def _error(message: str, code: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message, "code": code}, status_code=status)


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except (ValueError, RecursionError):
        raise _BadRequest("request body is not JSON") from None
    if not isinstance(body, dict):
        raise _BadRequest("request body must be a JSON object")
    return body


class _BadRequest(Exception):
    pass


def _job_id(body: dict[str, Any]) -> int:
    try:
        return int(body["job_id"])
    except (KeyError, TypeError, ValueError):
        raise _BadRequest("job_id must be an integer") from None


def _message(model: type[M], body: dict[str, Any]) -> M:
    """The controller's request as its typed model (``protocol.messages``), or a 400."""
    try:
        return read(model, body)
    except MessageError as exc:
        raise _BadRequest(str(exc)) from None


def _handler(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
    async def wrapped(request: Request) -> JSONResponse:
        try:
            return await fn(request)  # type: ignore[no-any-return]
        except _BadRequest as exc:
            return _error(str(exc), "invalid", 400)

    return wrapped


def build_routes(
    supervisor: Supervisor,
    status_extra: Callable[[], dict[str, Any]],
    steps: StepRunner | None = None,
    contact: Callable[[int | None], None] | None = None,
) -> list[Route]:
    node = supervisor.node

    @_handler
    async def launch(request: Request) -> JSONResponse:
        msg = _message(LaunchRequest, await _json_body(request))
        try:
            await supervisor.launch(msg.job.model_dump(), msg.kill_wait)
        except LaunchError as exc:
            return JSONResponse({"error": str(exc), "code": "launch_failed", "fault": exc.fault}, status_code=500)
        return JSONResponse({"ok": True})

    @_handler
    async def preflight(request: Request) -> JSONResponse:
        """The pre-flight gate here for a job whose batch host is another node (the
        controller asks each of its nodes before the launch; ``agent.preflight``)."""
        msg = _message(LaunchRequest, await _json_body(request))
        verdict = await supervisor.preflight_check(msg.job.model_dump(), msg.allreduce)
        # ``peer``: only the all-reduce failed, waiting on its peers (``agent.allreduce``)
        return JSONResponse({"ok": verdict.ok, "reason": verdict.reason, "peer": getattr(verdict, "peer", False)})

    @_handler
    async def launches(request: Request) -> JSONResponse:
        """Several launches at once (one scheduling pass's to this node), each answered as
        ``/v1/launch`` would have answered it, with its status, in order."""
        msg = _message(LaunchRequests, await _json_body(request))

        async def one(req: LaunchRequest) -> dict[str, Any]:
            try:
                await supervisor.launch(req.job.model_dump(), req.kill_wait)
            except LaunchError as exc:
                return {"error": str(exc), "code": "launch_failed", "fault": exc.fault, "status": 500}
            return {"ok": True}

        return JSONResponse({"answers": list(await asyncio.gather(*(one(r) for r in msg.launches)))})

    @_handler
    async def signal_job(request: Request) -> JSONResponse:
        msg = _message(SignalRequest, await _json_body(request))
        try:
            sig = parse_signal(msg.signal)
        except ValueError as exc:
            raise _BadRequest(str(exc)) from None
        if msg.deadline is not None:
            _save_deadline(msg.job_id, msg.deadline)
        # The batch host's supervisor signals the batch script's processes but the shell
        # (srun forwards to its tasks on every node); otherwise the step runner signals the
        # steps it runs without an srun to forward (an allocation's). Each task: once.
        if sig in (signal.SIGSTOP, signal.SIGCONT) and not msg.batch_only and not msg.whole_job:
            # scancel --signal=STOP: a stopped srun forwards nothing, so every task here
            # gets it from the agent (the job shows STOPPED meanwhile: ctld.jobs)
            step_pids = set().union(*steps.job_members(msg.job_id).values()) if steps is not None else set()
            found = supervisor.stop_tasks(msg.job_id, sig, step_pids)
        else:
            found = supervisor.signal(msg.job_id, sig, msg.batch_only, msg.whole_job)
        if not found and steps is not None and not msg.batch_only:
            found = steps.signal(msg.job_id, sig)
        if not found:
            return _error(f"job {msg.job_id} is not running on {node}", "invalid_job_id", 404)
        return JSONResponse({"ok": True})

    def _save_deadline(job_id: int, deadline: float) -> None:
        """A preempted job's deadline, for each attempt of it that runs here, where
        ``muster.progress.preempt_deadline()`` reads it (before the signal that warns it)."""
        attempts = set()
        t = supervisor.jobs.get(job_id)
        if t is not None:
            attempts.add(t.restart_count)
        if steps is not None:
            attempts.update(steps.job_members(job_id))
        for attempt in attempts:
            try:
                save_deadline(supervisor.state.root, job_id, attempt, deadline)
            except OSError as exc:  # the signal still goes: the job is warned all the same
                log.warning("job %s: cannot write its preemption deadline: %s", job_id, exc.strerror or exc)

    collecting: set[asyncio.Task[None]] = set()

    @_handler
    async def hang_evidence(request: Request) -> JSONResponse:
        msg = _message(SignalRequest, await _json_body(request))
        found: dict[int, set[int]] = {}  # attempt -> its processes here
        t = supervisor.jobs.get(msg.job_id)
        if t is not None:
            found.setdefault(t.restart_count, set()).update(supervisor._members(t))  # noqa: SLF001
        if steps is not None:
            for attempt, pids in steps.job_members(msg.job_id).items():
                found.setdefault(attempt, set()).update(pids)
        if not found:
            return _error(f"job {msg.job_id} is not running on {node}", "invalid_job_id", 404)
        attempt = max(found)
        pids = found[attempt] - {os.getpid()}
        root = supervisor.state.root
        stacks = stacks_path(os.path.join(progress_dir(root), f"{msg.job_id}.{attempt}"))

        async def collect() -> None:
            try:
                evidence = await asyncio.to_thread(hangevidence.collect, pids, stacks)
                save_evidence(root, msg.job_id, attempt, evidence)
            except Exception:  # evidence is best effort: never the agent's end
                log.exception("job %s: hang evidence failed", msg.job_id)

        task = asyncio.create_task(collect(), name=f"evidence-{msg.job_id}")
        collecting.add(task)
        task.add_done_callback(collecting.discard)
        return JSONResponse({"ok": True, "processes": len(pids)})

    @_handler
    async def terminate(request: Request) -> JSONResponse:
        msg = _message(TerminateRequest, await _json_body(request))
        running = supervisor.terminate(msg.job_id, msg.reason, msg.kill_wait, msg.restart_count)
        if steps is not None:
            steps.terminate(msg.job_id, msg.reason, msg.kill_wait, msg.restart_count)
        if not running and supervisor.hooks is not None and msg.job is not None and msg.restart_count is not None:
            # The job's end reaches a node that runs no batch script of it: its Epilog here
            # (the batch host runs it when the script ends).
            supervisor.spawn(
                supervisor.hooks.epilog_once(
                    {**msg.job.model_dump(), "job_id": msg.job_id, "restart_count": msg.restart_count}
                )
            )
        return JSONResponse({"ok": True, "running": running})

    @_handler
    async def step_signal(request: Request) -> JSONResponse:
        msg = _message(StepSignalRequest, await _json_body(request))
        job_id, step_id = msg.job_id, msg.step_id
        try:
            sig = parse_signal(msg.signal)
        except ValueError as exc:
            raise _BadRequest(str(exc)) from None
        if steps is None or not steps.signal_step(job_id, msg.attempt, step_id, sig, msg.kill):
            return _error(f"step {job_id}.{step_id} is not running on {node}", "invalid_job_id", 404)
        return JSONResponse({"ok": True})

    @_handler
    async def allocation(request: Request) -> JSONResponse:
        """A failed node of a job running here was replaced (``ctld.replacement``): the
        batch host's record takes the new allocation, and each attempt of the job here finds
        it beside its progress file (``muster.progress.allocation()``)."""
        msg = _message(AllocationRequest, await _json_body(request))
        alloc = [a.model_dump() for a in msg.alloc]
        running = supervisor.new_allocation(msg.job_id, msg.attempt, alloc)
        here = running or (steps is not None and msg.attempt in steps.job_members(msg.job_id))
        if here:
            nodes = [a["node"] for a in alloc]
            data = {
                "job_id": msg.job_id,
                "attempt": msg.attempt,
                "nodes": nodes,
                "nodelist": compress(nodes),
                "replaced": {"old": msg.old, "new": msg.new, "cause": msg.cause, "time": msg.time},
            }
            try:
                save_allocation(supervisor.state.root, msg.job_id, msg.attempt, data)
            except OSError as exc:
                log.warning("job %s: cannot write its new allocation: %s", msg.job_id, exc.strerror or exc)
        return JSONResponse({"ok": True, "running": bool(here)})

    @_handler
    async def update(request: Request) -> JSONResponse:
        msg = _message(UpdateRequest, await _json_body(request))
        running = supervisor.update(msg.job_id, msg.time_limit)
        return JSONResponse({"ok": True, "running": running})

    @_handler
    async def suspend_job(request: Request) -> JSONResponse:
        msg = _message(SuspendRequest, await _json_body(request))
        step_pids: set[int] = set()
        if steps is not None:
            for pids in steps.job_members(msg.job_id).values():
                step_pids |= pids
            steps.suspend(msg.job_id, msg.suspend)  # their own time limits pause too
        how = supervisor.suspend(msg.job_id, msg.suspend, step_pids)
        if how is None:
            return _error(f"job {msg.job_id} is not running on {node}", "invalid_job_id", 404)
        return JSONResponse({"ok": True, "how": how})

    async def status(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "node": node,
                "running": supervisor.running(),
                "attempts": supervisor.running_attempts(),
                **status_extra(),
            }
        )

    @_handler
    async def step_stats(request: Request) -> JSONResponse:
        msg = _message(SignalRequest, await _json_body(request))  # {"job_id"} is all it reads
        t = supervisor.jobs.get(msg.job_id)
        batch = supervisor._members(t) if t is not None else None  # noqa: SLF001
        found = await asyncio.to_thread(
            stepstats.job_stats,
            msg.job_id,
            list(steps.steps.values()) if steps is not None else [],
            batch,
            (t.pid or 0) if t is not None else 0,
            memory=functools.partial(supervisor.cgroups.memory, msg.job_id) if supervisor.cgroups is not None else None,
        )
        if not found:
            return _error(f"job {msg.job_id} is not running on {node}", "invalid_job_id", 404)
        return JSONResponse({"node": node, "steps": found})

    @_handler
    async def register_again(request: Request) -> JSONResponse:
        msg = _message(RegisterAgainRequest, await _json_body(request))
        if contact is not None:
            contact(msg.controller)
        return JSONResponse({"ok": True})

    return [
        Route("/v1/launch", launch, methods=["POST"]),
        Route("/v1/launches", launches, methods=["POST"]),
        Route("/v1/preflight", preflight, methods=["POST"]),
        Route("/v1/signal", signal_job, methods=["POST"]),
        Route("/v1/hang_evidence", hang_evidence, methods=["POST"]),
        Route("/v1/terminate", terminate, methods=["POST"]),
        Route("/v1/update", update, methods=["POST"]),
        Route("/v1/allocation", allocation, methods=["POST"]),
        Route("/v1/suspend", suspend_job, methods=["POST"]),
        Route("/v1/step_signal", step_signal, methods=["POST"]),
        Route("/v1/step_stats", step_stats, methods=["POST"]),
        Route("/v1/status", status, methods=["GET"]),
        Route("/v1/register", register_again, methods=["POST"]),
    ]


def credential_app(key: bytes, node: str, clock: Clock, adoption: Adoption | None = None) -> Starlette:
    async def credential(request: Request) -> JSONResponse:
        peer = request.scope.get(PEER_KEY)
        if not peer:
            return _error("credentials are only issued on the local socket", "auth", 403)
        _, uid, gid = peer
        return JSONResponse({"credential": make_credential(key, uid, gid, node, clock.now())})

    async def adopt(request: Request) -> JSONResponse:
        """``muster-adopt`` (root, from sshd's PAM stack): ``{"user", "pid"}`` -> the job
        ``pid`` now belongs to, or ``{"job_id": null, "reason"}`` (``agent.adopt``)."""
        peer = request.scope.get(PEER_KEY)
        if not peer or peer[1] != 0:
            return _error("only root may have a process adopted into a job", "auth", 403)
        try:
            body = json.loads(await request.body() or b"{}")
            user, pid = str(body["user"]), int(body["pid"])
        except (ValueError, KeyError, TypeError):
            return _error('expected {"user": NAME, "pid": N}', "invalid", 400)
        if adoption is None or pid <= 1:
            return _error("nothing to adopt into here", "invalid", 400)
        try:
            return JSONResponse(adoption.adopt(user, pid))
        except OSError as exc:
            return _error(f"cannot adopt process {pid}: {exc.strerror or exc}", "adopt_failed", 500)

    return Starlette(
        routes=[
            Route("/v1/credential", credential, methods=["POST"]),
            Route("/v1/adopt", adopt, methods=["POST"]),
        ]
    )


class _SignedOnly:
    """Let through only requests signed with the cluster key (401 otherwise)."""

    def __init__(self, app: ASGIApp, verifier: Verifier) -> None:
        self.app = app
        self.verifier = verifier

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string") or b""
        target = (path + b"?" + query if query else path).decode("latin-1")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            sender = self.verifier.verify(scope["method"], target, body, headers, scope.get(TLS_PEER_KEY))
            if sender != CTLD:
                raise SignatureError(f"message from {sender}: agents take orders from {CTLD} only")
        except SignatureError as exc:
            client = scope.get("client") or ("?", 0)
            log.warning(
                "refused %s %s from %s (sender %s, receiver %s) at %s: %s",
                scope["method"],
                target,
                client[0],
                headers.get("x-muster-from", "-"),
                headers.get("x-muster-to", "-"),
                self.verifier.name,
                exc,
            )
            await send_json(send, getattr(exc, "status", 401), refusal(exc))
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            message: dict[str, Any] = await receive()
            return message

        await self.app(scope, replay, send)


async def _send_metrics(body: bytes, send: Any) -> None:
    headers = [
        (b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_app(
    supervisor: Supervisor,
    key: bytes,
    clock: Clock,
    lifespan: Any = None,
    status_extra: Callable[[], dict[str, Any]] = dict,
    steps: StepRunner | None = None,
    metrics: Callable[[], bytes] | None = None,
    require_cert: bool = False,
    relay_tls: ssl.SSLContext | None = None,
    contact: Callable[[int | None], None] | None = None,
) -> ASGIApp:
    """The ASGI app for both sockets (see the module docstring). ``metrics``: the text of
    ``GET /metrics`` (``agent.metrics``), served without a signature when the site enabled it;
    ``require_cert``: orders must come over TLS from the controller's certificate
    (``TLSType=tls/muster``); ``relay_tls``: how this agent reaches the agents it relays step
    launches to (``agent.steptree``)."""
    routes = build_routes(supervisor, status_extra, steps, contact)
    routes.append(openapi_route(routes))  # GET /openapi.json, signed like the rest
    # The replay floor lives in the agent's own 0700 state directory (protocol.replay).
    floor = os.path.join(supervisor.state.root, "replay-floor")
    verifier = Verifier(key, clock, supervisor.node, floor, require_cert=require_cert)
    signed = _SignedOnly(Starlette(routes=routes), verifier)
    if steps is not None:
        steps.replay = verifier.guard
        # a step grant is admitted once, across restarts too (protocol.replay.GrantLedger)
        steps.grants = GrantLedger(os.path.join(supervisor.state.root, "step-grants"), clock.now())
    local = credential_app(key, supervisor.node, clock, Adoption(supervisor, steps))
    outer = Starlette(lifespan=lifespan)
    step_api = StepApi(steps, relay_tls) if steps is not None else None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await outer(scope, receive, send)
        elif metrics is not None and scope["type"] == "http" and scope["path"] == "/metrics":
            await _send_metrics(metrics(), send)
        elif scope.get(PEER_KEY):
            await local(scope, receive, send)
        elif step_api is not None and scope["type"] == "http" and scope["path"].startswith("/v1/steps/"):
            await step_api(scope, receive, send)  # authorized by step credentials, not signatures
        else:
            await signed(scope, receive, send)

    return app
