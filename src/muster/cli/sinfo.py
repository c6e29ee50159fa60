"""sinfo: partitions and nodes at a glance, as Slurm's sinfo shows them.

The partition view prints one row per partition and group of nodes that look the same in
every column asked for (state, CPUs, GRES, ...), nodes compressed into a hostlist; ``*``
marks the default partition, and a state ends in ``*`` when the node is not responding.
Rows come in Slurm's default order ``#P,-t``: partitions as configured, then node state
(mixed, allocated, idle, down). ``-N`` prints a row per node and partition instead,
``-s`` one summary row per partition and ``-R`` the reasons nodes are down or drained.

Everything is computed from ``NodeWire``/``PartitionWire`` dicts (docs/api.md).
"""

import sys

from muster.cli.common import (
    CommandError,
    argv_or_sys,
    info_text,
    long_running,
    no_operands,
    parse_iterate,
    print_lines,
    report,
)
from muster.client.controller import connect, connect_message
from muster.client.settings import load_settings
from muster.client.sysenv import environ
from muster.slurm.argscan import NO_ARG, Opt, OptionError, OptionTable, getopt, option_error
from muster.slurm.columns import Column, render
from muster.slurm.sinfo_fields import (
    FIELDS,
    Row,
    base_state,
    columns_from_format,
    columns_from_long_format,
    node_key,
    node_keys,
    parse_sort,
    sort_rows,
    state_filter_names,
    state_rank,
)

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

PROG = "sinfo"

DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
LONG_FORMAT = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
SUMMARY_FORMAT = "%#P %.5a %.10l %.16F %N"
NODE_FORMAT = "%#N %.6D %.#P %6t"
NODE_LONG_FORMAT = "%#N %.6D %.#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
REASON_FORMAT = "%20E %9u %19H %N"
REASON_LONG_FORMAT = "%20E %12U %19H %6t %N"

# Slurm sizes node and partition columns to their longest value, never under this.
MIN_NAME_FIELD = 9

