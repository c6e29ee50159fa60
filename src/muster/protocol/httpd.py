"""Serving the API from the daemons: uvicorn on our own sockets, with peer credentials.

Only the daemons import this module (it pulls in uvicorn, starlette and httpx), never the commands.

* ``make_server(app)`` serves an ASGI app with uvicorn on already-bound sockets (TCP and/or
  Unix), over ``protocol.httpconn``'s connections: HTTP/1.1 parsed by httptools (h11 where
  it is missing), each request's head bounded to 16 KiB (431 beyond), and on a Unix
  socket the peer's uid/gid/pid (SO_PEERCRED) in the ASGI scope as
  ``scope["muster.peer"] = (pid, uid, gid)``: this is how a user's identity is proven
  rather than claimed. TCP connections carry no peer credentials. No proxy is trusted:
  ``X-Forwarded-For`` changes no request's client address.
* ``SignedClient`` is the daemons' client: every request is signed with the cluster key,
  names its sender and its one receiver (``protocol.signing``).
* Every request passes ``Guarded`` first (``make_server`` puts it in front of the app): a
  body over the size limit is answered 413 (JSON, ``code`` "too_large") after holding at
  most the limit (a declared ``Content-Length`` over it: before reading anything); then
  the rest is read and dropped (up to ``DRAIN_LIMIT`` bytes and ``DRAIN_SECONDS``) before
  the connection closes, so a client still sending reads the answer, not a reset. All
  bodies being buffered at once
  share one memory budget (503 beyond it), and a TCP peer address whose requests keep
  failing authentication (401) is answered 429, without reading its bodies, until its
  budget of failures refills: a flooder slows itself, not the daemon's other clients.
  Two routes are streamed rather than buffered: ``/v1/steps/stdin`` (srun's stdin, which
  may never end; the agent checks its token before reading, and copies it as it comes)
  and ``/v1/steps/watch_stdin`` (sattach's, checked against its signed watch first).
* With a TLS context (``TLSType=tls/muster``), TCP connections are TLS (``protocol.tls``):
  a refused handshake (a certificate not from the cluster CA, plain HTTP, a timeout) is
  one line in the log, and each request's scope carries the verified peer certificate's
  name as ``scope["muster.tls_peer"]`` ("" for a TLS client without a certificate; absent
  on plain connections). ``Verifier(require_cert=True)`` then accepts a signed daemon
  message only over a connection whose certificate names its sender.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import functools
import json
import logging
import os
import socket
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import uvicorn

from muster.core.clock import Clock, SystemClock
from muster.core.hostlist import expand
from muster.protocol.daemonsignals import STOP_GRACE
from muster.protocol.httpconn import PEER_KEY, TLS_PEER_KEY, peer_credentials, protocol_factory
from muster.protocol.signing import (
    CTLD,
    MAX_SKEW,
    ProtocolMismatch,
    ReplayGuard,
    SignatureError,
    StaleMessage,
    sign_request,
    verify_request,
)

log = logging.getLogger("muster.httpd")

# asyncio allocates each TLS connection a 256 KiB read buffer (4,096 agents' links: 1 GiB of
# the controller); a TLS record is at most 16 KiB, so 32 KiB reads cost no more calls.
asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER = 32 * 1024
BODY_LIMIT = 16 * 1024 * 1024  # bytes of one request body (a 4 MB script and its job fit)
# After the 413 answer to a body over the limit, the rest is read and dropped up to this
# size and time before the connection closes, so the client reads the answer, not a reset.
DRAIN_LIMIT = 256 * 1024 * 1024
KEEP_ALIVE = 30  # seconds an idle connection is kept open (before and between requests)
DRAIN_SECONDS = 10.0
BODY_BUDGET = 256 * 1024 * 1024  # bytes of all request bodies buffered at one time
FAILURE_BURST = 30.0  # failed authentications a TCP address may have in a row...
FAILURE_REFILL = 5.0  # ...and then per second


def bind_tcp(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted sockets only then (with Nagle, a frame waited ~40 ms)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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


def body_limit(max_script_size: int) -> int:
    """The body limit for a site whose scripts may have ``max_script_size`` bytes (a
    script travels JSON-escaped, inside the job's other fields)."""
    return max(BODY_LIMIT, 2 * max_script_size + 1024 * 1024)


class _HostedServer(uvicorn.Server):
    """One of several servers in one process (an agent hosting many emulated nodes): the
    process turns SIGTERM/SIGINT into a stop of all of them, so no server takes the
    signals for itself (uvicorn's own capture would leave all but the last one running)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        # uvicorn's loop wakes every 0.1 s to see whether to stop; dozens of servers in
        # one process would spend their idle CPU on that. Every 0.5 s, with the counter
        # advanced to match (its Date header is still renewed once a second).
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 5) % 864000
            await asyncio.sleep(0.5)
            should_exit = await self.on_tick(counter)


def make_server(
    app: Any,
    log_level: str = "warning",
    body_limit: int = BODY_LIMIT,
    clock: Clock | None = None,
    tls: ssl.SSLContext | None = None,
    hosted: bool = False,
    http: str | None = None,
    refusal: Refusal | None = None,
    keep_alive: int = KEEP_ALIVE,
) -> uvicorn.Server:
    """uvicorn for ``app`` behind ``Guarded``; TCP connections are TLS when ``tls`` is given;
    ``hosted``: one of several servers in this process, whose signals the process handles;
    ``http``: "httptools" or "h11" (``httpconn.protocol_class``; default: httptools if installed);
    ``refusal``: the JSON body of Guarded's own refusals (``plain_refusal``'s shape by default);
    ``keep_alive``: seconds an idle connection is kept (one that never sent a request too)."""
    guarded = Guarded(app, body_limit, clock or SystemClock(), refusal=refusal)
    config = uvicorn.Config(
        guarded,
        http=protocol_factory(tls, guarded.failures, http),
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=keep_alive,  # httpconn arms it from the connection's start too
        # A stop closes idle kept-alive connections at once and cuts requests still in
        # flight (a half-sent body, a long poll) after this long: every daemon stops within
        # seconds (``daemonsignals``), not when its slowest client lets go.
        timeout_graceful_shutdown=STOP_GRACE,
        # No proxy stands in front of a daemon: with uvicorn's default, a client on the
        # loopback could name any address in X-Forwarded-For and escape (or spend another
        # address's) budget of failed authentications. It also costs every request.
        proxy_headers=False,
    )
    return _HostedServer(config) if hosted else uvicorn.Server(config)


async def _drain(receive: Any, most: int = DRAIN_LIMIT, seconds: float = DRAIN_SECONDS) -> None:
    """Read and drop the rest of a request body refused as too large (up to ``most`` bytes
    for at most ``seconds``), its answer already sent, so that a client still sending
    reads the answer: a connection closed with data unread is reset, and a reset can lose
    the answer before the client reads it."""
    dropped = 0

    async def drop() -> None:
        nonlocal dropped
        while dropped <= most:
            message = await receive()
            dropped += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body"):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(drop(), seconds)


async def read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def send_json(send: Any, status: int, body: dict[str, Any], close: bool = False, more: bool = False) -> None:
    """``body`` as the JSON answer; ``more``: the response is ended later (an empty body
    message), so that the request can still be read after the answer has gone out."""
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if close:  # the rest of the request is not read: the connection cannot be reused
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": more})


class _FailureBudget:
    """Per TCP peer address: a bucket of failed authentications that refills with time."""

    def __init__(self, clock: Clock, burst: float = FAILURE_BURST, refill: float = FAILURE_REFILL) -> None:
        self.clock = clock
        self.burst = burst
        self.refill = refill
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, when)

    def _tokens(self, addr: str) -> float:
        tokens, when = self._buckets.get(addr, (self.burst, self.clock.monotonic()))
        return min(self.burst, tokens + (self.clock.monotonic() - when) * self.refill)

    def exhausted(self, addr: str) -> bool:
        return addr in self._buckets and self._tokens(addr) < 1.0

    def failed(self, addr: str) -> None:
        if len(self._buckets) > 4096:  # forget the addresses that have recovered
            full = [a for a in self._buckets if self._tokens(a) >= self.burst]
            for a in full:
                del self._buckets[a]
        self._buckets[addr] = (max(0.0, self._tokens(addr) - 1.0), self.clock.monotonic())


# The one route whose body is streamed to the app rather than read first: a step's stdin,
# which the agent copies to the tasks' pipes as srun sends it (``agent.stepapi``).
STREAMED_PATHS = frozenset(("/v1/steps/stdin", "/v1/steps/watch_stdin"))


# How a daemon words ``Guarded``'s refusals: (scope, status, message, code) -> JSON body.
Refusal = Callable[[dict[str, Any], int, str, str], dict[str, Any]]


def plain_refusal(scope: dict[str, Any], status: int, message: str, code: str) -> dict[str, Any]:
    """The daemons' own error shape (what ``protocol.client`` reads)."""
    return {"error": message, "code": code}


