"""HTTP routes for watching the controller: ``/metrics``, ``/livez``, ``/readyz``,
``/healthz`` and what ``sdiag`` asks.

| method, path | who | answer |
|---|---|---|
| ``GET /metrics`` | anyone, when ``MetricsType=metrics/openmetrics`` | every family, Prometheus text format |
| ``GET /metrics/{jobs,nodes,partitions,jobs-users-accts,scheduler,muster}`` | likewise | one section |
| ``GET /livez`` | anyone | 200 while the process answers |
| ``GET /readyz`` | anyone | 200 when the store is open and the loops run, else 503 |
| ``GET /healthz`` | anyone | 200 when ready and no stall is in progress, else 503 |
| ``GET /v1/diag`` | any user (a credential) | sdiag's figures |
| ``POST /v1/diag/reset`` | administrators | ``sdiag --reset`` |

The security model (docs/security.md, docs/metrics.md): a Prometheus scraper holds no
muster credential, so ``/metrics`` and the probes are served without one, as Slurm 25.11
serves them. ``/metrics`` is off unless the administrator sets ``MetricsType``; it names
nodes, partitions and counts, never a job's name, script or arguments; per-user and
per-account families are left out whenever ``PrivateData`` hides jobs, users or accounts
(and ``/metrics/jobs-users-accts`` answers 403). The probes say only ok or why not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from muster import __version__
from muster.core.errors import PermissionDenied
from muster.ctld.context import Context, Handler
from muster.ctld.liveness import STALL_SECONDS
from muster.ctld.metrics import SECTIONS, ControllerCollector
from muster.ctld.privacy import PrivateData

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.requests import Request

__all__ = ["METRICS_TYPES", "build_observe_routes", "metrics_enabled"]

METRICS_TYPES = ("metrics/openmetrics", "metrics/none")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metrics_enabled(config: Any) -> bool:
    return (config.get("MetricsType") or "").lower() == "metrics/openmetrics"


def build_observe_routes(ctx: Context, caller: Callable[[Request], Any], handler: Handler) -> list[Route]:
    ctl = ctx.controller
    private = PrivateData(ctl.config)
    user_labels = not (private.hidden & {"jobs", "users", "accounts"})
    collector = ControllerCollector(ctl, ctx.stats, user_labels=user_labels)

    async def metrics(request: Request) -> Response:
        if not metrics_enabled(ctl.config):
            return PlainTextResponse("metrics are disabled: MetricsType is not set\n", status_code=404)
        section = request.path_params.get("section")
        if section is None:
            sections: tuple[str, ...] = SECTIONS
        elif section not in SECTIONS:
            return PlainTextResponse(f"unknown metrics endpoint {section!r}\n", status_code=404)
        elif section == "jobs-users-accts" and not user_labels:
            return PlainTextResponse("per-user metrics are hidden by PrivateData\n", status_code=403)
        else:
            sections = (section,)
        return Response(collector.render(sections), media_type=CONTENT_TYPE)

    async def livez(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    def not_ready() -> str | None:
        if not ctx.store_open():
            return "the store is not open"
        stopped = ctx.loops_stopped()
        if stopped:
            return f"loops not running: {', '.join(stopped)}"
        return None

    async def readyz(request: Request) -> Response:
        why = not_ready()
        return PlainTextResponse(f"{why}\n" if why else "ok\n", status_code=503 if why else 200)

    async def healthz(request: Request) -> Response:
        why = not_ready()
        if why is None and ctl.last_tick is not None:
            lag = ctx.clock.monotonic() - ctl.last_tick
            if lag >= STALL_SECONDS:
                why = f"the controller's loop is stalled ({lag:.1f} s since it last ran)"
        return PlainTextResponse(f"{why}\n" if why else "ok\n", status_code=503 if why else 200)

    @handler
    async def diag(request: Request) -> JSONResponse:
        who = caller(request)
        out = ctx.stats.diag.to_dict()
        if private.hides("users", who) or private.hides("jobs", who):
            out["rpc_users"] = [r for r in out["rpc_users"] if r[1] == who.uid]
        jobs = ctl.jobs.values()
        out.update(
            now=ctx.clock.now(),
            controller_started=ctx.stats.started,
            backfilled_total=ctx.stats.backfilled_total,
            jobs_pending=sum(1 for j in jobs if str(j.state) == "PENDING"),
            jobs_running=sum(1 for j in jobs if str(j.state) == "RUNNING"),
            agent_queue=len(ctx.pending_actions()),
            server_tasks=ctx.server_tasks(),
            version=__version__,
        )
        return JSONResponse(out)

    @handler
    async def diag_reset(request: Request) -> JSONResponse:
        who = caller(request)
        if not who.admin:
            raise PermissionDenied()
        ctx.stats.reset(ctx.clock.now())
        return JSONResponse({"ok": True})

    return [
        Route("/metrics", metrics),
        Route("/metrics/{section}", metrics),
        Route("/livez", livez),
        Route("/readyz", readyz),
        Route("/healthz", healthz),
        Route("/v1/diag", diag),
        Route("/v1/diag/reset", diag_reset, methods=["POST"]),
    ]
