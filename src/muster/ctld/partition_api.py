"""The requests that make and remove partitions at run time: ``scontrol create
PartitionName=...`` and ``scontrol delete PartitionName=...`` (``ctld.partitions`` keeps them).

Creating or deleting applies the new configuration as ``scontrol reconfigure`` does (plan,
then swap, with no ``await`` between), once the list of kept lines is committed: a refused
plan or a failed commit changes nothing. Only administrators may (Slurm's ``Invalid user
id`` for others).

=========================================  =================================================
``POST /v1/partitions``                    ``{"name", "params": {key: value}}`` ->
                                           ``{"name"}``; the keys are partition keys of
                                           slurm.conf(5) (``Nodes``, ``MaxTime``, ``State``,
                                           ``Default``, ...)
``POST /v1/partitions/{name}/delete``      ``{}`` -> ``{"ok": true}``; refused while pending
                                           or running jobs, or reservations, use it
                                           (``Partition is in use``) and for a partition
                                           the configuration file defines
=========================================  =================================================
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.config import Config, ConfigError, add_partitions
from muster.core.errors import InvalidRequest, PermissionDenied
from muster.core.hostlist import HostlistError, expand
from muster.ctld.context import Context
from muster.ctld.identity import Identity
from muster.ctld.partitions import META_KEY, WHERE, created_lines, line_of, name_of
from muster.ctld.reconfig import apply_plan, in_use
from muster.ctld.reconfig_plan import plan, validate

if TYPE_CHECKING:
    from starlette.requests import Request

    from muster.ctld.state import ClusterState

__all__ = ["PartitionBody", "build_partition_routes", "create", "delete"]

log = logging.getLogger("musterctld")


class PartitionBody(BaseModel):
    """``scontrol create PartitionName=NAME Key=Value ...``: the keys as slurm.conf spells them."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=255)
    params: dict[str, str] = Field(default_factory=dict, max_length=100)


def _apply(ctl: ClusterState, fresh: Config, lines: list[str]) -> None:
    """Plan ``fresh`` against memory, commit ``lines``, then swap memory to ``fresh``."""
    problems = validate(fresh)
    if problems:
        raise InvalidRequest("; ".join(problems))
    p = plan(ctl.config, fresh, in_use(ctl))
    if not p.ok:
        raise InvalidRequest("; ".join(p.refusals))
    ctl.store.set_meta(META_KEY, json.dumps(lines))
    apply_plan(ctl, p)


def create(ctl: ClusterState, who: Identity, name: str, params: dict[str, str]) -> Config:
    """Make partition ``name``; the configuration now in force."""
    if not who.admin:
        raise PermissionDenied("Invalid user id")
    line = line_of(name, params)
    if ctl.config.partition(name) is not None:
        raise InvalidRequest("Invalid partition name specified")
    nodes = next((v for k, v in params.items() if k.lower() == "nodes"), "")
    if nodes and nodes.upper() != "ALL":
        try:
            names = expand(nodes)
        except HostlistError:
            raise InvalidRequest("Invalid node name specified") from None
        if any(ctl.config.node(n) is None for n in names):
            raise InvalidRequest("Invalid node name specified")
    try:
        fresh = add_partitions(ctl.config, [line], WHERE)
    except ConfigError as e:
        raise InvalidRequest(str(e).removeprefix(f"{WHERE}:1: ")) from None
    lines = [*(x for x in created_lines(ctl.store) if name_of(x) != name), line]
    _apply(ctl, fresh, lines)
    log.info("partition %s created by %s: %s", name, who.user, line)
    return fresh


def delete(ctl: ClusterState, who: Identity, name: str) -> Config:
    """Remove partition ``name`` (one made at run time); the configuration now in force."""
    if not who.admin:
        raise PermissionDenied("Invalid user id")
    if ctl.config.partition(name) is None:
        raise InvalidRequest("Invalid partition name specified")
    lines = created_lines(ctl.store)
    kept = [x for x in lines if name_of(x) != name]
    if len(kept) == len(lines):
        raise InvalidRequest(
            f"Partition {name} is defined in {ctl.config.path}: remove it there and run scontrol reconfigure"
        )
    use = in_use(ctl)
    if use.partition_jobs.get(name) or any(part == name for part, _nodes in use.reservations.values()):
        raise InvalidRequest("Partition is in use")
    fresh = Config(
        ctl.config.path,
        ctl.config.settings,
        ctl.config.nodes,
        [p for p in ctl.config.partitions if p.name != name],
        ctl.config.warnings,
        ctl.config.ctld_hosts,
    )
    fresh.topology = ctl.config.topology
    _apply(ctl, fresh, kept)
    log.info("partition %s deleted by %s", name, who.user)
    return fresh


def build_partition_routes(
    ctx: Context,
    caller: Callable[[Request], Identity],
    handler: Callable[[Any], Any],
) -> list[Route]:
    @handler
    async def create_partition(request: Request) -> JSONResponse:
        who = caller(request)
        try:
            body = PartitionBody.model_validate(json.loads(await request.body() or b"{}"))
        except (ValueError, ValidationError) as e:
            raise InvalidRequest(f"invalid request: {e}") from None
        # Synchronous from here to the swap: no other request or pass runs in between.
        applied = create(ctx.controller, who, body.name, dict(body.params))
        ctx.use_config(applied)
        ctx.kick()
        return JSONResponse({"name": body.name})

    @handler
    async def delete_partition(request: Request) -> JSONResponse:
        who = caller(request)
        applied = delete(ctx.controller, who, request.path_params["name"])
        ctx.use_config(applied)
        ctx.kick()
        return JSONResponse({"ok": True})

    return [
        Route("/v1/partitions", create_partition, methods=["POST"]),
        Route("/v1/partitions/{name}/delete", delete_partition, methods=["POST"]),
    ]
