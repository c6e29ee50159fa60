"""Reaching the active controller when there are several (``SlurmctldHost`` listed more than once).

Each controller is tried in the configuration's order, starting with the one that answered
last: through its Unix socket when it runs on this host, else over TCP. A controller that
does not answer, or answers 503 "Slurm backup controller in standby mode", passes the turn to
the next (one that accepts but does not answer, after ``MessageTimeout``); rounds repeat
until one answers or ``SlurmctldTimeout`` has passed (a backup takes over within that time).

A request that may have reached a controller that then died is sent again only when doing so
cannot repeat its effect: reads, and submissions, which carry an ``X-Muster-Request`` token
that the controller keeps with the jobs it created (a retry gets the same job id back). Any
other change whose answer was lost fails with the error, as in Slurm.
"""

from __future__ import annotations

import os

STANDBY_CODE = "standby"
REQUEST_HEADER = "X-Muster-Request"
_ROUND_PAUSE = 0.2

_last = [0]  # the controller that answered last, in this process

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    ClientSettings = Any  # cli.common's (which imports this module when it is needed)


def targets(settings: ClientSettings) -> list[tuple[str | None, tuple[str, int] | None]]:
    """How to reach each controller, the primary first: (Unix socket, None) or (None, TCP address)."""
    out: list[tuple[str | None, tuple[str, int] | None]] = []
    for i, (_host, addr) in enumerate(settings.controllers):
        sock = settings.ctld_socket_for(i)
        out.append((sock, None) if os.path.exists(sock) else (None, (addr, settings.ctld_port)))
    return out


def repeatable(method: str, path: str) -> bool:
    """Whether sending this request twice has the effect of sending it once: reads, long
    polls for an allocation, submissions (their token)."""
    path = path.split("?")[0]
    return method == "GET" or (method == "POST" and (path == "/v1/jobs" or path.endswith("/await")))


def call_active(
    settings: ClientSettings,
    method: str,
    path: str,
    body: Any,
    timeout: float,
    agent_credential: Callable[[Any], str | None],
    proof: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The answer of the active controller (see the module's docstring); ``agent_credential``
    proves the caller over TCP (``cli.common``'s), unless ``proof`` (a JWT's headers, from
    musterrestd) proves it on any transport."""
    import time

    from muster.protocol.client import ApiError, ConnectError, request

    ways = targets(settings)
    # A controller that accepts but does not answer (stopped, hung) is given MessageTimeout,
    # as Slurm's commands give each controller, before the next is tried; plus the time a
    # long poll (``{"wait": seconds}``: srun's step, salloc's allocation) asks it to hold.
    held = body.get("wait") if isinstance(body, dict) else None
    held = float(held) if isinstance(held, int | float) else 0.0
    timeout = min(timeout, settings.message_timeout + held)
    token = os.urandom(16).hex() if method == "POST" else None
    again = repeatable(method, path)
    deadline = time.monotonic() + settings.slurmctld_timeout
    tls_ca = None
    last: Exception | None = None
    while True:
        for k in range(len(ways)):
            index = (_last[0] + k) % len(ways)
            unix_path, address = ways[index]
            headers = {REQUEST_HEADER: token} if token else {}
            if proof is not None:
                headers.update(proof)
            elif address is not None:
                credential = agent_credential(settings)  # good for one request only
                if credential:
                    headers["X-Muster-Credential"] = credential
            if address is not None and tls_ca is None:
                tls_ca = settings.tls_ca or ""
            try:
                answer = request(
                    method,
                    path,
                    body,
                    unix_path=unix_path,
                    address=address,
                    headers=headers or None,
                    timeout=timeout,
                    tls=(tls_ca, "ctld") if address is not None and tls_ca else None,
                )
            except ConnectError as e:
                if e.sent and not again:
                    raise
                last = e
                continue
            except ApiError as e:
                if e.status != 503 or e.code != STANDBY_CODE:
                    _last[0] = index
                    raise
                last = e
                continue
            _last[0] = index
            return answer if isinstance(answer, dict) else {}
        if time.monotonic() >= deadline:
            assert last is not None
            raise last
        time.sleep(_ROUND_PAUSE)
