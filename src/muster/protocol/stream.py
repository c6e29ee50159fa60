"""Streams between srun and the node agents: frames, and HTTP/1.1 chunked bodies read and
written incrementally over raw sockets.

A step's launch answers with a stream of *frames*, each ``<kind> <task> <length>\\n``
followed by ``length`` bytes:

====  ============================================================================
``o``  bytes the task wrote to stdout          ``e``  bytes it wrote to stderr (task -1:
       the node's own words, such as ``slurmstepd-node1: error: *** STEP 5.0 ... ***``)
``x``  the task ended: JSON ``{"code", "signal"}`` (sent after all of its output)
``m``  a JSON message about the node's part of the step (task -1): ``{"started": [tasks],
       "token"}`` first, ``{"error": text}`` when nothing could start
``d``  the node's part of the step is over (through the launch tree, the stream goes
       on with other nodes' frames)
``t``  another node's frames, relayed through the launch tree (``agent.steptree``):
       ``<node name>\n`` and then that node's own frames; an ``m`` among them that
       says ``{"failed": why, "judge": bool}`` reports the node's launch or stream lost
====  ============================================================================

``StreamClient`` sends one request and then hands back frames as they arrive; it never
blocks unless asked to, so that ``srun`` can watch many nodes, its stdin and its signals in
one ``select``. ``ChunkedSender`` writes a request body of unknown length (srun's stdin).

Like ``client``, this imports only C modules at start-up (``_socket``) and ``wirejson``:
``srun`` is a command, and a command's start-up time is its users' time.
"""

from __future__ import annotations

import _socket

from muster.protocol.wirejson import dumps, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ChunkedDecoder", "ChunkedSender", "FrameDecoder", "StreamClient", "StreamError", "frame"]


