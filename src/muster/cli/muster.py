"""``muster``: local clusters (up, down, status), keys, the controller's state (backup,
restore, store-copy), the demo and the simulator."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from muster import VERSION_STRING

if TYPE_CHECKING:
    from muster.cluster.store_copy import Endpoint

# A local cluster gives each node its own loopback address (cluster.local.node_addr).
MAX_LOCAL_NODES = 16384


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="muster", description="muster: a Slurm-compatible workload manager for AI clusters"
    )
    ap.add_argument("-V", "--version", action="version", version=VERSION_STRING)
    sub = ap.add_subparsers(dest="command", required=True)

    up = sub.add_parser(
        "up",
        help="start (or restart) a local cluster of emulated GPU nodes on loopback",
        description="Start (or restart) a local cluster of emulated GPU nodes on loopback, and your "
        "command server (the warm process the Slurm commands run in; MUSTER_CMD_SERVER=0 turns it off).",
    )
    up.add_argument(
        "--state-dir", default=".muster", help="where config, key, database and logs live (default: ./.muster)"
    )
    up.add_argument("--nodes", type=_positive, default=4, help="number of nodes (default 4)")
    up.add_argument(
        "--nodes-per-agent",
        type=_positive,
        default=1,
        help="nodes hosted by one agent process (default 1, as on real machines; e.g. 64 to emulate "
        "a thousand nodes on one small machine: each is still its own node, and killing its agent "
        "process takes all of them down, like a rack)",
    )
    up.add_argument(
        "--backup-controllers",
        type=int,
        default=0,
        metavar="N",
        help="also start N standby controllers (SlurmctldHost lines after the primary, on 127.1.0.1...); "
        "they share the PostgreSQL store, so name one with --conf-extra AccountingStorageURL=postgresql://... "
        "(docs/deploy.md, high availability)",
    )
    up.add_argument("--gpus-per-node", type=_positive, default=8, help="emulated GPUs per node (default 8)")
    up.add_argument("--cpus-per-node", type=_positive, default=32, help="CPUs per node (default 32)")
    up.add_argument("--mem-per-node", type=_positive, default=128000, help="memory per node in MB (default 128000)")
    up.add_argument("--gpu-type", default=None, help="GPU type name, e.g. a100 (default: untyped)")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for all nodes to be idle")
    up.add_argument(
        "--rest",
        default=None,
        metavar="[HOST:]PORT",
        help="also start musterrestd, Slurm's REST API, listening there (JWT auth; docs/rest.md)",
    )
    up.add_argument(
        "--conf-extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a global setting to state in the new cluster's config, replacing muster's own "
        "(repeatable; e.g. PriorityType=priority/basic, SlurmdTimeout=5). $MUSTER_CONF_EXTRA "
        "adds more, separated by spaces or semicolons",
    )

    up.add_argument(
        "--topology",
        metavar="FILE",
        help="a topology.conf (SwitchName= or BlockName= lines over node1..nodeN) to copy beside the "
        "new cluster's config, with TopologyPlugin=topology/tree or topology/block to match",
    )

    down = sub.add_parser("down", help="stop a local cluster's daemons and its job processes")
    down.add_argument("--state-dir", default=".muster")

    status = sub.add_parser("status", help="list a local cluster's daemons with pid, address and state")
    status.add_argument("--state-dir", default=".muster")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    keygen = sub.add_parser(
        "keygen",
        help="create a cluster key file (mode 0600); with --conf, also the cluster CA and the "
        "daemons' TLS certificates that config needs (TLSType=tls/muster)",
    )
    keygen.add_argument("path", nargs="?", help="the key file to create (default with --conf: its AuthKeyFile)")
    keygen.add_argument(
        "--conf",
        default=None,
        help="create what this config names and is missing: AuthKeyFile and, with TLSType=tls/muster, "
        "the CA and a certificate for the controller and for every node (existing files are kept)",
    )
    keygen.add_argument(
        "--host-cert",
        action="append",
        default=[],
        metavar="HOSTLIST",
        help="with --conf and TLS: also a host certificate for the agent process that hosts these "
        "nodes (musterd --node HOSTLIST), over which it heartbeats for all of them in one request; "
        "may be repeated",
    )

    sub.add_parser("sim", help="replay a workload trace through the scheduler (see `muster sim --help`)")

    for name, what in (
        ("backup", "copy the controller's state (SQLite online backup; safe while it runs) to a new FILE"),
        ("restore", "replace the controller's state with a backup FILE (refused while musterctld runs)"),
    ):
        cmd = sub.add_parser(name, help=what)
        cmd.add_argument("file")
        cmd.add_argument("--conf", default=None, help="config file (default: $MUSTER_CONF or /etc/muster/muster.conf)")
    copy = sub.add_parser(
        "store-copy",
        help="copy the controller's whole store between SQLite and PostgreSQL (refused while a controller uses it)",
        description="Copy every table of a muster store (jobs, events, accounting, associations, "
        "reservations, nodes, steps; job ids continue) from one database to another, in one "
        "transaction, and check it row for row. A location is sqlite:PATH (or a path), "
        "postgresql://... or libpq keywords (host=... dbname=...); one left out is the store "
        "the config names. docs/upgrade.md.",
    )
    copy.add_argument("--from", dest="source", default=None, metavar="STORE", help="the store to copy")
    copy.add_argument("--to", dest="dest", default=None, metavar="STORE", help="where to copy it")
    copy.add_argument(
        "--overwrite", action="store_true", help="replace a destination that already holds a store (refused otherwise)"
    )
    copy.add_argument("--conf", default=None, help="config file (default: $MUSTER_CONF or /etc/muster/muster.conf)")
    dash = sub.add_parser("dashboard", help="print a one-time link that signs you in to the controller's web dashboard")
    dash.add_argument(
        "--base-url",
        default=None,
        help="where your browser reaches the controller, e.g. http://localhost:6817 through an ssh "
        "tunnel (default: the controller's address and port from the config)",
    )

    hang = sub.add_parser("hang-evidence", help="what each process of a job's hung attempts was doing")
    hang.add_argument("job", help="the job id")
    hang.add_argument("--json", action="store_true", help="the controller's answer as JSON")

    demo = sub.add_parser("demo", help="start a local cluster and run the training scenario on it")
    demo.add_argument("--state-dir", default=".muster-demo")
    demo.add_argument("--nodes", type=_positive, default=4)
    demo.add_argument("--gpus-per-node", type=_positive, default=8)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sim"]:
        # The simulator owns its options (see `muster sim --help`).
        from muster.sim.main import main as sim_main

        return sim_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "keygen":
        return _keygen(args.path, args.conf, args.host_cert)

    if args.command in ("backup", "restore"):
        return _state_command(args)
    if args.command == "store-copy":
        return _store_copy(args)
    if args.command == "dashboard":
        from muster.cli.dashboard import run

        return run(args.base_url)
    if args.command == "hang-evidence":
        from muster.cli.hangevidence import run as show_evidence

        return show_evidence(args.job, args.json)
    try:
        return _cluster_command(args)
    except (OSError, ValueError) as e:  # a config error (ConfigError is a ValueError), a disk
        print(f"muster: error: {e}", file=sys.stderr)
        return 1


def _keygen(path: str | None, conf: str | None, hosts: list[str] | None = None) -> int:
    from muster.protocol.signing import generate_key

    if path is None and conf is None:
        print("muster: error: keygen needs a key file or --conf CONFIG", file=sys.stderr)
        return 2
    config = None
    if conf is not None:
        from muster.core.config import parse_config

        try:
            with open(conf) as f:
                config = parse_config(f.read(), os.path.abspath(conf))
        except OSError as e:
            print(f"muster: error: cannot read {conf}: {e.strerror or e}", file=sys.stderr)
            return 1
        except ValueError as e:  # ConfigError
            print(f"muster: error: {e}", file=sys.stderr)
            return 1
        path = path or config.auth_key_file
    assert path is not None
    try:
        generate_key(path)
        print(f"wrote cluster key {path} (mode 0600)")
    except FileExistsError:
        if config is None:
            print(f"muster: error: {path} exists; refusing to overwrite a cluster key", file=sys.stderr)
            return 1
        print(f"kept the existing cluster key {path}")
    except OSError as e:
        print(f"muster: error: cannot write {path!r}: {e.strerror or e}", file=sys.stderr)
        return 1
    if config is not None and config.tls.enabled:
        from muster.cluster.certs import issue_all

        try:
            made = issue_all(config, hosts)
        except (OSError, ValueError) as e:  # CertError is an OSError, HostlistError a ValueError
            print(f"muster: error: {e}", file=sys.stderr)
            return 1
        for item in made:
            print(f"wrote {item}")
        print(f"TLS: the cluster CA is {config.tls.ca_cert}; {len(made)} file(s) created, the others kept")
    elif config is not None:
        print("TLS is off in this config (TLSType=tls/none): no certificates made")
    if hosts and (config is None or not config.tls.enabled):
        print("muster: error: --host-cert needs --conf with TLSType=tls/muster", file=sys.stderr)
        return 1
    return 0


def conf_extra(given: list[str], from_env: str) -> dict[str, str] | str:
    """``--conf-extra KEY=VALUE`` items (then ``$MUSTER_CONF_EXTRA``'s) as settings; a
    message when one is not ``KEY=VALUE`` or names a node or partition line."""
    out: dict[str, str] = {}
    items = list(given) + [w for w in from_env.replace(";", " ").split() if w]
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key or not key.isalnum() or not value.strip():
            return f"--conf-extra wants KEY=VALUE, not {item!r}"
        if key.lower() in ("nodename", "partitionname", "nodeset", "frontendname", "downnodes"):
            return f"--conf-extra takes global settings only, not {key}"
        out[key] = value.strip()
    return out


def _state_command(args: argparse.Namespace) -> int:
    """``muster backup|restore FILE`` (``cluster.backup``)."""
    from muster.cluster.backup import BackupError, backup, restore
    from muster.core.config import ConfigError, parse_config
    from muster.protocol.client import default_conf_path

    path = args.conf or default_conf_path()
    try:
        with open(path, encoding="utf-8") as f:
            config = parse_config(f.read(), path)
        if args.command == "backup":
            done = backup(config, args.file)
            print(f"muster: backed up {done.jobs} jobs (schema {done.schema}, {done.size} bytes) to {done.path}")
            return 0
        summary, kept = restore(config, args.file)
    except OSError as e:
        print(f"muster: error: {e.filename or path}: {e.strerror}", file=sys.stderr)
        return 1
    except (ConfigError, BackupError) as e:
        print(f"muster: error: {e}", file=sys.stderr)
        return 1
    print(f"muster: restored {summary.jobs} jobs (schema {summary.schema}) from {summary.path}")
    if kept:
        print(f"muster: the state it replaced is kept in {kept}")
    return 0


def _store_copy(args: argparse.Namespace) -> int:
    """``muster store-copy [--from STORE] [--to STORE]`` (``cluster.store_copy``)."""
    from muster.cluster.store_copy import CopyError, copy_store, parse_endpoint
    from muster.core.config import ConfigError
    from muster.core.extras import MissingExtra

    if args.source is None and args.dest is None:
        print("muster: error: store-copy needs --from STORE or --to STORE (or both)", file=sys.stderr)
        return 2
    try:
        source = parse_endpoint(args.source) if args.source is not None else _configured_store(args.conf)
        dest = parse_endpoint(args.dest) if args.dest is not None else _configured_store(args.conf)
        done = copy_store(source, dest, overwrite=args.overwrite)
    except OSError as e:
        print(f"muster: error: {e.filename}: {e.strerror}" if e.filename else f"muster: error: {e}", file=sys.stderr)
        return 1
    except (ConfigError, CopyError, MissingExtra) as e:
        print(f"muster: error: {e}", file=sys.stderr)
        return 1
    total = sum(done.rows.values())
    print(f"muster: copied {done.source} to {done.dest} (schema {done.schema}): {total} rows, checked row for row")
    for table, n in done.rows.items():
        print(f"  {table:<14} {n}")
    print(f"muster: the next job id is {done.next_job_id}")
    if done.kept:
        print(f"muster: the store it replaced is kept in {done.kept}")
    return 0


def _configured_store(conf: str | None) -> Endpoint:
    """The store the config names (the side of the copy left out)."""
    from muster.cluster.store_copy import configured_store
    from muster.core.config import parse_config
    from muster.protocol.client import default_conf_path

    path = conf or default_conf_path()
    with open(path, encoding="utf-8") as f:
        return configured_store(parse_config(f.read(), path))


def _backup_problem(backups: int, extra: dict[str, str]) -> str | None:
    """Why ``--backup-controllers`` cannot be honoured with these settings, or None."""
    if backups == 0:
        return None
    if not 0 < backups <= 8:
        return "--backup-controllers must be from 0 to 8"
    keys = {k.lower(): v for k, v in extra.items()}
    pg = keys.get("accountingstorageurl") or keys.get("accountingstoragetype", "").lower() in (
        "accounting_storage/postgresql",
        "accounting_storage/pgsql",
    )
    if not pg:
        return (
            "--backup-controllers needs the PostgreSQL store, which the controllers share: "
            "add --conf-extra AccountingStorageURL=postgresql://USER@HOST:PORT/DB"
        )
    from muster.cluster.local import _loopback_alias_works, backup_addr

    if not _loopback_alias_works(backup_addr(1)):
        return f"--backup-controllers needs loopback addresses beyond 127.0.0.1 ({backup_addr(1)} cannot be bound here)"
    return None


def _cluster_command(args: argparse.Namespace) -> int:
    from muster.cluster.local import ClusterShape, LocalCluster

    cluster = LocalCluster(args.state_dir)
    if args.command == "up":
        if not 1 <= args.nodes <= MAX_LOCAL_NODES:
            print(f"muster: error: --nodes must be from 1 to {MAX_LOCAL_NODES}", file=sys.stderr)
            return 2
        if args.nodes_per_agent < 1:
            print("muster: error: --nodes-per-agent must be at least 1", file=sys.stderr)
            return 2
        rest = None
        if args.rest:  # checked before anything starts
            host, _, port = args.rest.rpartition(":")
            if not port.isdigit() or not 0 < int(port) < 65536:
                print(f"muster: error: invalid --rest address: {args.rest} (use [HOST:]PORT)", file=sys.stderr)
                return 2
            rest = (host or "127.0.0.1", int(port))
        extra = conf_extra(args.conf_extra, os.environ.get("MUSTER_CONF_EXTRA", ""))
        if isinstance(extra, str):
            print(f"muster: error: {extra}", file=sys.stderr)
            return 2
        problem = _backup_problem(args.backup_controllers, extra)
        if problem:
            print(f"muster: error: {problem}", file=sys.stderr)
            return 2
        topology = None
        if args.topology:
            try:
                with open(args.topology, encoding="utf-8") as f:
                    topology = f.read()
            except OSError as e:
                print(f"muster: error: --topology: cannot read {args.topology}: {e.strerror}", file=sys.stderr)
                return 2
            from muster.core.topoconf import parse_topology

            # checked here too, so that a mistake names the user's file, not the copy
            parse_topology(topology, args.topology, [f"node{i}" for i in range(1, args.nodes + 1)])
        if not cluster.exists:
            cluster.create(
                ClusterShape(
                    args.nodes,
                    args.gpus_per_node,
                    args.cpus_per_node,
                    args.mem_per_node,
                    args.gpu_type,
                    nodes_per_agent=args.nodes_per_agent,
                    backup_controllers=args.backup_controllers,
                ),
                extra,
                topology,
            )
            if "cgroup" not in (cluster.config().get("ProctrackType") or ""):  # never silently
                print(
                    "muster: note: jobs are not confined in cgroups (that needs root and writable "
                    "cgroups, docs/containment.md): --mem is not enforced",
                    file=sys.stderr,
                )
        elif extra or topology is not None:
            print(
                "muster: error: --conf-extra and --topology apply to a new cluster only; "
                f"{cluster.state_dir} exists (muster down, then remove it)",
                file=sys.stderr,
            )
            return 2
        else:
            print(f"muster: reusing the existing cluster in {cluster.state_dir} (its config and state are kept)")
        started = cluster.start()
        failed = cluster.agents_up(started, args.timeout)
        if failed:  # never reported as started: say which and why
            for line in failed:
                print(f"muster: error: {line}", file=sys.stderr)
            return 1
        try:
            cluster.wait_ready(args.timeout)
        except (TimeoutError, RuntimeError) as e:
            print(f"muster: error: {e}", file=sys.stderr)
            return 1
        rest_url = None
        if rest is not None:
            try:
                rest_url = cluster.start_rest(rest[0], rest[1], args.timeout)
            except (TimeoutError, RuntimeError) as e:
                print(f"muster: error: {e}", file=sys.stderr)
                return 1
        from muster.cli.launchers import start_server

        start_server(os.path.dirname(sys.executable))  # the user's first commands are served too
        n = len(cluster.config().nodes)
        print(
            f"muster: cluster up in {cluster.state_dir}: controller and {n} nodes"
            + (f" (started: {', '.join(started)})" if started else " (all already running)")
        )
        tls = cluster.config().tls
        if tls.enabled:
            print(f"muster: every TCP link is TLS (TLSType=tls/muster); cluster CA {tls.ca_cert}")
        print("Use it with:")
        print(f"  export MUSTER_CONF={cluster.conf_path}")
        print(f"  export PATH={os.path.dirname(sys.executable)}:$PATH")
        print("  muster dashboard    # a sign-in link to the web dashboard")
        if rest_url:
            print(f"REST API (musterrestd) at {rest_url}/slurm/v0.0.40/; get a token with: export $(scontrol token)")
        return 0
    if not cluster.exists and args.command in ("down", "status"):
        print(f"muster: error: no local cluster in {cluster.state_dir}", file=sys.stderr)
        return 1
    if args.command == "down":
        stopped = cluster.stop()
        print(f"muster: stopped {', '.join(stopped) if stopped else 'nothing (no daemon was running)'}")
        return 0
    if args.command == "status":
        if args.json:
            print(cluster.status_json())
            return 0
        print(f"{'DAEMON':<12} {'PID':>7}  {'ADDRESS':<21} STATE")
        for d in cluster.status():
            print(f"{d.name:<12} {d.pid if d.pid else '-':>7}  {d.address:<21} {d.state}")
        return 0
    if args.command == "demo":
        from muster.cluster.demo import run_demo

        return run_demo(cluster, args.nodes, args.gpus_per_node)
    return 2


if __name__ == "__main__":
    sys.exit(main())
