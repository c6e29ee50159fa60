"""``muster dashboard``: a one-time link that signs this user into the controller's web
dashboard (docs/dashboard.md).

The command proves who runs it exactly as squeue does (the controller's socket, or a
credential from the node agent); the controller answers a login token that works once,
within a minute, and the browser exchanges it for a session cookie.
"""

from __future__ import annotations

import sys

from muster.cli.common import CommandError, report
from muster.client.controller import connect, connect_message
from muster.client.settings import load_settings

PROG = "muster dashboard"


def base_url(settings: object, given: str | None) -> str:
    """Where a browser reaches the controller: ``--base-url``, else its address and port
    (its host name when it listens on every address)."""
    if given:
        return given.rstrip("/")
    addr = settings.ctld_addr  # type: ignore[attr-defined]
    if addr in ("0.0.0.0", "::", ""):
        addr = settings.ctld_host  # type: ignore[attr-defined]
    if ":" in addr:
        addr = f"[{addr}]"
    scheme = "https" if settings.tls_ca else "http"  # type: ignore[attr-defined]  # TLSType=tls/muster
    return f"{scheme}://{addr}:{settings.ctld_port}"  # type: ignore[attr-defined]


def run(base: str | None) -> int:
    from muster.protocol.client import ApiError, ConnectError

    if base is not None and not base.startswith(("http://", "https://")):
        print(f"{PROG}: error: --base-url must start with http:// or https://, not {base!r}", file=sys.stderr)
        return 2
    try:
        settings = load_settings(PROG)
        ctl = connect(PROG, settings)
        answer = ctl.post("/v1/dashboard/token")
    except CommandError as e:
        return report(PROG, e)
    except ConnectError as e:
        print(f"{PROG}: error: {connect_message(e)}", file=sys.stderr)
        return 1
    except ApiError as e:
        print(f"{PROG}: error: {e.message}", file=sys.stderr)
        return 1
    path = answer.get("path")
    if not isinstance(path, str) or not path.startswith("/dash/"):
        print(f"{PROG}: error: unexpected reply from the controller", file=sys.stderr)
        return 1
    print(
        f"Open this link in a browser within a minute; it signs {answer.get('user', 'you')} in once"
        " (the session lasts 8 hours):",
        file=sys.stderr,
    )
    print(base_url(settings, base) + path)
    return 0