class StreamError(Exception):
    """The other end failed or answered with an error (``status``, ``code``)."""

    def __init__(self, message: str, status: int = 0, code: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def frame(kind: bytes, task: int, payload: bytes) -> bytes:
    return b"%s %d %d\n" % (kind, task, len(payload)) + payload


def json_frame(kind: bytes, task: int, data: object) -> bytes:
    return frame(kind, task, dumps(data).encode())


class FrameDecoder:
    """Bytes in, ``(kind, task, payload)`` frames out, whatever the split."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[tuple[bytes, int, bytes]]:
        buf = self._buf + data if self._buf else data
        out = []
        pos = 0
        n = len(buf)
        while pos < n:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            try:
                kind, task, length = buf[pos:nl].split(b" ")
                size = int(length)
                tid = int(task)
            except ValueError:
                raise StreamError(f"malformed stream frame header {buf[pos:nl][:40]!r}") from None
            end = nl + 1 + size
            if end > n:
                break
            out.append((kind, tid, buf[nl + 1 : end]))
            pos = end
        self._buf = buf[pos:]
        return out


class ChunkedDecoder:
    """Incremental decoder of an HTTP/1.1 ``Transfer-Encoding: chunked`` body."""

    __slots__ = ("_buf", "_left", "done")

    def __init__(self) -> None:
        self._buf = b""
        self._left = -1  # bytes of the current chunk still to read; -1: at a size line
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        out = []
        pos = 0
        while not self.done:
            if self._left < 0:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                size = int(buf[pos:nl].split(b";")[0], 16)
                pos = nl + 2
                if size == 0:
                    self.done = True
                    break
                self._left = size
            take = min(self._left, len(buf) - pos)
            if take:
                out.append(buf[pos : pos + take])
                pos += take
                self._left -= take
            if self._left > 0:
                break
            if len(buf) - pos < 2:
                break  # the CRLF after the chunk has not come yet
            pos += 2
            self._left = -1
        self._buf = buf[pos:]
        return b"".join(out)


def _connect(address: tuple[str, int], timeout: float, tls: tuple[str, str] | None, begin: bool = False) -> Any:
    try:
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        sock.connect(address)
    except OSError as e:
        raise StreamError(f"cannot reach {address[0]}:{address[1]}: {e.strerror or e}") from None
    if tls is None:
        return sock
    from muster.protocol.client import ConnectError, tls_wrap

    try:
        return tls_wrap(sock, tls[0], tls[1], f"{address[0]}:{address[1]}", begin)
    except ConnectError as e:
        raise StreamError(str(e)) from None


class StreamClient:
    """One request to a node; its answer read as frames, a little at a time.

    ``connect`` opens the connection, ``send`` writes the request (the two are apart so that
    srun can tell the tasks the address and port its first connection got)."""

    __slots__ = (
        "sock",
        "status",
        "_head",
        "_chunked",
        "_length",
        "_body",
        "frames",
        "eof",
        "address",
        "local_addr",
        "local_port",
        "tls",
    )

    def __init__(self, sock: _socket.socket, address: tuple[str, int]) -> None:
        self.sock = sock
        self.address = address
        self.local_addr, self.local_port = sock.getsockname()[:2]
        self.status = 0
        self._head = b""
        self._chunked: ChunkedDecoder | None = None
        self._length = -1
        self._body = b""
        self.frames = FrameDecoder()
        self.eof = False
        self.tls: tuple[str, str] | None = None  # a handshake ``finish`` completes

    @classmethod
    def connect(
        cls, address: tuple[str, int], timeout: float = 30.0, tls: tuple[str, str] | None = None
    ) -> StreamClient:
        """Connect to a node's agent; ``tls``: (cluster CA, node name) with TLSType=tls/muster."""
        return cls(_connect(address, timeout, tls), address)

    @classmethod
    def begin(cls, address: tuple[str, int], timeout: float = 30.0, tls: tuple[str, str] | None = None) -> StreamClient:
        """``connect``, the TLS handshake only started: ``finish`` it before ``send``. srun
        begins with every node it contacts, then finishes each, so that the nodes' halves
        of the handshakes overlap."""
        conn = cls(_connect(address, timeout, tls, begin=True), address)
        conn.tls = tls
        return conn

    def finish(self) -> None:
        """Complete the handshake ``begin`` started. Raises ``StreamError``."""
        if self.tls is None:
            return
        from muster.protocol.client import ConnectError, tls_finish

        name, self.tls = self.tls[1], None
        try:
            tls_finish(self.sock, name, f"{self.address[0]}:{self.address[1]}")
        except ConnectError as e:
            raise StreamError(str(e)) from None

    def send(self, path: str, payload: bytes, headers: dict[str, str] | None = None) -> None:
        """Write a POST of ``payload`` (JSON bytes)."""
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.address[0]}:{self.address[1]}\r\n"
            f"Connection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n{extra}\r\n"
        )
        try:
            self.sock.sendall(head.encode() + payload)
        except OSError as e:
            raise StreamError(f"cannot reach {self.address[0]}:{self.address[1]}: {e.strerror or e}") from None

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def read(self) -> list[tuple[bytes, int, bytes]]:
        """Read what is there (blocking until something is, within the timeout); return
        the complete frames. ``eof`` turns true when the answer is over. Raises
        ``StreamError`` for an error answer or a broken connection."""
        try:
            data = self.sock.recv(262144)
            # TLS decrypts a record at a time: what it holds already, select() cannot see.
            pending = getattr(self.sock, "pending", None)
            while data and pending is not None and pending():
                data += self.sock.recv(262144)
        except OSError as e:
            raise StreamError(f"connection lost: {e.strerror or e}") from None
        if not data:
            if self.status == 0 or not (self._chunked and self._chunked.done):
                self.eof = True
                if self.status >= 400:
                    raise self._error()
                raise StreamError("connection closed before the step ended")
            self.eof = True
            return []
        if self.status == 0:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return []
            head, data = self._head[:end], self._head[end + 4 :]
            self._head = b""
            lines = head.split(b"\r\n")
            self.status = int(lines[0].split(b" ", 2)[1])
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                key = name.strip().lower()
                if key == b"transfer-encoding" and b"chunked" in value.lower():
                    self._chunked = ChunkedDecoder()
                elif key == b"content-length":
                    self._length = int(value.strip())
        if self.status >= 400 or self._chunked is None:
            self._body += data
            if self._length >= 0 and len(self._body) >= self._length:
                self.eof = True
                if self.status >= 400:
                    raise self._error()
                return self.frames.feed(self._body)
            return []
        out = self.frames.feed(self._chunked.feed(data))
        if self._chunked.done:
            self.eof = True
        return out

    def _error(self) -> StreamError:
        try:
            data = loads(self._body) if self._body else {}
        except ValueError:
            data = {}
        if isinstance(data, dict) and data.get("error"):
            return StreamError(str(data["error"]), self.status, str(data.get("code") or "error"))
        return StreamError(f"HTTP {self.status}", self.status)


class ChunkedSender:
    """A request whose body is sent in pieces as they come (srun's stdin to a node)."""

    __slots__ = ("sock",)

    def __init__(
        self, address: tuple[str, int], path: str, timeout: float = 30.0, tls: tuple[str, str] | None = None
    ) -> None:
        sock = _connect(address, timeout, tls)
        try:
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\nConnection: close\r\n"
                "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            )
        except OSError as e:
            sock.close()
            raise StreamError(f"cannot reach {address[0]}:{address[1]}: {e.strerror or e}") from None
        self.sock = sock

    def send(self, data: bytes) -> None:
        if data:
            self.sock.sendall(b"%x\r\n" % len(data) + data + b"\r\n")

    def finish(self) -> None:
        """End the body and drop the connection (the answer is not needed)."""
        try:
            self.sock.sendall(b"0\r\n\r\n")
            self.sock.recv(4096)
        except OSError:
            pass
        finally:
            self.sock.close()