OPTIONS: tuple[Opt, ...] = (
    Opt("all", "a", NO_ARG),
    Opt("dead", "d", NO_ARG),
    Opt("exact", "e", NO_ARG),
    Opt("noheader", "h", NO_ARG),
    Opt("help", None, NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("hide", None, NO_ARG),
    Opt("iterate", "i"),
    Opt("long", "l", NO_ARG),
    Opt("Node", "N", NO_ARG),
    Opt("nodes", "n"),
    Opt("noconvert", None, NO_ARG),
    Opt("format", "o"),
    Opt("Format", "O"),
    Opt("partition", "p"),
    Opt("responding", "r", NO_ARG),
    Opt("list-reasons", "R", NO_ARG),
    Opt("summarize", "s", NO_ARG),
    Opt("sort", "S"),
    Opt("states", "t"),
    Opt("reservation", "T", NO_ARG),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("json", None, NO_ARG),
    Opt("yaml", None, NO_ARG),
    Opt("clusters", "M"),
    Opt("local", None, NO_ARG),
    Opt("federation", None, NO_ARG),
)


_name_key = node_key  # numeric-aware order for node names (node2 before node10)


def build_rows(
    parts: list[dict[str, "Any"]], nodes: list[dict[str, "Any"]], cols: list[Column], node_view: bool, summary: bool
) -> list[Row]:
    """Group nodes into rows: per partition (as configured), per equal per-node values."""
    by_name = {str(n.get("name")): n for n in nodes}
    splitters = [FIELDS[c.key][2] for c in cols if c.key and FIELDS[c.key][2] is not None]
    uses_partition = any(c.key in ("P", "R", "a", "l", "L", "s", "g", "h", "p", "S") for c in cols)
    rows: list[Row] = []
    if node_view:
        for name in sorted(by_name, key=_name_key):
            node = by_name[name]
            member_of = [p for p in parts if name in (p.get("nodes") or [])]
            if not uses_partition or not member_of:
                rows.append(Row(member_of[0] if member_of else None, [node]))
                continue
            for part in member_of:
                rows.append(Row(part, [node]))
        return rows
    for part in parts:
        members = [by_name[n] for n in part.get("nodes") or [] if n in by_name]
        if summary or not members:
            rows.append(Row(part, members))
            continue
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for node in members:
            key = tuple(fn(node) for fn in splitters)  # type: ignore[operator]
            groups.setdefault(key, []).append(node)
        part_rows = [Row(part, group) for group in groups.values()]
        # Slurm's default "-t" (stable: rows of one state keep the nodes' order).
        part_rows.sort(key=lambda r: -state_rank(r.nodes[0]))
        rows.extend(part_rows)
    return rows


# --- filters ------------------------------------------------------------------------------------


class Request:
    __slots__ = (
        "cols",
        "header",
        "node_view",
        "summary",
        "reasons",
        "long",
        "partitions",
        "nodes",
        "states",
        "states_all",
        "responding",
        "dead",
        "json",
        "iterate",
        "sort",
    )

    def __init__(self) -> None:
        self.cols: list[Column] = []
        self.header = True
        self.node_view = False
        self.summary = False
        self.reasons = False
        self.long = False
        self.partitions: list[str] | None = None
        self.nodes: set[str] | None = None
        self.states: set[str] | None = None
        self.states_all = False  # --states=a&b: every state named, not any
        self.responding = False
        self.dead = False
        self.json = False
        self.iterate: float | None = None
        self.sort: list[tuple[str, bool]] = []


# Every state and state flag sinfo(1) names (NODE STATE CODES) and the flags ``-t`` also takes;
# states muster's nodes never enter (CLOUD, POWERED_DOWN, ...) are accepted and match none.
_KNOWN_STATES = frozenset(
    "alloc allocated blocked boot cloud comp completing down drain drained draining drng "
    "dynamic_future dynamic_norm err error fail failing future futr idle inval invalid_reg "
    "maint mix mixed no_respond not_responding npc perfctrs planned power_down power_up "
    "powered_down powering_down powering_up reboot reboot_issued reboot_requested resv "
    "reserved unk unknown".split()
)


def parse_args(argv: list[str], environ: dict[str, str]) -> Request | str:
    try:
        parsed, operands = getopt(argv, OptionTable(OPTIONS))
    except OptionError as e:
        raise option_error(PROG, e) from None
    no_operands(PROG, operands)
    req = Request()
    fmt = environ.get("SINFO_FORMAT")
    long_fmt = None
    if environ.get("SINFO_PARTITION"):
        req.partitions = [p for p in environ["SINFO_PARTITION"].split(",") if p]
    for opt, value in parsed:
        key = opt.key
        text = info_text((key,), HELP, USAGE)
        if text is not None:
            return text
        if key == "dead":
            req.dead = True
        elif key == "noheader":
            req.header = False
        elif key == "iterate":
            req.iterate = parse_iterate(value)
        elif key == "long":
            req.long = True
        elif key == "Node":
            req.node_view = True
        elif key == "nodes":
            from muster.core.hostlist import HostlistError, expand

            try:
                req.nodes = set(expand(value or ""))
            except HostlistError as e:
                raise CommandError(str(e)) from None
        elif key == "format":
            fmt, long_fmt = value, None
        elif key == "Format":
            long_fmt, fmt = value, None
        elif key == "partition":
            req.partitions = [p for p in (value or "").split(",") if p]
        elif key == "responding":
            req.responding = True
        elif key == "list-reasons":
            req.reasons = True
        elif key == "summarize":
            req.summary = True
        elif key == "states":
            # Slurm's list: "a,b" is either state, "a&b" (22.05) or "a+b" (later) every one
            # of them (the two kinds do not mix)
            text = (value or "").lower().replace("+", "&")
            req.states_all = "&" in text
            states = {s.strip() for s in text.replace("&", ",").split(",") if s.strip()}
            bad = sorted(states - _KNOWN_STATES - {"all"})
            if bad or (req.states_all and "," in text):
                raise CommandError(f"Invalid node state specified: {bad[0] if bad else value}")
            req.states = None if "all" in states else states
        elif key == "sort":
            req.sort = parse_sort(value or "")
        elif key == "json":
            req.json = True
        elif key == "yaml":
            raise CommandError("--yaml is not supported by muster; use --json")
        elif key == "reservation":
            raise CommandError("reservations are not supported by muster yet (sinfo -T)")
    if long_fmt:
        req.cols = columns_from_long_format(long_fmt)
    else:
        if not fmt:
            if req.reasons:
                fmt = REASON_LONG_FORMAT if req.long else REASON_FORMAT
            elif req.summary:
                fmt = SUMMARY_FORMAT
            elif req.node_view:
                fmt = NODE_LONG_FORMAT if req.long else NODE_FORMAT
            else:
                fmt = LONG_FORMAT if req.long else DEFAULT_FORMAT
        req.cols = columns_from_format(fmt)
    return req


def select_nodes(nodes: list[dict[str, "Any"]], req: Request) -> list[dict[str, "Any"]]:
    out = []
    for n in nodes:
        if req.nodes is not None and n.get("name") not in req.nodes:
            continue
        if req.responding and n.get("responding") is False:
            continue
        if req.dead and not (n.get("responding") is False or base_state(n) == "DOWN"):
            continue
        if req.states:
            have = state_filter_names(n)
            if n.get("drain"):
                # DRAIN is either; DRAINING a drained node that still runs jobs, DRAINED one that does not
                have -= {"drained"} if base_state(n) in ("ALLOCATED", "MIXED") else {"draining", "drng"}
            if not (req.states <= have if req.states_all else req.states & have):
                continue
        if req.reasons and not (
            n.get("reason") and (n.get("drain") or base_state(n) == "DOWN" or n.get("responding") is False)
        ):
            continue
        out.append(n)
    return out


def report_lines(
    parts: list[dict[str, "Any"]], nodes: list[dict[str, "Any"]], req: Request, now: float = 0.0
) -> list[str]:
    """The whole output for one pass, from wire dicts (the testable core of sinfo)."""
    if req.partitions is not None:
        wanted = set(req.partitions)
        parts = [p for p in parts if p.get("name") in wanted]
    chosen = select_nodes(nodes, req)
    if req.reasons:
        # Reasons are about nodes, not partitions: one row per reason, user and time.
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for n in sorted(chosen, key=lambda n: _name_key(str(n.get("name")))):
            groups.setdefault((n.get("reason"), n.get("reason_user"), n.get("reason_time")), []).append(n)
        rows = [Row(None, group) for group in groups.values()]
    else:
        filtered = req.nodes is not None or req.states is not None or req.responding or req.dead
        if filtered:
            names = {n.get("name") for n in chosen}
            parts = [p for p in parts if names & set(p.get("nodes") or [])]
        rows = build_rows(parts, chosen, req.cols, req.node_view, req.summary)
        if filtered:
            rows = [r for r in rows if r.nodes]
    if req.sort:
        rows = sort_rows(rows, req.sort)
    lines = render(rows, req.cols, req.header, least=MIN_NAME_FIELD)
    if req.long or req.iterate is not None:
        import time

        lines.insert(0, time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))
    return lines


