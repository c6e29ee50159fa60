"""``scontrol reconfigure``: the controller re-reads its configuration file.

Slurm's slurmctld re-reads slurm.conf on reconfigure and applies what it can while jobs keep
running. muster reads the file again, refuses it (and keeps the running configuration) when
it no longer parses, and otherwise answers which settings differ from the running ones. It
applies none of them in place: nodes, partitions and daemon settings are fixed for the life
of a musterctld, so a change is reported as needing a restart (``muster down``/``up`` or a
restart of musterctld). Running and pending jobs are untouched either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.config import Config, ConfigError, parse_config
from muster.core.errors import InvalidRequest, PermissionDenied
from muster.ctld.context import Context
from muster.ctld.identity import Identity

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.requests import Request


def differences(running: Config, fresh: Config) -> list[str]:
    """The names of what ``fresh`` changes: settings by key, then nodes and partitions."""
    out = []
    keys = set(running.settings) | set(fresh.settings)
    for key in sorted(keys, key=str.lower):
        if running.settings.get(key) != fresh.settings.get(key):
            out.append(key)
    if _records(running.nodes) != _records(fresh.nodes):
        out.append("NodeName")
    if _records(running.partitions) != _records(fresh.partitions):
        out.append("PartitionName")
    return out


def _records(records: Any) -> list[str]:
    return sorted(repr(r) for r in records)  # the records' repr names every field


def reread(running: Config) -> dict[str, Any]:
    """Read the file ``running`` came from again: ``{"changed": [...]}`` (empty when it is
    as it was). Raises ``InvalidRequest`` with the file's complaint when it does not parse."""
    try:
        with open(running.path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InvalidRequest(f"Unable to read {running.path}: {e.strerror}") from None
    try:
        fresh = parse_config(text, running.path)
    except ConfigError as e:
        raise InvalidRequest(str(e)) from None
    return {"changed": differences(running, fresh)}


def build_reconfig_routes(
    ctx: Context,
    caller: Callable[[Request], Identity],
    handler: Callable[[Any], Any],
) -> list[Route]:
    @handler
    async def reconfigure(request: Request) -> JSONResponse:
        who = caller(request)
        if not who.admin:
            raise PermissionDenied("Access/permission denied")
        return JSONResponse(reread(ctx.controller.config))

    return [Route("/v1/reconfigure", reconfigure, methods=["POST"])]
