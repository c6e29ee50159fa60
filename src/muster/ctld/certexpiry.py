"""When the controller's TLS certificates expire, for ``/metrics`` (``TLSType=tls/muster``).

``CertExpiry`` is a Prometheus collector registered in the controller's registry
(``ServerStats.registry``): at each scrape it exports
``muster_tls_cert_expiry_timestamp_seconds{cert="ctld"|"ca"}``, the ``notAfter`` of the
controller's certificate and of the cluster CA as epoch seconds, read from the files
``TLSParameters`` names (``core.tlsconf``). A file is decoded again only when its mtime
changes (a renewed certificate shows at the next scrape; the controller itself loads a new
certificate when it restarts). A file that cannot be read or decoded is left out of the
scrape and ``muster_tls_cert_readable{cert=}`` says 0, so that an alert can tell
"expires soon" from "cannot be checked" (docs/runbook.md, "Certificate expiry").

Decoding uses the standard library's certificate decoder (``ssl``'s, the one
``ssl.SSLSocket.getpeercert`` uses), not a package of its own.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from muster.core.conftypes import Config

__all__ = ["CertExpiry", "not_after"]


def not_after(path: str) -> float:
    """The certificate's ``notAfter`` (epoch seconds); OSError or ValueError when it
    cannot be read or decoded."""
    decode: Callable[[str], dict[str, Any]] | None = getattr(ssl._ssl, "_test_decode_cert", None)  # type: ignore[attr-defined]
    if decode is None:
        raise ValueError("this Python cannot decode certificates")
    try:
        info = decode(path)
    except ssl.SSLError as exc:
        raise ValueError(str(exc)) from None
    return float(ssl.cert_time_to_seconds(info["notAfter"]))


class CertExpiry(Collector):
    def __init__(self, config: Callable[[], Config]) -> None:
        self.config = config  # read at each scrape: reconfigure may name other files
        self._cache: dict[str, tuple[float, float]] = {}  # path -> (mtime, notAfter)

    def _expiry(self, path: str) -> float | None:
        try:
            mtime = os.stat(path).st_mtime
            cached = self._cache.get(path)
            if cached is not None and cached[0] == mtime:
                return cached[1]
            value = not_after(path)
        except (OSError, ValueError):
            self._cache.pop(path, None)
            return None
        self._cache[path] = (mtime, value)
        return value

    def collect(self) -> Iterator[GaugeMetricFamily]:
        tls = self.config().tls
        if not tls.enabled:
            return
        expiry = GaugeMetricFamily(
            "muster_tls_cert_expiry_timestamp_seconds",
            "When the certificate stops being valid (notAfter, epoch seconds)",
            labels=["cert"],
        )
        readable = GaugeMetricFamily(
            "muster_tls_cert_readable", "1 when the certificate file could be read and decoded", labels=["cert"]
        )
        for name, path in (("ctld", tls.ctld().cert), ("ca", tls.ca_cert)):
            value = self._expiry(path)
            readable.add_metric([name], 0.0 if value is None else 1.0)
            if value is not None:
                expiry.add_metric([name], value)
        yield expiry
        yield readable
