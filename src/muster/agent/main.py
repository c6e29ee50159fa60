"""``musterd``: the node agent process.

    musterd [--conf PATH] [--node NAME] [--state-dir DIR] [--log-file FILE]
            [--gpu-detect auto|nvidia|emulate] [-D] [-v] [-V]

* ``--conf``: the cluster config (default ``$MUSTER_CONF``, else /etc/muster/muster.conf);
  its ``AuthKeyFile`` holds the cluster key.
* ``--node``: this node's ``NodeName`` (default: the short host name), like ``slurmd -N``.
* ``--state-dir``: where job records, pending reports and spooled scripts live (default:
  ``SlurmdSpoolDir`` with ``%n`` replaced by the node name, or that directory plus
  ``/<node>`` when it has no ``%n``; without ``SlurmdSpoolDir``: /var/spool/muster/<node>).
* ``--gpu-detect``: see ``muster.agent.gpus`` (default ``$MUSTER_GPU_DETECT`` or ``auto``).
* ``-D``: accepted for Slurm compatibility; musterd always stays in the foreground (run it
  under systemd or ``muster up``).

Exit status: 0 after a graceful stop (SIGTERM/SIGINT; running jobs are left running),
1 when it cannot start (the reason is printed as ``musterd: error: ...``).
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
from muster.agent.daemon import AgentDaemon, AgentSettings, StartupError
from muster.agent.gpus import MODES
from muster.core.config import Config, ConfigError, parse_config
from muster.core.topoconf import attach_topology, topology_path, wants_topology
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


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="musterd", description="muster's node agent")
    ap.add_argument("-f", "--conf", default=None, help="config file (default: $MUSTER_CONF or /etc/muster/muster.conf)")
    ap.add_argument("-N", "--node", default=None, help="this node's NodeName (default: the short host name)")
    ap.add_argument("--state-dir", default=None, help="job records, reports and spooled scripts")
    ap.add_argument("-L", "--log-file", default=None, help="log to this file instead of stderr")
    ap.add_argument(
        "--gpu-detect",
        choices=MODES,
        default=os.environ.get("MUSTER_GPU_DETECT") or "auto",
        help="how to find GPUs: auto (detect, else emulate the configured count), nvidia, emulate",
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    path = os.path.abspath(args.conf or default_conf_path())
    try:
        with open(path) as f:
            config = parse_config(f.read(), path)
        key = load_key(config.auth_key_file)
    except OSError as exc:
        return _fail(f"{exc.filename or path}: {exc.strerror}")
    except (ConfigError, SignatureError) as exc:
        return _fail(str(exc))

    node_name = args.node or socket.gethostname().split(".")[0]
    node = config.node(node_name)
    if node is None:
        return _fail(f"node {node_name} is not defined in {path} (give --node NAME)")

    setup_logging(
        config.get("LogFormat"),
        daemon="musterd",
        node=node_name,
        filename=args.log_file,
        level=logging.DEBUG if args.verbose > 1 else logging.INFO,
        text_format=f"%(asctime)s musterd[{node_name}] %(name)s %(levelname)s %(message)s",
    )
    # One line per heartbeat is noise; the link logs what matters (outages, refusals).
    logging.getLogger("httpx").setLevel(logging.DEBUG if args.verbose > 1 else logging.WARNING)
    _read_topology(config, path)
    for warning in config.warnings:
        logging.getLogger("musterd").warning("%s", warning)

    settings = AgentSettings(
        config=config,
        node=node,
        key=key,
        state_dir=os.path.abspath(args.state_dir or default_state_dir(config, node_name)),
        conf_path=path,
        gpu_mode=args.gpu_detect,
    )
    daemon = AgentDaemon(settings)
    # While serving, uvicorn turns SIGTERM/SIGINT into a graceful stop and then raises the
    # signal again; this handler covers the moments before and after (so we exit 0).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: daemon.request_stop())
    # slurmd rereads its config on SIGHUP; musterd does not (yet), but must not die of it.
    signal.signal(
        signal.SIGHUP,
        lambda *_: logging.getLogger("musterd").info("SIGHUP ignored: restart musterd to reread the configuration"),
    )
    try:
        asyncio.run(daemon.serve())
    except StartupError as exc:
        logging.getLogger("musterd").error("%s", exc)
        return _fail(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
