"""``musterrestd``: Slurm's REST API (data_parser v0.0.40 to v0.0.45) for muster, as slurmrestd serves it.

    musterrestd [-f CONF] [-a rest_auth/jwt,rest_auth/local] [-L LOGFILE] LISTEN...

``LISTEN`` is ``HOST:PORT`` (TCP: every request carries a token) or ``unix:/PATH`` (a local
socket: a token, or no token when the peer is musterrestd's own user). musterrestd holds no
secret: the controller checks each token (docs/rest.md, docs/security.md).

Signals, as Slurm's daemons (``protocol.daemonsignals``): SIGHUP rereads the configuration
file (how to reach the controller, ClusterName) and serves the next requests with it (a
file that cannot be read or parsed is logged and the running one kept); SIGUSR2 reopens
the log file (``-L``); SIGTERM/SIGINT stop it within about two seconds, exit status 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from muster import VERSION_STRING
from muster.protocol import daemonsignals
from muster.protocol.logjson import setup_logging


def parse_listen(text: str) -> tuple[str, str | int]:
    """``unix:/path`` -> ("unix", path); ``host:port`` or ``:port`` -> (host, port)."""
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if not path.startswith("/"):
            raise ValueError(f"unix socket path must be absolute: {text}")
        return "unix", path
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"invalid listen address (HOST:PORT or unix:/PATH): {text}")
    return host or "0.0.0.0", int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="musterrestd", description="muster's REST API daemon (slurmrestd-compatible)")
    ap.add_argument("listen", nargs="+", help="HOST:PORT or unix:/PATH (several may be given)")
    ap.add_argument("-f", "--conf", default=None, help="config file (default: $MUSTER_CONF or /etc/muster/muster.conf)")
    ap.add_argument(
        "-a",
        "--auth",
        default="rest_auth/local,rest_auth/jwt",
        help="authentication plugins, comma separated: rest_auth/local (Unix socket peer), rest_auth/jwt",
    )
    ap.add_argument("-s", "--openapi-plugins", default=None, help="accepted for slurmrestd compatibility")
    ap.add_argument(
        "-d",
        "--data-parser",
        default=None,
        help="accepted for slurmrestd compatibility (v0.0.40 to v0.0.45; all are served)",
    )
    ap.add_argument("-L", "--log-file", default=None, help="log to this file (mode 0600) instead of stderr")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    ap.add_argument("-V", "--version", action="version", version=VERSION_STRING)
    args = ap.parse_args(argv)
    if args.conf:
        os.environ["MUSTER_CONF"] = args.conf
    try:
        listeners = [parse_listen(x) for x in args.listen]
    except ValueError as e:
        print(f"musterrestd: error: {e}", file=sys.stderr)
        return 1
    plugins = {p.strip() for p in args.auth.split(",") if p.strip()}
    unknown = plugins - {"rest_auth/local", "rest_auth/jwt"}
    if unknown:
        print(f"musterrestd: error: unknown authentication plugin: {sorted(unknown)[0]}", file=sys.stderr)
        return 1
    if args.data_parser:  # slurmrestd's -d: every version named must be one served (all are)
        from muster.rest.versions import VERSIONS

        names = [p.strip() for p in args.data_parser.split(",") if p.strip()]
        missing = [n for n in names if n.removeprefix("data_parser/").split("+")[0] not in VERSIONS]
        if missing:
            served = ", ".join(VERSIONS)
            print(f"musterrestd: error: data parser {missing[0]} not available ({served} are)", file=sys.stderr)
            return 1
    from muster.client.settings import load_settings
    from muster.core.errors import CommandError

    daemonsignals.early("musterrestd")  # from here on SIGHUP and SIGUSR2 never kill it
    try:
        settings = load_settings("musterrestd")
    except CommandError as e:
        print(f"musterrestd: error: {e.message}", file=sys.stderr)
        return 1
    setup_logging(
        None, daemon="musterrestd", filename=args.log_file, level=logging.DEBUG if args.verbose > 1 else logging.INFO
    )
    from muster.protocol.httpd import bind_tcp, bind_unix

    try:
        sockets = [bind_unix(str(p)) if h == "unix" else bind_tcp(str(h), int(p)) for h, p in listeners]
    except OSError as e:
        print(f"musterrestd: error: cannot listen: {e.strerror or e}", file=sys.stderr)
        return 1
    return asyncio.run(serve(settings, sockets, "rest_auth/local" in plugins))


class Reloadable:
    """The REST app of the configuration read last: SIGHUP builds a new one, which the
    next requests get (those in flight finish with the one they started with)."""

    def __init__(self, settings, local: bool) -> None:  # type: ignore[no-untyped-def]
        from muster.rest.app import build_app

        self.local = local
        self.settings = settings
        self.app = build_app(settings, local=local)

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await self.app(scope, receive, send)

    def reload(self) -> None:
        from muster.client.settings import conf_path, parse_client_settings
        from muster.core.config import ConfigError, parse_config
        from muster.rest.app import build_app

        log = logging.getLogger("musterrestd")
        path = conf_path()
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            parse_config(text, path)  # checked whole, as the other daemons check it
        except OSError as e:
            log.error("SIGHUP: cannot read %s: %s; the running configuration is kept", path, e.strerror)
            return
        except ConfigError as e:
            log.error("SIGHUP: %s; the running configuration is kept", e)
            return
        fresh = parse_client_settings(text, path)
        self.app = build_app(fresh, local=self.local)
        before, self.settings = self.settings, fresh
        log.info(
            "reconfigure: %s read: ClusterName=%s, controller%s %s (was %s)",
            fresh.path,
            fresh.cluster_name,
            "s" if len(fresh.ctld_hosts) > 1 else "",
            ",".join(fresh.ctld_hosts),
            ",".join(before.ctld_hosts),
        )


async def serve(settings, sockets, local: bool) -> int:  # type: ignore[no-untyped-def]
    from muster.protocol.httpd import make_server
    from muster.rest.app import refusal_document

    app = Reloadable(settings, local)

    def refusal(scope, status, message, code):  # type: ignore[no-untyped-def]
        return refusal_document(scope, status, message, code, app.settings.cluster_name)

    server = daemonsignals.quiet(make_server(app, refusal=refusal))

    def stop() -> None:
        server.should_exit = True

    daemonsignals.install(asyncio.get_running_loop(), "musterrestd", reconfigure=app.reload, stop=stop)
    await server.serve(sockets=sockets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
