"""musterrestd's ``slurm`` routes about the cluster: ping (every ``SlurmctldHost`` where there
are several), diag, nodes and a node's update, partitions, reservations, shares."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse

from muster.client.controller import user_credential
from muster.client.settings import ClientSettings
from muster.rest import layout
from muster.rest.routes.kit import Kit, RestError


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


class ClusterRoutes:
    """The cluster routes' handlers."""

    def __init__(self, kit: Kit) -> None:
        self.kit = kit

    async def ping(self, req: Request) -> JSONResponse:
        if len(self.kit.settings.ctld_hosts) > 1:  # each controller, as scontrol ping shows them
            await self.kit.ctld(req, "GET", "/v1/ping")  # the caller proven by the active one
            return self.kit.answer(req, pings=await asyncio.to_thread(_pings, self.kit.settings, self.kit.clock))
        started = self.kit.clock.monotonic()
        await self.kit.ctld(req, "GET", "/v1/ping")
        latency = int((self.kit.clock.monotonic() - started) * 1e6)  # microseconds, as Slurm reports it
        host = self.kit.settings.ctld_host
        return self.kit.answer(req, pings=[{"hostname": host, "pinged": "UP", "latency": latency, "mode": "primary"}])

    async def diag(self, req: Request) -> JSONResponse:
        conf = await self.kit.ctld(req, "GET", "/v1/config")
        jobs = await self.kit.ctld(req, "GET", "/v1/jobs?view=brief")
        now = float(conf.get("now") or 0)
        stats = layout.diag(jobs.get("jobs") or [], now, float(conf.get("boot_time") or 0))
        return self.kit.answer(req, statistics=stats)

    def node_list(self, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "nodes": [layout.node(n, self.kit.cluster) for n in data.get("nodes") or []],
            "last_update": layout.epoch(data.get("now")),
        }

    async def nodes(self, req: Request) -> JSONResponse:
        return self.kit.answer(req, self.node_list(await self.kit.ctld(req, "GET", "/v1/nodes")))

    async def node(self, req: Request) -> JSONResponse:
        name = req.path_params["node_name"]
        data = await self.kit.ctld(req, "GET", "/v1/nodes?" + urlencode({"name": name}))
        if not data.get("nodes"):
            raise RestError(404, f"Invalid node name specified: {name}", "not_found")
        shown = self.node_list(data)
        for out, raw in zip(shown["nodes"], data["nodes"], strict=True):
            out["failures"] = raw.get("failures") or []  # muster's: the failure ledger's latest records
        return self.kit.answer(req, shown)

    async def update_node(self, req: Request) -> JSONResponse:
        name = req.path_params["node_name"]
        body = await self.kit.json_body(req)
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
        await self.kit.ctld(
            req, "POST", "/v1/nodes/update", {"names": [name], "state": states[0] if states else None, "reason": reason}
        )
        return self.kit.answer(req)

    def partition_list(self, data: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        parts = [p for p in data.get("partitions") or [] if name is None or p.get("name") == name]
        if name is not None and not parts:
            raise RestError(404, f"Invalid partition name specified: {name}", "invalid_partition")
        return {
            "partitions": [layout.partition(p, self.kit.cluster) for p in parts],
            "last_update": layout.epoch(data.get("now")),
        }

    async def partitions(self, req: Request) -> JSONResponse:
        return self.kit.answer(req, self.partition_list(await self.kit.ctld(req, "GET", "/v1/partitions")))

    async def partition(self, req: Request) -> JSONResponse:
        data = await self.kit.ctld(req, "GET", "/v1/partitions")
        return self.kit.answer(req, self.partition_list(data, req.path_params["partition_name"]))

    async def reservations(self, req: Request) -> JSONResponse:
        data = await self.kit.ctld(req, "GET", "/v1/reservations")
        out = [layout.reservation(r) for r in data.get("reservations") or []]
        return self.kit.answer(req, reservations=out, last_update=layout.epoch(data.get("now")))

    async def reservation(self, req: Request) -> JSONResponse:
        name = req.path_params["reservation_name"]
        data = await self.kit.ctld(req, "GET", "/v1/reservations")
        out = [layout.reservation(r) for r in data.get("reservations") or [] if r.get("name") == name]
        if not out:
            raise RestError(404, f"Reservation {name} not found", "not_found")
        return self.kit.answer(req, reservations=out, last_update=layout.epoch(data.get("now")))

    async def shares(self, req: Request) -> JSONResponse:
        data = await self.kit.ctld(req, "GET", "/v1/accounting/shares")
        return self.kit.answer(req, shares=layout.shares(data.get("rows") or [], self.kit.cluster))
