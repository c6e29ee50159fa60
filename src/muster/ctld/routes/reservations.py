"""The controller's reservation routes (``scontrol create|update|delete|show reservation``):
list, create, update, delete; the changes are ``ctld.reservation_book``'s."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.hostlist import compress
from muster.ctld.bodies import ReservationBody
from muster.ctld.context import Context, Handler
from muster.ctld.identity import Identity
from muster.ctld.reservations import Reservation

Parse = Callable[[Request, type[BaseModel]], Awaitable[Any]]


class ReservationRoutes:
    """The reservation routes' handlers."""

    def __init__(self, ctx: Context, caller: Callable[[Request], Identity], parse: Parse) -> None:
        self.ctx = ctx
        self.ctl = ctx.controller
        self.caller = caller
        self.parse = parse

    def reservation_wire(self, res: Reservation) -> dict[str, Any]:
        now = self.ctx.clock.now()
        d = res.to_dict()
        nodes = [self.ctl.nodes[n] for n in res.nodes if n in self.ctl.nodes]
        d.update(
            nodelist=compress(res.nodes),
            node_cnt=len(res.nodes),
            core_cnt=sum(n.cpus for n in nodes),
            gpu_cnt=sum(n.gpus for n in nodes),
            state="ACTIVE" if res.active(now) else "INACTIVE",
        )
        return d

    async def list_reservations(self, request: Request) -> JSONResponse:
        out = [
            self.reservation_wire(r) for r in sorted(self.ctl.reservations.values(), key=lambda r: (r.start, r.name))
        ]
        return JSONResponse({"reservations": out, "now": self.ctx.clock.now()})

    async def create_reservation(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, ReservationBody)
        res = self.ctl.resv.create(who, body.model_dump())
        self.ctx.kick()
        return JSONResponse({"name": res.name, "reservation": self.reservation_wire(res)})

    async def update_reservation(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, ReservationBody)
        res = self.ctl.resv.update(who, request.path_params["name"], body.model_dump())
        self.ctx.kick()
        return JSONResponse({"name": res.name, "reservation": self.reservation_wire(res)})

    async def delete_reservation(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        self.ctl.resv.delete(who, request.path_params["name"])
        self.ctx.kick()
        return JSONResponse({"ok": True})


def reservation_routes(
    ctx: Context, caller: Callable[[Request], Identity], parse: Parse, handler: Handler
) -> list[Route]:
    resv = ReservationRoutes(ctx, caller, parse)
    return [
        Route("/v1/reservations", handler(resv.list_reservations), methods=["GET"]),
        Route("/v1/reservations", handler(resv.create_reservation), methods=["POST"]),
        Route("/v1/reservations/{name}/update", handler(resv.update_reservation), methods=["POST"]),
        Route("/v1/reservations/{name}/delete", handler(resv.delete_reservation), methods=["POST"]),
    ]
