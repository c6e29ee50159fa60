"""The controller's routes about the cluster itself: ping, the configuration (``scontrol
show config``), nodes (``sinfo``, ``scontrol show node``: in columns where the command asks,
``ctld.columns``; a node's failure-ledger records), node updates (``scontrol update node``)
and partitions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.topoconf import show_topology
from muster.ctld.bodies import NodeUpdateBody
from muster.ctld.columns import PartitionCache, jobs_by_node, node_rows
from muster.ctld.context import Context, Handler
from muster.ctld.identity import Identity
from muster.ctld.routes.params import query_list
from muster.ctld.wire import node_wire, partition_wire

# failure-ledger records shown per node by ``scontrol show node X``
FAILURES_SHOWN = 5

Parse = Callable[[Request, type[BaseModel]], Awaitable[Any]]


class ClusterRoutes:
    """The cluster routes' handlers; the partitions' node lists computed once per configuration."""

    def __init__(self, ctx: Context, caller: Callable[[Request], Identity], parse: Parse) -> None:
        self.ctx = ctx
        self.ctl = ctx.controller
        self.caller = caller
        self.parse = parse
        self.part_lists = PartitionCache()

    async def ping(self, request: Request) -> JSONResponse:
        return JSONResponse({"ok": True, "cluster": self.ctl.config.cluster_name, "now": self.ctx.clock.now()})

    async def update_nodes(self, request: Request) -> JSONResponse:
        who = self.caller(request)
        body = await self.parse(request, NodeUpdateBody)
        self.ctx.perform(self.ctl.liveness.update_nodes(who, body.names, body.state, body.reason))
        self.ctx.kick()
        return JSONResponse({"ok": True})

    async def list_nodes(self, request: Request) -> JSONResponse:
        names = query_list(request, "name")
        chosen = [n for n in self.ctl.nodes.values() if not names or n.name in names]
        fields = query_list(request, "fields")
        # partitions=1: the partitions too, as GET /v1/partitions gives them (sinfo: one request)
        extra = {"partitions": self.partitions()} if request.query_params.get("partitions") == "1" else {}
        if fields is not None:  # in columns, only what the command's format needs (ctld.columns)
            return JSONResponse(
                {**node_rows(chosen, fields, self.ctl.jobs.values()), **extra, "now": self.ctx.clock.now()}
            )
        jobs_on = jobs_by_node(self.ctl.jobs.values())
        nodes = [node_wire(n, jobs_on.get(n.name, [])) for n in chosen]
        if names:  # nodes asked for by name: their latest failure-ledger records too (scontrol show node X)
            for d in nodes:
                d["failures"] = [e.to_dict() for e in self.ctl.ledger.history(d["name"], FAILURES_SHOWN)]
        return JSONResponse({"nodes": nodes, **extra, "now": self.ctx.clock.now()})

    async def node_failures(self, request: Request) -> JSONResponse:
        """A node's failure-ledger records kept in memory, oldest first (docs/recovery.md)."""
        node = self.ctl.node(request.path_params["name"])
        history = [e.to_dict() for e in self.ctl.ledger.history(node.name)]
        return JSONResponse({"node": node.name, "failures": history, "now": self.ctx.clock.now()})

    def partitions(self) -> list[dict[str, Any]]:
        return [
            partition_wire(self.ctl.config, p.name, self.ctl.nodes, self.part_lists.lists)
            for p in self.ctl.config.partitions
        ]

    async def list_partitions(self, request: Request) -> JSONResponse:
        return JSONResponse({"partitions": self.partitions(), "now": self.ctx.clock.now()})

    async def config(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "settings": dict(self.ctl.config.settings),
                "now": self.ctx.clock.now(),
                "boot_time": self.ctl.started_at,
                "node_count": len(self.ctl.nodes),
                "topology": show_topology(self.ctl.config.topology) if self.ctl.config.topology is not None else None,
            }
        )


def cluster_routes(ctx: Context, caller: Callable[[Request], Identity], parse: Parse, handler: Handler) -> list[Route]:
    cluster = ClusterRoutes(ctx, caller, parse)
    return [
        Route("/v1/ping", handler(cluster.ping)),
        Route("/v1/nodes", handler(cluster.list_nodes)),
        Route("/v1/nodes/update", handler(cluster.update_nodes), methods=["POST"]),
        Route("/v1/nodes/{name}/failures", handler(cluster.node_failures)),
        Route("/v1/partitions", handler(cluster.list_partitions)),
        Route("/v1/config", handler(cluster.config)),
    ]
