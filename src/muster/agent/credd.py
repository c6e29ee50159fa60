"""The credential daemon of a login node (muster's own way; MUNGE is the other,
docs/deploy.md "Login nodes"): it vouches for the users of this host, and does nothing else.

    python -m muster.agent.credd [--conf PATH] [--key FILE] [--host NAME]
    python -m muster.agent.credd keygen HOST FILE [--conf PATH]

* serving (on the login node): listens on ``AgentSocketDir/mustercredd.sock``, where the
  commands look for a credential when the controller's socket is not on this host, and
  answers ``POST /v1/credential`` with a credential for the uid and gid the kernel reports
  for the caller (SO_PEERCRED), signed with this host's key (``protocol.hostcred``).
  ``--key``: the host key (default ``login.key`` beside the configuration); ``--host``: the
  name it was made for (default: the short host name).
* ``keygen HOST FILE`` (on a host holding the cluster key, the head node): writes HOST's
  key to FILE (mode 0600, never overwriting) to be copied to that host only.

It needs no TCP port, no controller and no agent; it holds no cluster key. Exit status: 0
after SIGTERM/SIGINT, 1 when it cannot start (the reason as ``mustercredd: error: ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when used: the daemon starts with little
    from muster.core.config import Config

PROG = "mustercredd"
SOCKET_NAME = "mustercredd.sock"
log = logging.getLogger(PROG)


class StartupError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description="muster's credential daemon for login nodes")
    ap.add_argument("-f", "--conf", default=None, help="config file (default: $MUSTER_CONF or /etc/muster/muster.conf)")
    ap.add_argument("--key", default=None, help="this host's key (default: login.key beside the config)")
    ap.add_argument("--host", default=None, help="the host name the key was made for (default: hostname -s)")
    ap.add_argument("command", nargs="*", help="keygen HOST FILE: make HOST's key (needs the cluster key)")
    return ap


def _config(path: str | None) -> Config:
    from muster.core.config import ConfigError, parse_config
    from muster.protocol.client import default_conf_path

    path = path or default_conf_path()
    try:
        with open(path) as f:
            return parse_config(f.read(), path)
    except OSError as e:
        raise StartupError(f"cannot read {path}: {e.strerror or e}") from None
    except ConfigError as e:
        raise StartupError(str(e)) from None


def keygen(conf: str | None, host: str, out: str) -> str:
    from muster.protocol import hostcred
    from muster.protocol.signing import SignatureError, load_key

    config = _config(conf)
    try:
        key = hostcred.derive_key(load_key(config.auth_key_file), host)
        hostcred.write_key(out, key)
    except OSError as e:
        raise StartupError(f"{e.filename or out}: {e.strerror or e}") from None
    except (SignatureError, ValueError) as e:
        raise StartupError(str(e)) from None
    return f"{PROG}: wrote the key of login host {host} to {out} (mode 0600): copy it to that host only\n"


def credential_app(host_key: bytes, host: str) -> object:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from muster.core.clock import SystemClock
    from muster.protocol import hostcred
    from muster.protocol.httpd import PEER_KEY

    clock = SystemClock()

    async def credential(request: Request) -> JSONResponse:
        peer = request.scope.get(PEER_KEY)
        if not peer:
            return JSONResponse({"error": "credentials are only issued on the local socket", "code": "auth"}, 403)
        _pid, uid, gid = peer
        return JSONResponse({"credential": hostcred.make_credential(host_key, uid, gid, host, clock.now())})

    return Starlette(routes=[Route("/v1/credential", credential, methods=["POST"])])


def serve(conf: str | None, key_path: str | None, host: str | None) -> None:
    from muster.protocol import hostcred
    from muster.protocol.httpd import bind_unix, make_server
    from muster.protocol.signing import SignatureError, load_key

    config = _config(conf)
    host = host or socket.gethostname().split(".")[0]
    try:
        hostcred.check_host(host)
    except ValueError as e:
        raise StartupError(str(e)) from None
    key_path = key_path or os.path.join(os.path.dirname(config.path), "login.key")
    try:
        key = load_key(key_path)
    except FileNotFoundError:
        raise StartupError(
            f"no host key {key_path}: make it on the head node (python -m muster.agent.credd keygen {host} FILE)"
        ) from None
    except OSError as e:
        raise StartupError(f"{key_path}: {e.strerror or e}") from None
    except SignatureError as e:
        raise StartupError(str(e)) from None
    directory = config.agent_socket_dir
    if not directory:
        raise StartupError("AgentSocketDir is not set: the commands would not find this daemon's socket")
    path = os.path.join(directory, SOCKET_NAME)
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        sock = bind_unix(path)
    except OSError as e:
        raise StartupError(f"cannot listen on {path}: {e.strerror or e}") from None
    server = make_server(credential_app(key, host))
    log.info("%s for login host %s: listening on %s", PROG, host, path)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {PROG}: %(message)s")
    try:
        if args.command:
            if args.command[0] != "keygen" or len(args.command) != 3:
                sys.stderr.write(f"{PROG}: error: usage: keygen HOST FILE (got {' '.join(args.command)!r})\n")
                return 2
            sys.stdout.write(keygen(args.conf, args.command[1], args.command[2]))
            return 0
        serve(args.conf, args.key, args.host)
    except StartupError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
