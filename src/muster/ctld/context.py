"""What the HTTP routes need of the running controller, as a protocol: ``app.CtldApp``
provides it, and the route modules (``api``, ``stepapi``, ``acct_api``) depend on this
contract instead of on the app that imports them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from muster.core.clock import Clock
from muster.core.config import Config
from muster.ctld.actions import Action
from muster.ctld.controller import Controller
from muster.ctld.dashview import Samples
from muster.ctld.stats import ServerStats
from muster.ctld.steps import StepBook
from muster.ctld.usercred import UserCredentials
from muster.protocol.httpd import Verifier

# A route's function, and the API's wrapper of one (``api.build_routes``'s ``handler``: the
# caller's checks, errors as Slurm's answers), which the other route modules are given.
Endpoint = Callable[[Request], Awaitable[Response]]
Handler = Callable[[Endpoint], Endpoint]


class Context(Protocol):
    controller: Controller
    steps: StepBook
    key: bytes
    clock: Clock
    verifier: Verifier
    credentials: UserCredentials  # the commands' credentials over TCP (agent-signed, MUNGE)
    hostname: str
    samples: Samples  # the dashboard's charts (``dashview``)
    stats: ServerStats

    def store_open(self) -> bool:
        """Whether the store is open (``/readyz``)."""

    def loops_stopped(self) -> list[str]:
        """The background loops not running (``/readyz``)."""

    def pending_actions(self) -> Any:
        """Actions handed to dispatch and not finished (sdiag's agent queue)."""

    def server_tasks(self) -> int:
        """Tasks on the event loop (sdiag's server thread count)."""

    def kick(self) -> None:
        """Ask for a scheduling pass as soon as possible."""

    def perform(self, actions: Sequence[Action]) -> None:
        """Hand actions to dispatch without waiting for them."""

    async def ask_agent(self, node: str, path: str, body: dict[str, Any]) -> Any:
        """A query to one node's agent, answered now (sstat): its answer; None where its
        protocol lacks the route; ``DaemonRequestError`` where it says no."""

    def use_config(self, config: Config) -> None:
        """Take a configuration ``scontrol reconfigure`` applied to the controller: what
        the app itself keeps of it (the scheduler's settings, the agents' client)."""