class Guarded:
    """Bounded request bodies and a failed-authentication rate limit (module docstring)."""

    def __init__(
        self, app: Any, limit: int, clock: Clock, budget: int = BODY_BUDGET, refusal: Refusal | None = None
    ) -> None:
        self.app = app
        self.limit = limit
        self.budget = budget
        self.buffered = 0
        self.failures = _FailureBudget(clock)
        self.refusal = refusal or plain_refusal

    async def _refuse(
        self, scope: dict[str, Any], send: Any, status: int, message: str, code: str, more: bool = False
    ) -> None:
        """Guarded's own answers (400, 413, 429, 503), in the shape the app's clients read."""
        await send_json(send, status, self.refusal(scope, status, message, code), True, more=more)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        addr = client[0] if client and not scope.get(PEER_KEY) else None  # TCP only
        if addr is not None and self.failures.exhausted(addr):
            log.warning("refused %s %s from %s: too many failed authentications", scope["method"], scope["path"], addr)
            await self._refuse(scope, send, 429, "Too many failed authentications; retry later", "rate_limited")
            return
        if scope["path"] in STREAMED_PATHS:
            # srun's and sattach's stdin: copied to the tasks as it comes (it may never end), never held
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope["headers"]:
            if name.lower() == b"content-length":
                declared = value
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            drain = declared.isdigit() and int(declared) <= DRAIN_LIMIT
            await self._too_large(scope, receive if drain else None, send, declared.decode("latin-1"))
            return
        chunks: list[bytes] = []
        size = held = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.limit:
                    rest = receive if message.get("more_body") else None
                    await self._too_large(scope, rest, send, f"more than {self.limit}")
                    return
                if self.buffered + len(chunk) > self.budget:
                    log.warning(
                        "refused %s %s: request bodies use all %d bytes", scope["method"], scope["path"], self.budget
                    )
                    await self._refuse(scope, send, 503, "Server busy: too much request data in flight", "busy")
                    return
                self.buffered += len(chunk)
                held += len(chunk)
                chunks.append(chunk)
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
            chunks = []
            delivered = False

            async def replay() -> dict[str, Any]:
                nonlocal delivered
                if not delivered:
                    delivered = True
                    return {"type": "http.request", "body": body, "more_body": False}
                message: dict[str, Any] = await receive()
                return message

            async def watch(message: dict[str, Any]) -> None:
                if addr is not None and message["type"] == "http.response.start" and message["status"] == 401:
                    self.failures.failed(addr)
                await send(message)

            await self.app(scope, replay, watch)
        finally:
            self.buffered -= held

    async def _too_large(self, scope: dict[str, Any], rest: Any, send: Any, size: str) -> None:
        """Answer 413 (400 for a Content-Length that is no number); with ``rest`` (the
        request's ``receive``), the rest of the body is then read and dropped before the
        connection closes (``_drain``)."""
        if not size.isdigit() and not size.startswith("more"):
            await self._refuse(scope, send, 400, "invalid Content-Length", "invalid")
            return
        log.warning(
            "refused %s %s: request body of %s bytes over the limit of %d",
            scope["method"],
            scope["path"],
            size,
            self.limit,
        )
        message = f"Request body too large (limit {self.limit} bytes)"
        if rest is None:
            await self._refuse(scope, send, 413, message, "too_large")
            return
        await self._refuse(scope, send, 413, message, "too_large", more=True)
        await _drain(rest)
        await send({"type": "http.response.body", "body": b""})