def to_json(parts: list[dict[str, "Any"]], nodes: list[dict[str, "Any"]]) -> str:
    """``--json``: data_parser v0.0.40's ``sinfo`` list (``slurm.slurmjson.sinfo_entries``),
    plus the ``nodes`` and ``partitions`` lists older clients read (Slurm 22.05's layout)."""
    import json

    from muster.slurm.slurmjson import meta, node, partition, sinfo_entries

    cluster = load_settings(PROG).cluster_name if parts else ""
    doc = {
        "meta": meta(["sinfo", "--json"]),
        "errors": [],
        "warnings": [],
        "sinfo": sinfo_entries(parts, nodes, cluster),
        "nodes": [node(n, cluster) for n in nodes],
        "partitions": [partition(p, cluster) for p in parts],
    }
    return json.dumps(doc, indent=2)


def fetch(fields: list[str] | None = None) -> tuple[list[dict[str, "Any"]], list[dict[str, "Any"]], float]:
    """Partitions and nodes; with ``fields``, the nodes hold those keys only (the
    controller sends them in columns, ``ctld.columns``: a few values per node)."""
    from muster.protocol.client import ApiError, ConnectError

    try:
        ctl = connect(PROG)
        # One request for both (a controller from before partitions=1 answers without them).
        node_answer = ctl.get("/v1/nodes?partitions=1" + (f"&fields={','.join(fields)}" if fields else ""))
        part_answer = node_answer if "partitions" in node_answer else ctl.get("/v1/partitions")
    except ConnectError as e:
        raise CommandError(f"slurm_load_partitions: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"slurm_load_partitions: {e.message}", 1, raw=True) from None
    parts = [p for p in part_answer.get("partitions") or [] if isinstance(p, dict)]
    if fields:
        keys = node_answer.get("fields") or []
        nodes = [dict(zip(keys, row, strict=True)) for row in node_answer.get("rows") or []]
    else:
        nodes = [n for n in node_answer.get("nodes") or [] if isinstance(n, dict)]
    return parts, nodes, float(node_answer.get("now") or 0)


def wanted_fields(req: Request) -> list[str] | None:
    """The node fields this request reads, or None for all of them (``--json``)."""
    if req.json:
        return None
    return node_keys([c.key for c in req.cols if c.key] + [key for key, _ in req.sort])


def main(argv: list[str] | None = None) -> int:
    try:
        req = parse_args(argv_or_sys(argv), environ())
        if isinstance(req, str):
            sys.stdout.write(req)
            return 0
        while True:
            parts, nodes, now = fetch(wanted_fields(req))
            if req.json:
                print_lines([to_json(parts, nodes)])
                return 0
            lines = report_lines(parts, nodes, req, now)
            if req.iterate is None:
                print_lines(lines)
                return 0
            print_lines(lines + [""])
            long_running()
            import time

            time.sleep(req.iterate)
    except CommandError as e:
        return report(PROG, e)
    except KeyboardInterrupt:
        return 0


USAGE = """\
Usage: sinfo [-adelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]
             [-S fields] [-o format] [-O Format] [--hide]
"""

HELP = """\
Usage: sinfo [OPTIONS]
  -a, --all                  show all partitions (including hidden and those
                             not accessible)
  -d, --dead                 show only non-responding nodes
  -e, --exact                group nodes only on exact match of configuration
  -h, --noheader             no headers on output
  -i, --iterate=seconds      specify an iteration period
      --json                 Produce JSON output
  -l, --long                 long output - displays more information
  -n, --nodes=NODES          report on specific node(s)
  -N, --Node                 Node-centric format
  -o, --format=format        format specification
  -O, --Format=format        long format specification
  -p, --partition=PARTITION  report on specific partition
  -r, --responding           report only responding nodes
  -R, --list-reasons         list reason nodes are down or drained
  -s, --summarize            report state summary only
  -t, --states=node_state    specify the what states of nodes to view
  -v, --verbose              verbosity level
  -V, --version              output version information and exit

Help options:
  --help                     show this help message
  --usage                    display brief usage message
"""


if __name__ == "__main__":
    sys.exit(main())
