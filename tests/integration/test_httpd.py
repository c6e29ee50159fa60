"""The daemons' HTTP server (``protocol.httpd.make_server``) speaks HTTP/1.1 as the commands,
the agents and hostile clients need, with either parser: httptools (the default) and h11
(where httptools is missing). A real uvicorn serves a small app on a Unix socket and on TCP;
the tests speak raw HTTP to it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from muster.protocol.httpconn import HEAD_LIMIT
from muster.protocol.httpd import PEER_KEY, bind_tcp, bind_unix, make_server, read_body, send_json

pytestmark = pytest.mark.integration

PARSERS = ["httptools", "h11"]


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Says what it was asked: method, path, body size, peer credentials, client address."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = await read_body(receive)
    if scope["path"] == "/deny":  # a failed authentication, as Guarded counts them
        await send_json(send, 401, {"error": "no", "code": "auth"})
        return
    peer = scope.get(PEER_KEY)
    answer = {"method": scope["method"], "path": scope["path"], "size": len(body), "peer": peer}
    await send_json(send, 200, {**answer, "client": scope["client"][0] if scope.get("client") else None})


class Server:
    def __init__(self, root: str, http: str) -> None:
        self.path = os.path.join(root, "d.sock")
        unix, tcp = bind_unix(self.path), bind_tcp("127.0.0.1", 0)
        self.addr = tcp.getsockname()[:2]
        self.server = make_server(echo, log_level="error", body_limit=1 << 20, http=http)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[unix, tcp])))
        self.thread.start()
        while not self.server.started:
            assert self.thread.is_alive(), "the server did not start"
            threading.Event().wait(0.01)

    def unix(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(self.path)
        return s

    def tcp(self, source: str | None = None) -> socket.socket:
        return socket.create_connection(self.addr, timeout=10, source_address=(source, 0) if source else None)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(params=PARSERS)
def server(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Server]:
    s = Server(str(tmp_path), request.param)
    try:
        yield s
    finally:
        s.stop()


def read_response(s: socket.socket, buf: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One response from ``s`` (what follows it stays in ``buf``): status, headers, body."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {bytes(buf)!r}")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    buf[:] = rest[length:]
    return int(lines[0].split()[1]), headers, rest[:length]


def ask(s: socket.socket, data: bytes) -> tuple[int, dict[str, str], bytes]:
    s.sendall(data)
    return read_response(s, bytearray())


def closed(s: socket.socket) -> bool:
    """Whether the server closes ``s`` (h11's 400 has no length: its body ends there)."""
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def test_a_unix_peer_is_named_by_its_credentials_a_tcp_peer_by_nothing(server: Server) -> None:
    with server.unix() as s:
        status, _, body = ask(s, b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200 and json.loads(body)["peer"] == [os.getpid(), os.getuid(), os.getgid()]
    with server.tcp() as s:
        status, _, body = ask(s, b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200 and json.loads(body)["peer"] is None and json.loads(body)["client"] == "127.0.0.1"


def test_keep_alive_pipelining_and_chunked_bodies(server: Server) -> None:
    with server.unix() as s:
        buf = bytearray()
        for n in (3, 5):  # one connection, two requests in turn
            s.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (n, b"x" * n))
            status, _, body = read_response(s, buf)
            assert status == 200 and json.loads(body)["size"] == n
        # two requests in one write, the second chunked: answered in order
        s.sendall(
            b"POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
            b"POST /two HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n"
        )
        first, second = read_response(s, buf), read_response(s, buf)
        assert [json.loads(r[2])["path"] for r in (first, second)] == ["/one", "/two"]
        assert json.loads(second[2])["size"] == 7


def test_expect_100_continue_is_answered_before_the_body(server: Server) -> None:
    with server.unix() as s:
        s.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(b"abcd")
        status, _, body = read_response(s, bytearray())
    assert status == 200 and json.loads(body)["size"] == 4


@pytest.mark.parametrize(
    "request_bytes",
    [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"],
)
def test_a_malformed_request_gets_400_and_a_closed_connection(server: Server, request_bytes: bytes) -> None:
    with server.unix() as s:
        status, _, _ = ask(s, request_bytes)
        assert status == 400 and closed(s)


def test_a_body_over_the_limit_gets_413(server: Server) -> None:
    with server.tcp() as s:
        status, _, _ = ask(s, b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (2 << 20))
    assert status == 413


@pytest.mark.parametrize("transport", ["tcp", "unix"])
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_client_sending_a_body_over_the_limit_reads_the_413_not_a_reset(
    server: Server, transport: str, declared: bool
) -> None:
    """The whole request in one write, as the commands send it (16 times the limit): the
    server answers, reads and drops the rest, and only then closes."""
    body = b"x" * (16 << 20)
    if declared:
        request = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    else:
        chunks = b"".join(b"%x\r\n%s\r\n" % (1 << 16, body[i : i + (1 << 16)]) for i in range(0, len(body), 1 << 16))
        request = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    with server.tcp() if transport == "tcp" else server.unix() as s:
        s.sendall(request)  # no BrokenPipeError / ConnectionResetError: the body was read
        status, headers, answer = read_response(s, bytearray())
        assert status == 413 and headers["connection"] == "close"
        assert json.loads(answer) == {"error": "Request body too large (limit 1048576 bytes)", "code": "too_large"}
        assert closed(s)


@pytest.mark.parametrize("http", PARSERS)
def test_idle_connections_are_closed_after_the_keep_alive_timeout(tmp_path: Any, http: str) -> None:
    """One that never sends a request (uvicorn alone would keep it for ever) and one kept
    alive after its answer: both closed by the server after ``keep_alive`` seconds."""
    tcp = bind_tcp("127.0.0.1", 0)
    addr = tcp.getsockname()[:2]
    server = make_server(echo, log_level="error", http=http, keep_alive=1)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[tcp])))
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the server did not start"
            threading.Event().wait(0.01)
        with socket.create_connection(addr, timeout=20) as silent, socket.create_connection(addr, timeout=20) as kept:
            status, headers, _ = ask(kept, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status == 200 and headers.get("connection") != "close"
            assert silent.recv(1) == b""  # closed by the server (the socket's timeout is the deadline)
            assert kept.recv(1) == b""
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_client_reads_the_413_and_says_so(server: Server) -> None:
    from muster.protocol import client

    with pytest.raises(client.ApiError) as err:
        client.request("POST", "/a", {"script": "x" * (8 << 20)}, unix_path=server.path, timeout=10)
    assert (err.value.status, err.value.code) == (413, "too_large")


def test_failed_authentications_are_throttled_whatever_x_forwarded_for_says(server: Server) -> None:
    statuses = []
    for i in range(60):  # a burst of 30 failures, then 429 (Guarded's budget)
        with server.tcp(source="127.0.0.1") as s:
            forged = b"X-Forwarded-For: 10.9.%d.%d\r\n" % (i // 250, i % 250)
            statuses.append(ask(s, b"GET /deny HTTP/1.1\r\nHost: x\r\n" + forged + b"\r\n")[0])
    assert statuses[0] == 401 and statuses[-1] == 429
    with server.tcp(source="127.0.0.1") as s:  # and no header names another client
        status, _, body = ask(s, b"GET /a HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n")
        assert status == 429
    with server.tcp(source="127.0.0.2") as s:
        status, _, body = ask(s, b"GET /a HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n")
        assert status == 200 and json.loads(body)["client"] == "127.0.0.2"


def head_refused(status: int, http: str) -> bool:
    return status == (431 if http == "httptools" else 400)  # h11 answers its own bound 400


@pytest.mark.parametrize("where", ["url", "headers", "one endless header", "trailers"])
def test_a_head_over_16_kib_is_refused_and_others_are_served(
    request: pytest.FixtureRequest, server: Server, where: str
) -> None:
    http = request.node.callspec.params["server"]
    start = {
        "url": b"GET /" + b"a" * 1000,
        "headers": b"GET / HTTP/1.1\r\nHost: x\r\n",
        "one endless header": b"GET / HTTP/1.1\r\nX-Endless: ",
        "trailers": b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n",
    }[where]
    more = b"b" * 1000 if where in ("url", "one endless header") else b"X-Filler: " + b"c" * 990 + b"\r\n"
    with server.unix() as s:
        s.sendall(start)
        sent = len(start)
        try:
            while sent < 8 * HEAD_LIMIT:
                s.sendall(more)
                sent += len(more)
        except OSError:  # the daemon answered and closed while we were still sending
            pass
        status, headers, _ = read_response(s, bytearray())
        assert head_refused(status, http) and headers.get("connection") == "close" and closed(s)
    with server.unix() as s:  # a head just under the limit is served
        filler = b"X-Filler: " + b"d" * (HEAD_LIMIT - 200) + b"\r\n"
        status, _, _ = ask(s, b"GET / HTTP/1.1\r\nHost: x\r\n" + filler + b"\r\n")
        assert status == 200


def test_without_httptools_h11_serves_and_says_so(tmp_path: Any) -> None:
    child = r"""
import asyncio, importlib.abc, logging, socket, sys, threading
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "httptools":
            raise ModuleNotFoundError("no httptools here", name=name)
sys.meta_path.insert(0, Block())
logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
from muster.protocol.httpd import bind_unix, make_server
from muster.protocol import httpconn
sys.path.insert(0, sys.argv[2])
from test_httpd import echo
server = make_server(echo, log_level="error")
sock = bind_unix(sys.argv[1])
threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True).start()
while not server.started:
    threading.Event().wait(0.01)
c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])
c.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
print(c.recv(1000).split(b"\r\n")[0].decode(), httpconn.protocol_class().__name__)
server.should_exit = True
"""
    here = os.path.dirname(__file__)
    out = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path / "d.sock"), here], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "httptools is not installed: HTTP is parsed by h11" in out.stdout
    assert "HTTP/1.1 200 OK H11PeerProtocol" in out.stdout