class Verifier:
    """Checks signed daemon requests: HMAC, receiver, time window, replay (``replay``).

    ``name`` is this daemon's name as a receiver (its node name, or ``ctld``);
    ``floor_path`` is where its replay floor persists (in its state directory)."""

    def __init__(
        self, key: bytes, clock: Clock, name: str, floor_path: str | None = None, require_cert: bool = False
    ) -> None:
        self.key = key
        self.clock = clock
        self.name = name
        self.guard = ReplayGuard(path=floor_path, now=clock.now())
        self.require_cert = require_cert

    def verify(self, method: str, path: str, body: bytes, headers: dict[str, str], tls_peer: str | None = None) -> str:
        """The sender's name; ``SignatureError`` when the request must be refused.

        ``tls_peer`` is the connection's ``scope["muster.tls_peer"]``: with
        ``require_cert`` a genuine message must also arrive over TLS from a certificate
        naming its sender, so a node's stolen key and certificate speak for that node only."""
        sender = verify_request(self.key, method, path, body, headers, self.clock.now(), self.guard, self.name)
        if self.require_cert:
            if tls_peer is None:
                raise WrongPeer(f"message from {sender} over a plain connection (TLSType=tls/muster requires TLS)")
            if tls_peer != sender and not speaks_for(tls_peer, sender):
                named = f"names {tls_peer}" if tls_peer else "is missing"
                raise WrongPeer(f"message from {sender} over a connection whose client certificate {named}")
        return sender


