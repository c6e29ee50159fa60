"""Serving the API from the daemons: uvicorn on our own sockets, with peer credentials.

Only the daemons import this module (it pulls in uvicorn, starlette and httpx); the
commands never do.

* ``serve(app, sockets)`` runs an ASGI app on already-bound sockets (TCP and/or Unix).
* On a Unix socket each connection's peer uid/gid/pid (SO_PEERCRED) is placed in the ASGI
  scope as ``scope["muster.peer"] = (pid, uid, gid)``: this is how a user's identity is
  proven rather than claimed. TCP connections carry no peer credentials.
* ``SignedClient`` is the daemons' client: every request is signed with the cluster key.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
from typing import Any

import httpx
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from muster.core.clock import Clock
from muster.protocol.signing import ReplayGuard, SignatureError, sign_request, verify_request

PEER_KEY = "muster.peer"


def peer_credentials(sock: socket.socket) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the process at the other end of a Unix socket (Linux)."""
    if sock.family != socket.AF_UNIX or not hasattr(socket, "SO_PEERCRED"):
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class _PeerCredProtocol(H11Protocol):
    """uvicorn's h11 protocol, plus the peer's credentials in every request's scope."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        creds = peer_credentials(sock) if sock is not None else None
        inner = self.app

        async def app_with_peer(scope: Any, receive: Any, send: Any) -> None:
            scope[PEER_KEY] = creds
            await inner(scope, receive, send)

        self.app = app_with_peer
        super().connection_made(transport)


def bind_tcp(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(False)
    return sock


def bind_unix(path: str, mode: int = 0o666) -> socket.socket:
    """A Unix socket anyone may connect to: identity comes from SO_PEERCRED, not access."""
    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, mode)
    sock.listen(1024)
    return sock


def make_server(app: Any, log_level: str = "warning") -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        http=_PeerCredProtocol,
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=30,
    )
    return uvicorn.Server(config)


async def read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


class Verifier:
    """Checks signed daemon requests (time window + nonce replay + HMAC)."""

    def __init__(self, key: bytes, clock: Clock) -> None:
        self.key = key
        self.clock = clock
        self.guard = ReplayGuard()

    def verify(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> None:
        verify_request(self.key, method, path, body, headers, self.clock.now(), self.guard)


class SignedClient:
    """An async JSON client whose requests the other daemons will accept."""

    def __init__(self, key: bytes, clock: Clock, timeout: float = 10.0) -> None:
        self.key = key
        self.clock = clock
        self._client = httpx.AsyncClient(timeout=timeout)

    async def post(self, url: str, body: dict[str, Any]) -> Any:
        payload = json.dumps(body, separators=(",", ":")).encode()
        path = httpx.URL(url).raw_path.decode()
        headers = sign_request(self.key, "POST", path, payload, self.clock.now())
        headers["content-type"] = "application/json"
        resp = await self._client.post(url, content=payload, headers=headers)
        try:
            data = resp.json() if resp.content else None
        except ValueError:
            if resp.status_code < 400:
                raise
            data = None
        if resp.status_code >= 400:
            msg = data.get("error") if isinstance(data, dict) else resp.text
            raise DaemonRequestError(resp.status_code, str(msg), data)
        return data

    async def get(self, url: str) -> Any:
        path = httpx.URL(url).raw_path.decode()
        headers = sign_request(self.key, "GET", path, b"", self.clock.now())
        resp = await self._client.get(url, headers=headers)
        if resp.status_code >= 400:
            raise DaemonRequestError(resp.status_code, resp.text)
        return resp.json()

    async def aclose(self) -> None:
        await self._client.aclose()


class DaemonRequestError(Exception):
    """The other daemon answered with an error; ``data`` is its JSON answer, if any."""

    def __init__(self, status: int, message: str, data: Any = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.data = data if isinstance(data, dict) else {}


__all__ = [
    "PEER_KEY",
    "SignatureError",
    "SignedClient",
    "DaemonRequestError",
    "Verifier",
    "bind_tcp",
    "bind_unix",
    "make_server",
    "peer_credentials",
    "read_body",
]
