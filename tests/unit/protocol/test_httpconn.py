"""The daemons' HTTP connections (``protocol.httpconn``) without a socket: which parser
serves, and how much of a request's head the httptools protocol reads before refusing it,
whatever sizes the reads come in."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from muster.protocol.httpconn import HEAD_LIMIT, H11PeerProtocol, HttpToolsPeerProtocol, protocol_class


def test_httptools_serves_unless_h11_is_asked_for(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    monkeypatch.delenv("MUSTER_HTTP", raising=False)
    assert protocol_class() is HttpToolsPeerProtocol
    assert protocol_class("h11") is H11PeerProtocol
    monkeypatch.setenv("MUSTER_HTTP", "H11")
    assert protocol_class() is H11PeerProtocol
    monkeypatch.setenv("MUSTER_HTTP", "nginx")
    with caplog.at_level(logging.WARNING, "muster.httpd"):
        assert protocol_class() is HttpToolsPeerProtocol
    assert "MUSTER_HTTP=nginx: expected httptools or h11" in caplog.text
    with pytest.raises(ValueError, match="expected httptools or h11"):
        protocol_class("nginx")


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


async def noapp(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("no request may reach the app")


def fed_until_refused(first: bytes, more: bytes, read: int) -> tuple[int, Transport]:
    """Bytes fed to a connection, in reads of ``read`` bytes, until it refuses the head."""
    loop = asyncio.new_event_loop()
    try:
        conn = HttpToolsPeerProtocol(config=Config(noapp), server_state=ServerState(), app_state={}, _loop=loop)
        transport = Transport()
        conn.connection_made(transport)
        stream = first + more * ((4 * HEAD_LIMIT + 3 * read) // len(more))
        fed = 0
        while fed < len(stream) and not transport.closed:
            conn.data_received(stream[fed : fed + read])
            fed += read
        return fed, transport
    finally:
        loop.close()


@pytest.mark.parametrize("read", [1, 13, 1000, 4096, 65536])
@pytest.mark.parametrize(
    "first, more",
    [
        (b"GET /", b"u" * 100),  # an endless URL
        (b"GET / HTTP/1.1\r\n", b"X-Line: " + b"v" * 90 + b"\r\n"),  # endless header lines
        (b"GET / HTTP/1.1\r\nX-Endless: ", b"w" * 100),  # one endless header
    ],
)
def test_a_head_is_refused_at_most_one_read_past_the_bound(first: bytes, more: bytes, read: int) -> None:
    fed, transport = fed_until_refused(first, more, read)
    assert transport.closed and transport.written.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert fed <= HEAD_LIMIT + 2 * read + len(more)
