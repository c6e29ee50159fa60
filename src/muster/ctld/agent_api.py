"""The agents' door to the controller: registrations, heartbeats (one node's, or a batch of
the nodes one agent process hosts, ``agent.host``) and reports of ended runs. Every request
is signed by its node (a batch by the hostlist of its nodes: ``api.signed_body`` refuses a
heartbeat for a node its sender does not name); ``agents`` and ``launches`` decide.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.errors import MusterError
from muster.ctld.commits import GroupCommit
from muster.ctld.context import Context
from muster.ctld.unlaunched import relaunch_unlaunched
from muster.ctld.wire import message
from muster.protocol.messages import Heartbeat, Heartbeats, JobsDone
from muster.protocol.versions import peer_protocol

__all__ = ["build_agent_routes"]


def build_agent_routes(
    ctx: Context,
    signed_body: Callable[[Request], Awaitable[dict[str, Any]]],
    handler: Callable[[Any], Any],
    ended: GroupCommit,
) -> list[Route]:
    """``ended`` commits the reports of ended runs in groups (``commits``)."""
    ctl = ctx.controller

    def heartbeat(msg: Heartbeat) -> tuple[int, dict[str, Any]]:
        ctl.liveness.loop_tick()  # a stall just ended must not count as this node's silence
        try:
            answer = ctl.agents.heartbeat(msg)
        except MusterError as e:
            return 404, {"error": str(e), "code": "not_found"}
        if msg.faults or msg.health is not None:
            ctx.perform(ctl.agents.node_faults(msg))
            ctx.kick()
        # a start a previous controller committed and never sent: sent now (``unlaunched``)
        ctx.perform(relaunch_unlaunched(ctl, msg.node, msg.running, msg.ended))
        return 200, answer

    @handler
    async def agent_register(request: Request) -> JSONResponse:
        body = await signed_body(request)  # its protocol is in range (``signing.check_protocol``)
        answer = ctl.agents.register(body, peer_protocol(request.headers))
        ctx.kick()
        return JSONResponse(answer)

    @handler
    async def agent_heartbeat(request: Request) -> JSONResponse:
        msg = message(Heartbeat, await signed_body(request))  # read once; a misfit is a 400
        status, answer = heartbeat(msg)
        return JSONResponse(answer, status_code=status)

    @handler
    async def agent_heartbeats(request: Request) -> JSONResponse:
        """Each heartbeat of the batch is answered as if it came alone, in order; an
        answer with a ``status`` of 400 or more is that node's refusal."""
        batch = message(Heartbeats, await signed_body(request))
        answers = []
        for msg in batch.heartbeats:
            status, answer = heartbeat(msg)
            answers.append(answer if status == 200 else {**answer, "status": status})
        return JSONResponse({"answers": answers})

    @handler
    async def agent_job_done(request: Request) -> JSONResponse:
        body = await signed_body(request)
        ctx.perform(await ended.submit(body))  # committed with the reports that came with it
        ctx.kick()
        return JSONResponse({"ok": True})

    @handler
    async def agent_jobs_done(request: Request) -> JSONResponse:
        """Several reports of one agent: committed in one group, answered once all are. A
        report that fails fails the answer (the agent then sends them one by one; the
        others, committed, change nothing the second time)."""
        body = await signed_body(request)
        message(JobsDone, body)  # a misfit is a 400
        results = await ended.submit_many(body["reports"])
        failed = None
        for result in results:
            if isinstance(result, BaseException):
                failed = failed or result
            else:
                ctx.perform(result)
        ctx.kick()
        if failed is not None:
            raise failed
        return JSONResponse({"ok": True, "acknowledged": len(results)})

    return [
        Route("/v1/agent/register", agent_register, methods=["POST"]),
        Route("/v1/agent/heartbeat", agent_heartbeat, methods=["POST"]),
        Route("/v1/agent/heartbeats", agent_heartbeats, methods=["POST"]),
        Route("/v1/agent/job_done", agent_job_done, methods=["POST"]),
        Route("/v1/agent/jobs_done", agent_jobs_done, methods=["POST"]),
    ]
