"""Requests counted by message type and by user, as sdiag's "Remote Procedure Call
statistics" show them: an ASGI wrapper around the controller's app.

A request's type is Slurm's name for the message it stands for (``REQUEST_JOB_INFO`` for
``GET /v1/jobs``, ``REQUEST_SUBMIT_BATCH_JOB`` for ``POST /v1/jobs``, ...), or, for a
route Slurm has no message for, ``METHOD /path`` with the route's template. The user is
the identity the route proved (``api.IDENTITY_KEY``), else the Unix socket's peer (its
uid, from the kernel); agents' requests count under ``SlurmUser``. Probes and scrapes (``/metrics``, ``/livez``...) are not counted.
"""

from __future__ import annotations

import pwd
from typing import Any

from muster.core.clock import Clock
from muster.ctld.stats import ServerStats
from muster.protocol.httpd import PEER_KEY

__all__ = ["MESSAGE_TYPES", "RpcStats", "message_type"]

# (method, route template) -> Slurm's message name and number (slurm_protocol_defs.h).
MESSAGE_TYPES: dict[tuple[str, str], tuple[str, int]] = {
    ("GET", "/v1/ping"): ("REQUEST_PING", 1008),
    ("POST", "/v1/agent/register"): ("MESSAGE_NODE_REGISTRATION_STATUS", 1002),
    ("GET", "/v1/config"): ("REQUEST_BUILD_INFO", 2001),
    ("GET", "/v1/jobs"): ("REQUEST_JOB_INFO", 2003),
    ("GET", "/v1/nodes"): ("REQUEST_NODE_INFO", 2007),
    ("GET", "/v1/partitions"): ("REQUEST_PARTITION_INFO", 2009),
    ("GET", "/v1/jobs/{job_id}"): ("REQUEST_JOB_INFO_SINGLE", 2021),
    ("GET", "/v1/reservations"): ("REQUEST_RESERVATION_INFO", 2024),
    ("GET", "/v1/diag"): ("REQUEST_STATS_INFO", 2035),
    ("POST", "/v1/diag/reset"): ("REQUEST_STATS_INFO", 2035),
    ("POST", "/v1/jobs/{job_id}/update"): ("REQUEST_UPDATE_JOB", 3001),
    ("POST", "/v1/jobs/{job_id}/hold"): ("REQUEST_UPDATE_JOB", 3001),
    ("POST", "/v1/jobs/{job_id}/release"): ("REQUEST_UPDATE_JOB", 3001),
    ("POST", "/v1/nodes/update"): ("REQUEST_UPDATE_NODE", 3002),
    ("POST", "/v1/jobs"): ("REQUEST_SUBMIT_BATCH_JOB", 4003),
    ("POST", "/v1/agent/job_done"): ("REQUEST_COMPLETE_BATCH_SCRIPT", 5018),
    ("POST", "/v1/agent/jobs_done"): ("REQUEST_COMPLETE_BATCH_SCRIPT", 5018),
    ("POST", "/v1/jobs/{job_id}/requeue"): ("REQUEST_JOB_REQUEUE", 5023),
    ("POST", "/v1/jobs/signal"): ("REQUEST_KILL_JOB", 5032),
}
_NOT_COUNTED = ("/metrics", "/livez", "/readyz", "/healthz")
_IDENTITY_KEY = "muster.identity"  # api.IDENTITY_KEY (not imported: api imports this package's peers)


def message_type(method: str, template: str) -> tuple[str, int]:
    """The message a request stands for: Slurm's name and number, or ``("METHOD /path", 0)``."""
    return MESSAGE_TYPES.get((method, template)) or (f"{method} {template}", 0)


class RpcStats:
    """Times every request and hands it to ``ServerStats.observe_rpc``."""

    def __init__(self, app: Any, stats: ServerStats, clock: Clock, slurm_user: tuple[str, int] = ("root", 0)) -> None:
        self.app = app
        self.stats = stats
        self.clock = clock
        self.slurm_user = slurm_user
        self._names: dict[int, str] = {}

    @property
    def routes(self) -> Any:
        """The wrapped app's routes (what the OpenAPI description and its tests read)."""
        return self.app.routes

    def _user_name(self, uid: int) -> str:
        name = self._names.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)
            if len(self._names) < 65536:
                self._names[uid] = name
        return name

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"].startswith(_NOT_COUNTED):
            await self.app(scope, receive, send)
            return
        t0 = self.clock.monotonic()
        try:
            await self.app(scope, receive, send)
        finally:
            route = scope.get("route")
            # a path no route matched counts under one name: raw paths would let anyone
            # grow the table (and the metric's label values) without bound
            template = getattr(route, "path", None) or "(no route)"
            name, number = message_type(scope["method"], template)
            who = scope.get(_IDENTITY_KEY)
            peer = scope.get(PEER_KEY)
            if who is not None:
                user, uid = who.user, who.uid
            elif peer is not None:  # a route that did not need to ask who calls: the kernel says
                uid = int(peer[1])
                user = self._user_name(uid)
            elif template.startswith("/v1/agent/"):
                user, uid = self.slurm_user
            else:
                user = uid = None
            self.stats.observe_rpc(name, number, user, uid, self.clock.monotonic() - t0)
