"""The daemons' HTTP connections: uvicorn's HTTP/1.1 protocol, with the peer's identity.

Only the daemons import this module (through ``httpd``).

* HTTP/1.1 is parsed by httptools (llhttp, in C) where it is installed, else by h11 (pure
  Python; about 100 us more per request), with one line in the log saying so.
  ``MUSTER_HTTP=h11`` in a daemon's environment chooses h11 where both are installed.
* A request's head is bounded as h11 bounds it: httptools sets no bound of its own, so a
  client sending an endless URL or endless header lines would grow the daemon's memory.
  Past ``HEAD_LIMIT`` bytes of URL and headers (chunked trailers included) the request is
  answered 431 and its connection closed (h11 answers 400 there).
* On a Unix socket each connection's peer uid/gid/pid (SO_PEERCRED) is placed in the ASGI
  scope as ``scope["muster.peer"] = (pid, uid, gid)``: this is how a user's identity is
  proven rather than claimed. TCP connections carry no peer credentials.
* An idle connection is closed after the server's ``timeout_keep_alive`` from its start,
  not only after a response as uvicorn does (a connection that never sends a request).
* Over TLS each request's scope carries the verified peer certificate's name as
  ``scope["muster.tls_peer"]`` ("" for a TLS client without a certificate; absent on
  plain connections). ``TLSAcceptor`` does the handshakes (below).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
from collections.abc import Callable
from typing import Any, Protocol

from uvicorn.protocols.http.h11_impl import H11Protocol

from muster.protocol.tls import describe_failure, peer_name

try:
    import httptools  # noqa: F401  # what uvicorn's httptools protocol parses with
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: h11 serves (``protocol_class``)
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

log = logging.getLogger("muster.httpd")

PEER_KEY = "muster.peer"
TLS_PEER_KEY = "muster.tls_peer"
HANDSHAKE_TIMEOUT = 10.0  # seconds a TLS client may take to complete its handshake
HEAD_LIMIT = 16 * 1024  # bytes of a request's URL and headers (h11's own bound)


def peer_credentials(sock: socket.socket) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the process at the other end of a Unix socket (Linux)."""
    if sock.family != socket.AF_UNIX or not hasattr(socket, "SO_PEERCRED"):
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class _PeerCred:
    """Mixed into uvicorn's protocols: the peer's credentials in every request's scope."""

    app: Any
    # uvicorn's protocols' own (annotations only: nothing here hides theirs)
    loop: asyncio.AbstractEventLoop
    timeout_keep_alive: float
    timeout_keep_alive_task: asyncio.TimerHandle | None
    timeout_keep_alive_handler: Callable[[], None]

    def connection_made(self, transport: asyncio.Transport) -> None:
        sock = transport.get_extra_info("socket")
        creds = peer_credentials(sock) if sock is not None else None
        tls = transport.get_extra_info("ssl_object") is not None
        tls_peer = (peer_name(transport.get_extra_info("peercert")) or "") if tls else None
        inner = self.app

        async def app_with_peer(scope: Any, receive: Any, send: Any) -> None:
            scope[PEER_KEY] = creds
            if tls_peer is not None:
                scope[TLS_PEER_KEY] = tls_peer
            await inner(scope, receive, send)

        self.app = app_with_peer
        super().connection_made(transport)  # type: ignore[misc]
        # uvicorn arms its keep-alive timeout only once a response is complete: a client that
        # connects and never sends a request would hold its connection (and a file
        # descriptor) for ever. Armed here, it is disarmed by the first byte, as uvicorn does.
        if self.timeout_keep_alive_task is None and not transport.is_closing():
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )


class H11PeerProtocol(_PeerCred, H11Protocol):  # type: ignore[misc]  # a Transport, not a BaseTransport
    """uvicorn's h11 protocol (it bounds a head to 16 KiB itself: 400 beyond)."""


class HeadTooLarge(Exception):
    """A request's head grew past ``HEAD_LIMIT``."""


if HttpToolsProtocol is not None:

    class HttpToolsPeerProtocol(_PeerCred, HttpToolsProtocol):  # type: ignore[misc]  # as H11PeerProtocol
        """uvicorn's httptools protocol, its requests' heads bounded to ``HEAD_LIMIT``.

        What a request's head holds in memory is counted as it comes: the URL and each
        complete header as the parser hands them over, and the bytes of a header line still
        coming (the parser keeps those itself and says nothing until the line ends) as the
        bytes of reads in which the parser made no progress. A read in which a header ends
        may leave part of the next line uncounted: at most one read beyond the limit."""

        head_size = 0  # bytes of the current request's URL and complete headers
        pending = 0  # bytes read since the parser last made progress: a header line still coming
        progress = False
        refused = False

        def _grow(self, n: int) -> None:
            self.head_size += n
            self.pending = 0
            self.progress = True
            if self.head_size > HEAD_LIMIT:
                raise HeadTooLarge  # the parser turns this into an error: send_400_response

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return  # what came in the same read as the refusal
            self.progress = False
            super().data_received(data)
            if not self.progress and self.parser is not None:
                self.pending += len(data)
                if self.head_size + self.pending > HEAD_LIMIT:
                    self._refuse()

        def on_message_begin(self) -> None:
            self.head_size = self.pending = 0
            self.progress = True
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._grow(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._grow(len(name) + len(value) + 4)
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self.pending = 0
            self.progress = True
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self.pending = 0
            self.progress = True
            super().on_body(body)

        def send_400_response(self, msg: str) -> None:
            # uvicorn's answer to a parser error, HeadTooLarge raised in a callback included
            if self.head_size + self.pending > HEAD_LIMIT:
                self._refuse()
            else:
                super().send_400_response(msg)

        def _refuse(self) -> None:
            if self.refused:
                return
            self.refused = True
            log.warning("refused a request from %s: its head is over %d bytes", self._peer(), HEAD_LIMIT)
            msg = b"Request header fields too large (over %d bytes)" % HEAD_LIMIT
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(msg), msg)
            )
            self.transport.close()

        def _peer(self) -> str:
            return self.client[0] if self.client else "a local process"


