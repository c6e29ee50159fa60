"""A command's side of a TLS link (``TLSType=tls/muster``), over the C module ``_ssl``.

``import ssl`` costs a command 15-20 ms of CPU (``enum``, ``socket``, ``base64``,
``collections``, ``re``, and ``encodings.idna`` for each server name); the C module behind it
costs 2-3 ms. srun opens a TLS link to a node for every step, so the commands use the C
module directly, with the same checks as ``tls.client_context``:

* the context is ``PROTOCOL_TLS_CLIENT``, which makes OpenSSL require the server's
  certificate (``CERT_REQUIRED``) and check that it names ``server_name``
  (``check_hostname``: OpenSSL's own host check, as ``ssl`` does it); both are verified
  here, and a context that does not have them is refused;
* TLS 1.2 at least, and only the cluster CA is trusted (no system store);
* the handshake happens before any byte of the request is written (``begin`` sends only
  the client's first message and ``finish`` completes and checks the rest: srun begins
  with every node it launches on at once, so that the nodes' halves overlap).

A server name that is not plain ASCII (``ssl`` would IDNA-encode it; muster's names are
host names) raises ``ValueError``: the caller uses ``ssl`` for it (note that ``ssl``'s
``SSLCertVerificationError`` is a ``ValueError`` too). ``TLSSocket`` offers what
the commands' clients use of a socket: ``recv``, ``sendall``, ``pending``, ``fileno``,
``getsockname``, ``close``; ``recv`` returns ``b""`` at the end of the stream, a TLS
close or a bare TCP one (``ssl``'s ``suppress_ragged_eofs``).
"""

from __future__ import annotations

import _socket
import _ssl
import os

TYPE_CHECKING = False  # typing is not imported on the commands' hot path
if TYPE_CHECKING:
    from typing import Any

__all__ = ["TLSSocket", "begin", "context", "wrap"]

TLS_1_2 = 0x0303  # ssl.TLSVersion.TLSv1_2
CERT_REQUIRED = 2  # ssl.CERT_REQUIRED

SSLError = _ssl.SSLError
CertificateError = _ssl.SSLCertVerificationError

_CONTEXTS: dict[str, Any] = {}  # CA file -> _ssl._SSLContext, made once per process


class CAError(Exception):
    """The cluster CA certificate cannot be read; the message names the file."""


def context(ca_cert: str) -> Any:
    """The client context trusting only ``ca_cert`` (made once per process). Raises
    ``CAError``."""
    ctx = _CONTEXTS.get(ca_cert)
    if ctx is None:
        ctx = _CONTEXTS[ca_cert] = _make(ca_cert)
    return ctx


def _make(ca_cert: str) -> Any:
    if not os.path.exists(ca_cert):
        raise CAError(f"cluster CA certificate missing: {ca_cert} (run `muster keygen --conf`)")
    ctx = _ssl._SSLContext(_ssl.PROTOCOL_TLS_CLIENT)
    if ctx.verify_mode != CERT_REQUIRED or not ctx.check_hostname:  # never weaker than ssl's
        raise CAError("this Python's TLS client context does not verify servers")
    ctx.minimum_version = TLS_1_2
    try:
        ctx.load_verify_locations(ca_cert)
    except (OSError, SSLError) as e:
        raise CAError(f"cannot load the cluster CA certificate {ca_cert}: {e}") from None
    return ctx


class _Socket(_socket.socket):
    """``_ssl`` holds its socket by a weak reference, which the C type alone does not take."""

    __slots__ = ("__weakref__",)


class TLSSocket:
    """A connected socket after a verified handshake (or, from ``begin``, one whose
    handshake ``finish`` completes). Its timeout is the socket's own (``_ssl`` waits on the
    socket within it)."""

    __slots__ = ("sock", "tls")

    def __init__(self, sock: Any, tls: Any) -> None:
        self.sock = sock
        self.tls = tls

    def finish(self) -> None:
        """Complete the handshake ``begin`` started (nothing once it is done). Raises what
        ``wrap`` raises."""
        try:
            self.tls.do_handshake()
        except BaseException:
            self.sock.close()
            raise

    def recv(self, size: int) -> bytes:
        try:
            return bytes(self.tls.read(size))
        except (_ssl.SSLEOFError, _ssl.SSLZeroReturnError):
            return b""

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        sent = 0
        while sent < len(view):
            sent += self.tls.write(view[sent:])

    def pending(self) -> int:
        return int(self.tls.pending())

    def settimeout(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout)

    def gettimeout(self) -> float | None:
        t = self.sock.gettimeout()
        return None if t is None else float(t)

    def fileno(self) -> int:
        return int(self.sock.fileno())

    def getsockname(self) -> Any:
        return self.sock.getsockname()

    def close(self) -> None:
        self.sock.close()


def begin(sock: Any, ca_cert: str, server_name: str) -> TLSSocket:
    """Like ``wrap``, but only the handshake's first message is sent: ``finish`` waits for
    the server's answer and checks it. srun starts the handshakes with all the nodes it
    launches on before finishing the first, so that each node's part overlaps the others'.
    Nothing may be written before ``finish``."""
    if not server_name.isascii():
        raise ValueError(f"not an ASCII host name: {server_name!r}")
    ctx = context(ca_cert)
    timeout = sock.gettimeout()
    own = _Socket(fileno=sock.detach())
    try:
        own.settimeout(0.0)
        tls = ctx._wrap_socket(own, False, server_name)
        try:
            tls.do_handshake()
        except (_ssl.SSLWantReadError, _ssl.SSLWantWriteError):
            pass  # the server's turn: finish() waits for it
        own.settimeout(timeout)
    except BaseException:
        own.close()
        raise
    return TLSSocket(own, tls)


def wrap(sock: Any, ca_cert: str, server_name: str) -> TLSSocket:
    """``sock`` (connected, with its timeout set; detached here) after the handshake with a server whose
    certificate chains to ``ca_cert`` and names ``server_name``. Raises ``CAError``,
    ``ValueError`` (a name that is not ASCII), or an ``OSError`` (``SSLError``,
    ``SSLCertVerificationError`` with its ``verify_message``, a timeout, a reset)."""
    if not server_name.isascii():
        raise ValueError(f"not an ASCII host name: {server_name!r}")
    ctx = context(ca_cert)
    timeout = sock.gettimeout()
    own = _Socket(fileno=sock.detach())  # the same connection, as a type _ssl can hold
    try:
        own.settimeout(timeout)
        tls = ctx._wrap_socket(own, False, server_name)
        tls.do_handshake()
    except BaseException:
        own.close()
        raise
    return TLSSocket(own, tls)
