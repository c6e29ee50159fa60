"""TLS contexts for muster's links (``TLSType=tls/muster``), from the standard library's ``ssl``.

* ``server_context``: a daemon's listening side. It presents the daemon's certificate and
  asks the peer for one: a certificate that does not chain to the cluster CA ends the
  handshake; no certificate at all is allowed (the commands have none) and leaves the
  request to be judged by its credential, while a signed daemon message must come with a
  certificate naming its sender (``httpd.Verifier``).
* ``client_context``: the calling side. It checks that the server's certificate chains to
  the cluster CA and names the one it meant to reach (the connection's ``server_hostname``
  is a muster name: ``ctld`` or a node name, never an address); a daemon also presents its
  own certificate.
* ``peer_name``: the holder named by a verified peer certificate: its subject's CN, or for
  a host certificate the hostlist of the nodes it speaks for (``core.tlsconf``).

Importing ``ssl`` costs a command tens of milliseconds: commands import this module only
when they open a TLS connection.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from muster.core.tlsconf import NODES_URI, TLSFiles

__all__ = ["TLSError", "client_context", "daemon_contexts", "describe_failure", "peer_name", "server_context"]


class TLSError(Exception):
    """A certificate or key that cannot be loaded; the message names the file."""


def _load_chain(ctx: ssl.SSLContext, files: TLSFiles) -> None:
    for path in (files.cert, files.key):
        if not os.path.exists(path):  # ssl's own error does not name the file
            raise TLSError(f"TLS certificate for {files.name} missing: {path} (run `muster keygen --conf`)")
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as e:
        raise TLSError(f"cannot load the TLS certificate {files.cert} and key {files.key}: {e}") from None


def _load_ca(ctx: ssl.SSLContext, ca_cert: str) -> None:
    if not os.path.exists(ca_cert):
        raise TLSError(f"cluster CA certificate missing: {ca_cert} (run `muster keygen --conf`)")
    try:
        ctx.load_verify_locations(cafile=ca_cert)
    except (OSError, ssl.SSLError) as e:
        raise TLSError(f"cannot load the cluster CA certificate {ca_cert}: {e}") from None


def server_context(files: TLSFiles) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, files)
    _load_ca(ctx, files.ca_cert)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    # No TLS 1.3 session tickets: no client here resumes a session (a command is one
    # connection; asyncio and httpx never offer one), so each ticket was work and bytes
    # for nothing on every connection (srun's launches, every command over TCP).
    ctx.num_tickets = 0
    return ctx


def client_context(ca_cert: str, files: TLSFiles | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_ca(ctx, ca_cert)
    if files is not None:
        _load_chain(ctx, files)
    return ctx


def peer_name(cert: dict[str, Any] | None) -> str | None:
    """Who a certificate ``getpeercert()`` returned (verified) names: the hostlist of a host
    certificate's ``URI:muster:nodes:`` name, else the subject's common name."""
    if not cert:
        return None
    for kind, value in cert.get("subjectAltName", ()):
        if kind == "URI" and str(value).startswith(NODES_URI):
            return str(value)[len(NODES_URI) :]
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def describe_failure(exc: BaseException) -> str:
    """Why a handshake failed, in a few words for the daemon's log."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate not accepted ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or ""
        if reason == "HTTP_REQUEST":
            return "plain HTTP sent to a TLS port (TLSType=tls/muster)"
        if reason in ("WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "UNSUPPORTED_PROTOCOL"):
            return f"not a TLS client ({reason.lower()})"
        if "CERTIFICATE" in reason:
            return f"certificate not accepted ({reason.lower().replace('_', ' ')})"
        return f"TLS handshake failed ({reason.lower().replace('_', ' ') or exc})"
    if isinstance(exc, TimeoutError):
        return "TLS handshake timed out"
    return f"TLS handshake failed ({type(exc).__name__}: {exc})"


def daemon_contexts(files: TLSFiles) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A daemon's (server, client) contexts, both presenting its certificate ``files``."""
    return server_context(files), client_context(files.ca_cert, files)