@functools.lru_cache(maxsize=1024)
def _nodes(hostlist: str) -> frozenset[str]:
    return frozenset(expand(hostlist))


def speaks_for(tls_peer: str, sender: str) -> bool:
    """Whether a certificate naming ``tls_peer`` (a host certificate's hostlist, or one
    holder) may carry messages from ``sender`` (a hostlist too): every node the sender
    names is one the certificate names."""
    if not tls_peer or not sender:
        return False
    try:
        return _nodes(sender) <= _nodes(tls_peer)
    except ValueError:  # HostlistError: a name that is no hostlist speaks for no one else
        return False


class WrongPeer(SignatureError):
    """A genuine message sent over a connection that does not belong to its sender."""


def refusal(exc: SignatureError) -> dict[str, Any]:
    """The 401 body for a refused signed request (a stale one says the floor to re-sign at;
    one from a peer of a protocol outside the range, answered 426, says so and only that)."""
    if isinstance(exc, ProtocolMismatch):
        return {"error": str(exc), "code": "protocol"}
    body: dict[str, Any] = {"error": f"authentication failed: {exc}", "code": "auth"}
    if isinstance(exc, StaleMessage):
        body.update(code="stale", floor=exc.floor)
    return body


IN_FLIGHT = 64  # requests a SignedClient has in flight at once (httpx's pool allows 100)
HUNG_MEMORY = 30.0  # a controller that timed out is tried last for this long


