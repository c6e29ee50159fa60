"""protocol.client: a server that accepts but does not answer is told from a slow one."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from muster.protocol.client import ConnectError, request


@pytest.fixture
def silent(tmp_path: Any) -> Any:
    """A Unix socket whose server accepts connections (the kernel's backlog) and never answers."""
    path = str(tmp_path / "silent.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)
    yield path
    srv.close()


def test_a_request_to_a_hung_server_gives_up_when_the_probe_says_so(silent: str) -> None:
    asked: list[bool] = []

    def hung() -> bool:
        asked.append(True)
        return True

    with pytest.raises(ConnectError, match="not responding") as e:
        request("GET", "/v1/jobs", unix_path=silent, timeout=30.0, stalled=(0.05, hung))
    assert e.value.sent and asked == [True]


def test_a_slow_server_that_is_alive_is_waited_for(tmp_path: Any) -> None:
    path = str(tmp_path / "slow.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    answered = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        answered.wait(10)
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{"ok": 1}')
        conn.close()

    t = threading.Thread(target=serve)
    t.start()

    def hung() -> bool:
        answered.set()  # alive: the answer comes after the question
        return False

    try:
        assert request("GET", "/v1/jobs", unix_path=path, timeout=30.0, stalled=(0.05, hung)) == {"ok": 1}
    finally:
        answered.set()
        t.join()
        srv.close()
