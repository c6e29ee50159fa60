"""``musterctld``: the controller process.

Under signals it behaves like slurmctld (``protocol.daemonsignals``): SIGHUP rereads the
configuration file as ``scontrol reconfigure`` does (``ctld.reconfig.apply_file``), SIGUSR2
reopens the log file, SIGTERM and SIGINT stop it within about two seconds whatever its
clients' and agents' connections are doing, and it exits 0. One controller per state
directory: it holds ``ctld.statelock``'s lock from before its store is opened until the
process ends. Everything it writes is private: the umask is 077 whatever it was given, the
state directory 0700 (0711 with the Unix socket in it), the store's files 0600.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING

from muster import VERSION_STRING
from muster.core.config import ConfigError, parse_config
from muster.core.errors import StorageError
from muster.core.extras import MissingExtra
from muster.ctld.reconfig import read_topology
from muster.ctld.reconfig_plan import validate
from muster.ctld.statelock import StateLocked, hold, private_dir
from muster.protocol import daemonsignals
from muster.protocol.client import default_conf_path
from muster.protocol.logjson import setup_logging
from muster.protocol.signing import SignatureError, load_key

if TYPE_CHECKING:  # imported where they run (start-up time)
    from muster.ctld.rpcstats import RpcStats
    from muster.ctld.standby import HaController


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="musterctld", description="muster's controller daemon")
    ap.add_argument("-f", "--conf", default=None, help="config file (default: $MUSTER_CONF or /etc/muster/muster.conf)")
    ap.add_argument("-L", "--log-file", default=None, help="log to this file instead of stderr")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    ap.add_argument(
        "-D", "--foreground", action="store_true", help="accepted for Slurm compatibility; always foreground"
    )
    ap.add_argument(
        "--index",
        type=int,
        default=None,
        metavar="N",
        help="which SlurmctldHost line this controller is (0: the primary; default: the first "
        "whose host is this host's name, else 0)",
    )
    ap.add_argument("-V", "--version", action="version", version=VERSION_STRING)
    args = ap.parse_args(argv)
    os.umask(0o077)  # its files hold users' scripts, environments and keys: docs/security.md
    daemonsignals.early("musterctld")

    path = args.conf or default_conf_path()
    try:
        with open(path) as f:
            config = parse_config(f.read(), path)
        problems = validate(config)  # the checks scontrol reconfigure makes too
        if problems:
            raise ConfigError("; ".join(problems))
        read_topology(config, path)
        index = controller_index(config, args.index)
        key = load_key(config.auth_key_file)
    except OSError as e:
        print(f"musterctld: error: {e.filename or path}: {e.strerror}", file=sys.stderr)
        return 1
    except (ConfigError, SignatureError) as e:
        print(f"musterctld: error: {e}", file=sys.stderr)
        return 1
    setup_logging(
        config.get("LogFormat"),
        daemon="musterctld",
        filename=args.log_file,
        level=logging.DEBUG if args.verbose > 1 else logging.INFO,
    )
    for w in config.warnings:
        logging.getLogger("musterctld").warning("%s", w)
    tls = None
    if config.tls.enabled:  # the certificates are checked before anything starts
        from muster.protocol.tls import TLSError, daemon_contexts

        try:
            tls = daemon_contexts(config.tls.ctld())
        except TLSError as e:
            print(f"musterctld: error: {e}", file=sys.stderr)
            return 1
        logging.getLogger("musterctld").info("TLS on (TLSType=tls/muster): CA %s", config.tls.ca_cert)
    try:  # before the store is opened, for as long as the process lives
        private_dir(config.state_save_location, users_reach(config, index))
        lock = hold(config.state_save_location, index)
    except OSError as e:
        print(f"musterctld: error: {e.filename or config.state_save_location}: {e.strerror}", file=sys.stderr)
        return 1
    except StateLocked as e:
        print(f"musterctld: error: {e}; not starting a second controller on it", file=sys.stderr)
        return 1
    try:
        return asyncio.run(serve(config, key, tls, index))
    except ConfigError as e:  # a value read when the controller loads (accounting, scheduler)
        where = "" if str(e).startswith(path) else f"{path}: "
        print(f"musterctld: error: {where}{e}", file=sys.stderr)
        return 1
    except MissingExtra as e:  # PostgreSQL configured, psycopg not installed
        print(f"musterctld: error: {e}", file=sys.stderr)
        return 1
    except StorageError as e:  # the store cannot be opened: a newer schema, a lock, a disk
        print(f"musterctld: error: {e}", file=sys.stderr)
        return 1
    finally:
        os.close(lock)  # the store is closed: the next controller may open it


def users_reach(config, index: int) -> list[str]:  # type: ignore[no-untyped-def]
    """What other users must reach by name, which may lie in the state directory: the
    controller's socket, and an agent's spool and sockets on the same host."""
    spool = (config.get("SlurmdSpoolDir") or "/var/spool/muster").split("%")[0]  # musterd's default
    return [config.ctld_socket_for(index), spool, config.get("AgentSocketDir") or ""]


def controller_index(config, wanted: int | None) -> int:  # type: ignore[no-untyped-def]
    """Which ``SlurmctldHost`` this process is; several need the PostgreSQL store."""
    from muster.core.config import ConfigError
    from muster.ctld.store_pg import dsn_from_config

    hosts = config.ctld_addrs
    if wanted is None:
        import socket

        me = socket.gethostname().split(".")[0]
        wanted = next((i for i, (host, _addr) in enumerate(hosts) if host.split(".")[0] == me), 0)
    if not 0 <= wanted < len(hosts):
        raise ConfigError(f"--index {wanted}: the configuration lists {len(hosts)} SlurmctldHost line(s)")
    if len(config.ctld_hosts) > 1 and dsn_from_config(config) is None:
        raise ConfigError(
            "several SlurmctldHost lines (a primary and backups) need the PostgreSQL store, which they "
            "share: set AccountingStorageType=accounting_storage/postgresql or AccountingStorageURL"
        )
    return wanted


async def serve(config, key, tls=None, index: int = 0) -> int:  # type: ignore[no-untyped-def]
    from muster.core.conftypes import instance_path
    from muster.protocol.httpd import bind_tcp, bind_unix, body_limit, make_server

    ha = len(config.ctld_hosts) > 1
    asgi: HaController | RpcStats
    if ha:  # high availability: standby until elected (ctld.standby)
        from muster.ctld.standby import HaController
        from muster.ctld.store_pg import dsn_from_config

        dsn = dsn_from_config(config)
        assert dsn is not None  # several controllers without PostgreSQL: refused by controller_index
        asgi = HaController(config, key, dsn, index, tls_client=tls[1] if tls else None)
    else:
        from muster.ctld.app import CtldApp

        ctld = CtldApp(config, key, tls_client=tls[1] if tls else None)
        asgi = ctld.asgi
    addr = config.ctld_addrs[index][1]
    sockets = [bind_tcp(addr, config.ctld_port), bind_unix(config.ctld_socket_for(index))]
    server = daemonsignals.quiet(
        make_server(asgi, body_limit=body_limit(config.max_script_size), tls=tls[0] if tls else None)
    )

    def reconfigure() -> None:
        from muster.core.errors import InvalidRequest, StorageError
        from muster.ctld.reconfig import apply_file

        app = getattr(asgi, "app", None) if ha else ctld  # high availability: the active one, if this is
        if app is None:
            logging.getLogger("musterctld").info("SIGHUP: standby; the file is read when this controller takes over")
            return
        try:
            apply_file(app)
        except (InvalidRequest, StorageError) as exc:  # logged by reconfigure too, with each refusal
            logging.getLogger("musterctld").error("SIGHUP: %s", exc)

    def stop() -> None:
        server.should_exit = True

    daemonsignals.install(asyncio.get_running_loop(), "musterctld", reconfigure=reconfigure, stop=stop)
    pidfile = instance_path(os.path.join(config.state_save_location, "musterctld.pid"), index)
    with open(pidfile, "w") as f:
        f.write(f"{os.getpid()}\n")
    await server.serve(sockets=sockets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
