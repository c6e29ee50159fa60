"""A minimal HTTP/1.1 JSON client over a Unix or TCP socket, for the commands.

``http.client`` costs 60-80 ms to import (it pulls in email and ssl); a command answers in
less than that in total, so this speaks just enough HTTP: one request per connection,
``Content-Length`` bodies, JSON in and out. For the same reason it uses the C modules
behind ``socket`` (whose Python layer imports ``enum`` and ``selectors``) and ``json``
(see ``wirejson``) directly.

With ``TLSType=tls/muster`` a TCP connection is TLS: ``tls`` names the cluster CA, and the
name the server's certificate from it must show (``ctld`` for the controller, a node's
name for its agent). The handshake goes through ``tlsclient`` (the C module behind ``ssl``:
``ssl`` itself costs 15-20 ms to import), and only when a TCP connection is made; the Unix
socket, the common case on the controller's host, needs no TLS.
"""

# No ``from __future__ import annotations`` here: sbatch's modules leave it out, which spares
# a plain submission the ``__future__`` module; names known only to type checkers are quoted.

import _socket

from muster.protocol.versions import PROTOCOL  # the wire's protocol number, said in every request
from muster.protocol.wirejson import dumps, loads

TYPE_CHECKING = False  # typing itself costs milliseconds to import; checkers read this name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class ApiError(Exception):
    """The controller answered with an error: ``str()`` is its message."""

    def __init__(self, status: int, message: str, code: str = "error", data: "Any" = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.data = data


class ConnectError(Exception):
    """The controller could not be reached, or the exchange broke. ``sent``: the request
    may have reached it (a retry elsewhere must then be one the controller recognises)."""

    def __init__(self, message: str, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


_WAITING_WORK: "list[Callable[[], object]]" = []


def when_waiting(work: "Callable[[], object]") -> None:
    """Do ``work`` (once, its errors ignored) while a request's answer is awaited: after it
    is sent, before its answer is read; one piece of work per request, in the order given.
    srun prepares its TLS client this way while the controller places its job and step
    (its answer would otherwise find srun idle, and the preparation come after it)."""
    _WAITING_WORK.append(work)


def tls_wrap(sock: "Any", tls_ca: str, server_name: str, where: str, begin: bool = False) -> "Any":
    """``sock`` (connected) as a TLS socket that checked the server's certificate: through
    ``tlsclient`` (the C module behind ``ssl``, a fraction of its import time), or ``ssl``
    itself for a name ``tlsclient`` does not take. With ``begin``, the handshake may be
    left under way: ``tls_finish`` completes it."""
    from muster.protocol import tlsclient

    try:
        if server_name.isascii():
            return (tlsclient.begin if begin else tlsclient.wrap)(sock, tls_ca, server_name)
        return _ssl_wrap(sock, tls_ca, server_name)
    except tlsclient.CAError as e:
        sock.close()
        raise ConnectError(f"TLS: {e}") from None
    except OSError as e:  # SSLError and SSLCertVerificationError are OSErrors
        sock.close()
        raise _handshake_failed(e, server_name, where) from None


def tls_finish(sock: "Any", server_name: str, where: str) -> None:
    """Complete a handshake ``tls_wrap(..., begin=True)`` left under way."""
    finish = getattr(sock, "finish", None)
    if finish is None:  # ssl's socket: done already
        return
    try:
        finish()
    except OSError as e:
        raise _handshake_failed(e, server_name, where) from None


def _handshake_failed(e: OSError, server_name: str, where: str) -> ConnectError:
    reason = getattr(e, "verify_message", None) or getattr(e, "reason", None) or e.strerror or e
    return ConnectError(f"TLS handshake with {server_name} at {where} failed: {reason}")


def _ssl_wrap(sock: "Any", tls_ca: str, server_name: str) -> "Any":
    from muster.protocol.tls import TLSError, client_context
    from muster.protocol.tlsclient import CAError

    try:
        ctx = client_context(tls_ca)
    except TLSError as e:
        raise CAError(str(e)) from None
    return ctx.wrap_socket(sock, server_hostname=server_name)


def _recv_all(sock: _socket.socket, stalled: "tuple[float, Callable[[], bool]] | None" = None) -> bytes:
    chunks = []
    if stalled is not None:
        # No byte within ``stalled[0]`` seconds: ask ``stalled[1]`` whether the server is
        # hung (True: give up now) or only slow (keep waiting, up to the socket's timeout).
        patience, hung = stalled
        timeout = sock.gettimeout()
        sock.settimeout(min(patience, timeout) if timeout is not None else patience)
        try:
            first = sock.recv(65536)
        except TimeoutError:
            if hung():
                raise ConnectError(
                    "controller not responding (hung: it accepted but does not answer)", sent=True
                ) from None
            sock.settimeout(None if timeout is None else max(0.001, timeout - patience))
            first = sock.recv(65536)
        sock.settimeout(timeout)
        if not first:
            return b""
        chunks.append(first)
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_response(raw: bytes) -> tuple[int, bytes]:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ConnectError("malformed response from controller", sent=True)
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if chunked:
        out, rest = [], body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            out.append(rest[:size])
            rest = rest[size + 2 :]
        body = b"".join(out)
    return status, body


def request(
    method: str,
    path: str,
    body: "Any" = None,
    *,
    unix_path: str | None = None,
    address: tuple[str, int] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
    tls: tuple[str, str] | None = None,
    connect_timeout: float | None = None,
    stalled: "tuple[float, Callable[[], bool]] | None" = None,
) -> "Any":
    """Send one request and return the decoded JSON answer; raise ApiError on 4xx/5xx.
    Over TCP with ``tls`` = (cluster CA, the server's muster name) the connection is TLS
    (module docstring). ``connect_timeout`` bounds the connection and TLS handshake apart
    from the answer's ``timeout``; ``stalled`` = (seconds, hung) asks ``hung()`` when no
    answer has begun after that long, and gives up at once when it says so (``client.failover``:
    a stopped controller is told from a slow one)."""
    # Text that is not UTF-8 (a command-line argument of raw bytes arrives as surrogates)
    # is sent with "?" in their place: the controller then answers "not found", not a crash.
    payload = b"" if body is None else dumps(body).encode("utf-8", "replace")
    try:
        if unix_path is not None:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            target: Any = unix_path
            host = "localhost"
        elif address is not None:
            sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            target = address
            host = f"{address[0]}:{address[1]}"
        else:
            raise ConnectError("no controller address configured")
        sock.settimeout(timeout if connect_timeout is None else min(timeout, connect_timeout))
        sock.connect(target)
    except OSError as e:
        where = unix_path or (f"{address[0]}:{address[1]}" if address else "?")
        raise ConnectError(
            f"Unable to contact slurm controller (connect failure): {where}: {e.strerror or e}"
        ) from None
    if tls is not None and address is not None:
        sock = tls_wrap(sock, tls[0], tls[1], host)
    if connect_timeout is not None:
        sock.settimeout(timeout)
    try:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            f"X-Muster-Protocol: {PROTOCOL}\r\n{extra}\r\n"
        )
        raw = b""
        try:
            sock.sendall(head.encode("utf-8", "replace") + payload)
        except (BrokenPipeError, ConnectionResetError):
            # The server answered before reading all of the body (413: too large) and
            # closed: its answer may be waiting to be read; nothing read is a failure.
            raw = _recv_all(sock)
            if not raw:
                raise
        if not raw:
            if _WAITING_WORK:
                try:
                    _WAITING_WORK.pop(0)()
                except Exception:  # noqa: BLE001, S110 - the work's own user reports its failure
                    pass
            raw = _recv_all(sock, stalled)
    except OSError as e:
        raise ConnectError(f"controller connection failed: {e}", sent=True) from None
    finally:
        sock.close()
    status, data = _parse_response(raw)
    try:
        decoded = loads(data) if data else None
    except (ValueError, UnicodeDecodeError):  # not JSON: a proxy's page, a crashed handler
        raise ApiError(
            status if status >= 400 else 502, f"unexpected reply from the controller (HTTP {status})"
        ) from None
    if status >= 400:
        if isinstance(decoded, dict):
            raise ApiError(status, decoded.get("error", f"HTTP {status}"), decoded.get("code", "error"), decoded)
        raise ApiError(status, f"HTTP {status}")
    return decoded


def default_conf_path() -> str:
    import os

    return os.environ.get("MUSTER_CONF") or os.environ.get("SLURM_CONF_MUSTER") or "/etc/muster/muster.conf"
