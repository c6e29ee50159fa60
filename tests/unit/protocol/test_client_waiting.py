"""Work handed to ``when_waiting`` runs while a request's answer is awaited: after the
request has left, before the answer is read, one piece per request, its failure ignored."""

from __future__ import annotations

import pathlib
import socket
import threading

from muster.protocol.client import request, when_waiting


def test_work_runs_once_the_request_is_sent_one_piece_per_request(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "ctld.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)
    received = [threading.Event() for _ in range(3)]

    def serve() -> None:
        for event in received:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                event.set()
                body = b'{"ok":true}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    done: list[tuple[str, bool]] = []

    def first() -> None:  # the request is out: the server has it while this runs
        done.append(("first", received[0].wait(10)))

    def failing() -> None:
        done.append(("failing", received[1].wait(10)))
        raise RuntimeError("ignored")

    when_waiting(first)
    when_waiting(failing)
    for path_ in ("/a", "/b", "/c"):
        assert request("POST", path_, {}, unix_path=path, timeout=10) == {"ok": True}
    thread.join(10)
    assert done == [("first", True), ("failing", True)]