def protocol_class(choice: str | None = None) -> type[asyncio.Protocol]:
    """The HTTP protocol the daemons serve with: ``choice`` ("httptools" or "h11"), else
    ``MUSTER_HTTP``, else httptools where it is installed."""
    if choice is None:
        choice = os.environ.get("MUSTER_HTTP", "").lower() or "httptools"
        if choice not in ("httptools", "h11"):
            log.warning("MUSTER_HTTP=%s: expected httptools or h11; serving with httptools", choice)
            choice = "httptools"
    if choice not in ("httptools", "h11"):
        raise ValueError(f"HTTP parser {choice!r}: expected httptools or h11")
    if choice == "httptools" and HttpToolsProtocol is None:
        _warn_no_httptools()
        choice = "h11"
    return HttpToolsPeerProtocol if choice == "httptools" else H11PeerProtocol


_warned: list[bool] = []


def _warn_no_httptools() -> None:
    if not _warned:  # once per process (an agent may host many servers)
        _warned.append(True)
        log.warning("httptools is not installed: HTTP is parsed by h11 (slower); pip install httptools")


class FailureBudget(Protocol):
    """What the acceptor needs of ``httpd``'s per-address budget of failed authentications."""

    def exhausted(self, addr: str) -> bool: ...
    def failed(self, addr: str) -> None: ...


class TLSAcceptor(asyncio.Protocol):
    """A TCP connection's TLS handshake, then uvicorn's HTTP protocol over it.

    asyncio drops a failed server-side handshake silently; doing the handshake here
    (``loop.start_tls``) lets each refusal be one line in the daemon's log. Unix-socket
    connections go straight to the HTTP protocol (their peer is proven by SO_PEERCRED).
    Data that arrives between the handshake and the HTTP protocol's start is held. A failed
    handshake counts as a failed authentication of its address (``Guarded``'s budget): an
    address out of budget is dropped before its handshake costs anything."""

    def __init__(self, ctx: ssl.SSLContext, inner: asyncio.Protocol, failures: FailureBudget) -> None:
        self.ctx = ctx
        self.inner = inner
        self.failures = failures
        self.held: list[bytes] = []
        self.eof = False
        self.lost: tuple[Exception | None] | None = None
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is None or sock.family == socket.AF_UNIX:
            transport.set_protocol(self.inner)
            self.inner.connection_made(transport)
            return
        assert isinstance(transport, asyncio.Transport)
        peer = transport.get_extra_info("peername") or ("?", 0)
        if self.failures.exhausted(peer[0]):
            log.warning("refused a connection from %s: too many failed authentications", peer[0])
            transport.abort()
            return
        transport.pause_reading()  # the handshake reads first
        self.task = asyncio.get_running_loop().create_task(self._handshake(transport))

    async def _handshake(self, transport: asyncio.Transport) -> None:
        peer = transport.get_extra_info("peername") or ("?", 0)
        try:
            tls = await asyncio.get_running_loop().start_tls(
                transport, self, self.ctx, server_side=True, ssl_handshake_timeout=HANDSHAKE_TIMEOUT
            )
        except Exception as exc:  # noqa: BLE001 - every refusal is logged, none is fatal
            log.warning("refused a connection from %s: %s", peer[0], describe_failure(exc))
            self.failures.failed(peer[0])
            transport.abort()
            return
        if tls is None:  # closed while shaking hands
            return
        tls.set_protocol(self.inner)
        self.inner.connection_made(tls)
        if self.held:
            self.inner.data_received(b"".join(self.held))
            self.held = []
        if self.eof:
            self.inner.eof_received()
        if self.lost is not None:
            self.inner.connection_lost(self.lost[0])

    def data_received(self, data: bytes) -> None:
        self.held.append(data)

    def eof_received(self) -> bool | None:
        self.eof = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = (exc,)


def protocol_factory(tls: ssl.SSLContext | None, failures: FailureBudget, http: str | None = None) -> Any:
    """What uvicorn calls for each connection (its ``http`` setting); ``http``: ``protocol_class``'s choice."""
    cls: Any = protocol_class(http)

    def create(config: Any, server_state: Any, app_state: Any, _loop: Any = None) -> asyncio.Protocol:
        inner: asyncio.Protocol = cls(config=config, server_state=server_state, app_state=app_state, _loop=_loop)
        return inner if tls is None else TLSAcceptor(tls, inner, failures)

    return create