class SignedClient:
    """An async JSON client whose requests the other daemons will accept.

    ``sender`` is this daemon's name; ``receiver`` the default one (an agent talks to
    ``ctld``; the controller names each node with ``to=``)."""

    def __init__(
        self,
        key: bytes,
        clock: Clock,
        timeout: float = 10.0,
        *,
        sender: str,
        receiver: str = CTLD,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.key = key
        self.clock = clock
        self.sender = sender
        self.receiver = receiver
        self.tls = tls
        # One pool of kept-alive connections per peer: a TLS handshake per link, not per message.
        # Every request the gate lets through keeps its connection afterwards (httpx keeps
        # 20 by default, for 5 s): a burst of launches then costs no new handshakes.
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=IN_FLIGHT, keepalive_expiry=25.0)
        self._client = httpx.AsyncClient(timeout=timeout, verify=tls if tls is not None else True, limits=limits)
        # At most this many requests in flight: more wait here, in O(1), not in httpx's
        # pool, whose queue is scanned whole for every request it assigns (a thousand
        # launches at once cost seconds of CPU that way). Below the pool's own limit, so
        # as many requests run at once as before.
        self._gate = asyncio.Semaphore(IN_FLIGHT)
        # Several controllers (a primary and backups): their base URLs, primary first, and
        # the one that answered last. See ``use_controllers``.
        self.controllers: list[str] = []
        self._active = 0
        self._hung: dict[int, float] = {}  # controllers that timed out, and when (monotonic)

    def use_controllers(self, bases: list[str]) -> None:
        """Posts to the first of ``bases`` (the primary's URL) go to whichever controller is
        active: each is tried in turn, from the last that answered, past those that do not
        answer or answer 503 in standby. What agents post (registrations, heartbeats, reports
        of ended runs) may be received twice without harm."""
        self.controllers = list(bases) if len(bases) > 1 else []

    def prefer_controller(self, index: int) -> None:
        """Try controller ``index`` first from now on (it said it is the active one)."""
        if 0 <= index < len(self.controllers):
            self._active = index
            self._hung.pop(index, None)

    def _order(self) -> list[int]:
        """The controllers to try: from the one that answered last, those that timed out
        lately (hung: stopped, swapped) last, so that one hung controller costs one
        timeout, not one per message."""
        n = len(self.controllers)
        now = self.clock.monotonic()
        ring = [(self._active + k) % n for k in range(n)]
        recent = {i for i, at in self._hung.items() if now - at < HUNG_MEMORY}
        return [i for i in ring if i not in recent] + [i for i in ring if i in recent]

    async def _post_active(self, path: str, body: dict[str, Any]) -> Any:
        last: Exception | None = None
        for i in self._order():
            try:
                answer = await self.post(self.controllers[i] + path, body, failover=False)
            except DaemonRequestError as exc:
                if exc.status != 503 or not isinstance(exc.data, dict) or exc.data.get("code") != "standby":
                    self._active = i
                    raise
                last = exc
            except (httpx.HTTPError, OSError) as exc:
                if isinstance(exc, httpx.TimeoutException):
                    self._hung[i] = self.clock.monotonic()
                last = exc
            else:
                self._active = i
                self._hung.pop(i, None)
                return answer
        assert last is not None
        raise last

    def url(self, host: str, port: int, path: str = "") -> str:
        """The URL of ``path`` on the daemon at ``host:port`` (https with TLS)."""
        return f"{'https' if self.tls is not None else 'http'}://{host}:{port}{path}"

    def set_timeout(self, timeout: float) -> None:
        """Wait this long for later requests (a reconfigured MessageTimeout)."""
        self._client.timeout = httpx.Timeout(timeout)

    async def _send(
        self, method: str, url: str, payload: bytes, to: str | None, timeout: float | None = None
    ) -> httpx.Response:
        path = httpx.URL(url).raw_path.decode()
        stamp = self.clock.now()
        for _ in range(2):
            headers = sign_request(
                self.key, method, path, payload, stamp, sender=self.sender, receiver=to or self.receiver
            )
            if method == "POST":
                headers["content-type"] = "application/json"
            # With TLS the receiver's certificate must name the receiver, whatever its address.
            extensions = {"sni_hostname": to or self.receiver} if self.tls is not None else None
            async with self._gate:
                resp = await self._client.request(
                    method,
                    url,
                    content=payload if method == "POST" else None,
                    headers=headers,
                    extensions=extensions,
                    timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
                )
            floor = _stale_floor(resp)
            # The receiver restarted since our clock's "now": sign again at its floor,
            # once, when that is within the window (a new message, new nonce).
            if floor is None or not (stamp < floor < self.clock.now() + MAX_SKEW / 2):
                return resp
            stamp = floor + 0.001
        return resp

    async def post(
        self, url: str, body: dict[str, Any], to: str | None = None, failover: bool = True, timeout: float | None = None
    ) -> Any:
        if failover and self.controllers and to is None and url.startswith(self.controllers[0] + "/"):
            return await self._post_active(url[len(self.controllers[0]) :], body)
        payload = json.dumps(body, separators=(",", ":")).encode()
        resp = await self._send("POST", url, payload, to, timeout)
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

    async def get(self, url: str, to: str | None = None) -> Any:
        resp = await self._send("GET", url, b"", to)
        if resp.status_code >= 400:
            raise DaemonRequestError(resp.status_code, resp.text)
        return resp.json()

    async def aclose(self) -> None:
        await self._client.aclose()


def _stale_floor(resp: httpx.Response) -> float | None:
    if resp.status_code != 401:
        return None
    try:
        data = resp.json()
        return float(data["floor"]) if data.get("code") == "stale" else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class DaemonRequestError(Exception):
    """The other daemon answered with an error; ``data`` is its JSON answer, if any."""

    def __init__(self, status: int, message: str, data: Any = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.data = data if isinstance(data, dict) else {}


__all__ = [
    "BODY_LIMIT",
    "Guarded",
    "PEER_KEY",
    "TLS_PEER_KEY",
    "WrongPeer",
    "refusal",
    "send_json",
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
