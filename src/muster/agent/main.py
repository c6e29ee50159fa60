"""``musterd``: the node agent process.

    musterd [--conf PATH] [--node NAME|HOSTLIST] [--state-dir DIR] [--log-file FILE]
            [--gpu-detect auto|nvidia|emulate] [-D] [-v] [-V]
    musterd -C [--node NAME]

* ``--conf``: the cluster config (default ``$MUSTER_CONF``, else /etc/muster/muster.conf);
  its ``AuthKeyFile`` holds the cluster key.
* ``--node``: this node's ``NodeName`` (default: the short host name), like ``slurmd -N``.
  A hostlist of several (``node[1-64]``) makes this one process host all of them, each
  still its own node (``muster.agent.host``): for emulating large clusters in tests; a
  real machine runs one musterd for its one node.
* ``--state-dir``: where job records, pending reports and spooled scripts live (default:
  ``SlurmdSpoolDir`` with ``%n`` replaced by the node name, or that directory plus
  ``/<node>`` when it has no ``%n``; without ``SlurmdSpoolDir``: /var/spool/muster/<node>).
  For several nodes it holds ``%n`` (replaced by each node's name) or is the directory
  of their state directories (``DIR/<node>``).
* ``--gpu-detect``: see ``muster.agent.gpus`` (default ``$MUSTER_GPU_DETECT`` or ``auto``).
* ``-C``: print this machine's real hardware as a slurm.conf node line plus its uptime
  (``slurmd -C``; ``muster.agent.hardware``) and exit; reads no configuration.
* ``-D``: accepted for Slurm compatibility; musterd always stays in the foreground (run it
  under systemd or ``muster up``).

Exit status: 0 after a graceful stop (SIGTERM/SIGINT; running jobs are left running),
1 when it cannot start (the reason is printed as ``musterd: error: ...``).

Signals, as slurmd's (``protocol.daemonsignals``): SIGHUP rereads the configuration file
and applies what a running agent can (``reconfigure``: the Prolog, the Epilog, the health
check's program, interval and states, PrologEpilogTimeout; the rest is logged as needing a
restart), SIGUSR2 reopens the log file, SIGTERM/SIGINT stop the agent (jobs keep running).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys

from muster import VERSION_STRING
from muster.agent.daemon import AgentDaemon, AgentSettings, StartupError, file_config_hash
from muster.agent.gpus import MODES
from muster.agent.host import NodeField, serve_nodes
from muster.core.config import Config, ConfigError, parse_config
from muster.core.hostlist import HostlistError, expand
from muster.core.topoconf import attach_topology, topology_path, wants_topology
from muster.protocol import daemonsignals
from muster.protocol.client import default_conf_path
from muster.protocol.logjson import setup_logging
from muster.protocol.signing import SignatureError, load_key

__all__ = ["default_state_dir", "main"]

DEFAULT_SPOOL = "/var/spool/muster"


def default_state_dir(config: Config, node: str) -> str:
    spool = config.get("SlurmdSpoolDir")
    if not spool:
        return os.path.join(DEFAULT_SPOOL, node)
    if "%n" in spool:
        return spool.replace("%n", node).replace("%h", socket.gethostname().split(".")[0])
    return os.path.join(spool, node)


def _state_dir(given: str | None, config: Config, node: str, several: bool) -> str:
    if given is None:
        return default_state_dir(config, node)
    if "%n" in given:
        return given.replace("%n", node)
    return os.path.join(given, node) if several else given


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="musterd", description="muster's node agent")
    ap.add_argument("-f", "--conf", default=None, help="config file (default: $MUSTER_CONF or /etc/muster/muster.conf)")
    ap.add_argument(
        "-N",
        "--node",
        default=None,
        help="this node's NodeName (default: the short host name); a hostlist such as node[1-64] "
        "hosts all those nodes in this one process (emulation for tests; one node per machine otherwise)",
    )
    ap.add_argument("--state-dir", default=None, help="job records, reports and spooled scripts")
    ap.add_argument("-L", "--log-file", default=None, help="log to this file instead of stderr")
    ap.add_argument(
        "--gpu-detect",
        choices=MODES,
        default=os.environ.get("MUSTER_GPU_DETECT") or "auto",
        help="how to find GPUs: auto (detect, else emulate the configured count), nvidia, emulate",
    )
    ap.add_argument(
        "-C",
        dest="print_hardware",
        action="store_true",
        help="print this machine's hardware as a slurm.conf node line and its uptime, and exit",
    )
    ap.add_argument(
        "-D", "--foreground", action="store_true", help="accepted for Slurm compatibility; always foreground"
    )
    ap.add_argument("-v", "--verbose", action="count", default=0)
    ap.add_argument("-V", "--version", action="version", version=VERSION_STRING)
    return ap


def _fail(message: str) -> int:
    print(f"musterd: error: {message}", file=sys.stderr)
    return 1


def _read_topology(config: Config, path: str) -> None:
    """topology.conf beside the config, for SLURM_TOPOLOGY_ADDR. The controller refuses a
    bad one; a node goes on without it (its jobs then see the node name alone)."""
    where = topology_path(path)
    try:
        if wants_topology(config):
            with open(where, encoding="utf-8") as f:
                attach_topology(config, f.read(), where)
    except (OSError, ConfigError) as exc:
        logging.getLogger("musterd").warning("topology not read: %s", exc)


def print_hardware(node: str | None) -> int:
    """``musterd -C``: the real CPUs, memory and NVIDIA GPUs, never the configuration's."""
    from muster.agent import gpus, hardware

    logging.getLogger(gpus.__name__).setLevel(logging.ERROR)  # no GPU is not a warning here
    found = gpus.detect(0, None, "nvidia")
    name = node or socket.gethostname().split(".")[0]
    print(hardware.slurmd_line(name, hardware.probe(), found.count))
    return 0


def reconfigure(daemons: list[AgentDaemon], path: str) -> None:
    """SIGHUP: read ``path`` again; each node takes what a running agent applies (its
    hooks), and says so; a file that does not parse, or no longer names a node, changes
    nothing."""
    log = logging.getLogger("musterd")
    try:
        with open(path, encoding="utf-8") as f:
            fresh = parse_config(f.read(), path)
    except OSError as exc:
        log.error("SIGHUP: cannot read %s: %s; the running configuration is kept", path, exc.strerror)
        return
    except ConfigError as exc:
        log.error("SIGHUP: %s; the running configuration is kept", exc)
        return
    missing = [d.node.name for d in daemons if fresh.node(d.node.name) is None]
    if missing:
        log.error("SIGHUP: %s no longer defines node %s; the running configuration is kept", path, missing[0])
        return
    digest = file_config_hash(path)
    for daemon in daemons:
        daemon.config_hash = digest  # said at the next heartbeat (``ctld.agents``)
        if daemon.link is not None:
            daemon.link.config_hash = digest
        changed = daemon.hooks.configure(fresh)
        if changed:
            log.info("reconfigure: node %s: %s applied", daemon.node.name, ", ".join(changed))
        else:
            log.info("reconfigure: node %s: nothing this agent applies live changed", daemon.node.name)
    log.info("reconfigure: other keys (Gres, TLS, ports, limits, ...) apply when musterd restarts")


async def _serve(daemons: list[AgentDaemon], path: str) -> None:
    daemonsignals.install(
        asyncio.get_running_loop(),
        "musterd",
        reconfigure=lambda: reconfigure(daemons, path),
        stop=lambda: None,
        terminate=False,  # SIGTERM/SIGINT: ``main``'s stop_all and uvicorn, as before
    )
    await (daemons[0].serve() if len(daemons) == 1 else serve_nodes(daemons))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    daemonsignals.early("musterd")
    if args.print_hardware:
        return print_hardware(args.node)
    path = os.path.abspath(args.conf or default_conf_path())
    try:
        with open(path) as f:
            config = parse_config(f.read(), path)
        key = load_key(config.auth_key_file)
    except OSError as exc:
        return _fail(f"{exc.filename or path}: {exc.strerror}")
    except (ConfigError, SignatureError) as exc:
        return _fail(str(exc))

    node_expr = args.node or socket.gethostname().split(".")[0]
    try:
        names = expand(node_expr)
    except HostlistError as exc:
        return _fail(str(exc))
    nodes = []
    for name in names:
        node = config.node(name)
        if node is None:
            return _fail(f"node {name} is not defined in {path} (give --node NAME)")
        nodes.append(node)

    handler_field = NodeField(node_expr)  # %(node)s: the hosted node a line is about
    setup_logging(
        config.get("LogFormat"),
        daemon="musterd",
        node=node_expr,
        filename=args.log_file,
        level=logging.DEBUG if args.verbose > 1 else logging.INFO,
        text_format="%(asctime)s musterd[%(node)s] %(name)s %(levelname)s %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(handler_field)
    # One line per heartbeat is noise; the link logs what matters (outages, refusals).
    logging.getLogger("httpx").setLevel(logging.DEBUG if args.verbose > 1 else logging.WARNING)
    _read_topology(config, path)
    for warning in config.warnings:
        logging.getLogger("musterd").warning("%s", warning)

    daemons = [
        AgentDaemon(
            AgentSettings(
                config=config,
                node=node,
                key=key,
                state_dir=os.path.abspath(_state_dir(args.state_dir, config, node.name, len(nodes) > 1)),
                conf_path=path,
                gpu_mode=args.gpu_detect,
            )
        )
        for node in nodes
    ]

    def stop_all(*_: object) -> None:
        for daemon in daemons:
            daemon.request_stop()

    # While serving, uvicorn turns SIGTERM/SIGINT into a graceful stop and then raises the
    # signal again; this handler covers the moments before and after (so we exit 0). A
    # process hosting several nodes handles the signals here only, stopping all of them.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop_all)
    try:
        asyncio.run(_serve(daemons, path))
    except StartupError as exc:
        logging.getLogger("musterd").error("%s", exc)
        return _fail(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
