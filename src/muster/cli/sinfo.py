"""sinfo: partitions and nodes at a glance, as Slurm's sinfo shows them.

The partition view prints one row per partition and group of nodes that look the same in
every column asked for (state, CPUs, GRES, ...), nodes compressed into a hostlist; ``*``
marks the default partition, and a state ends in ``*`` when the node is not responding.
Rows come in Slurm's default order ``#P,-t``: partitions as configured, then node state
(mixed, allocated, idle, down). ``-N`` prints a row per node and partition instead,
``-s`` one summary row per partition and ``-R`` the reasons nodes are down or drained.

Everything is computed from ``NodeWire``/``PartitionWire`` dicts (docs/api.md).
"""

from __future__ import annotations

import os
import sys

from muster.cli.common import (
    CommandError,
    argv_or_sys,
    connect,
    connect_message,
    field_width,
    fit,
    info_text,
    no_operands,
    option_error,
    parse_format,
    parse_iterate,
    print_lines,
    report,
)
from muster.cli.options import NO_ARG, Opt, OptionError, OptionTable, getopt

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


# --- node states -----------------------------------------------------------------------------

_SHORT = {
    "IDLE": "idle",
    "ALLOCATED": "alloc",
    "MIXED": "mix",
    "DOWN": "down",
    "UNKNOWN": "unk",
    "FUTURE": "futr",
}
_LONG = {
    "IDLE": "idle",
    "ALLOCATED": "allocated",
    "MIXED": "mixed",
    "DOWN": "down",
    "UNKNOWN": "unknown",
    "FUTURE": "future",
}
# Slurm's node_state numbers and flag bits: the default "-t" sort orders rows by their
# sum, highest first, so silent and drained nodes come before mixed, allocated and idle.
_STATE_RANK = {"UNKNOWN": 0, "DOWN": 1, "IDLE": 2, "ALLOCATED": 3, "MIXED": 5, "FUTURE": 6}
_DRAIN_FLAG = 0x200
_NO_RESPOND_FLAG = 0x800


def state_rank(node: dict) -> int:
    rank = _STATE_RANK.get(_base(node), 0)
    if node.get("drain"):
        rank += _DRAIN_FLAG
    if node.get("responding") is False:
        rank += _NO_RESPOND_FLAG
    return rank


_BUSY = frozenset({"ALLOCATED", "MIXED"})


def _base(node: dict) -> str:
    return str(node.get("state") or "UNKNOWN").upper()


def short_state(node: dict) -> str:
    """``idle``, ``mix``, ``alloc``, ``down``, ``drain``, ``drng``, ``unk``; ``*`` if silent."""
    base = _base(node)
    if node.get("drain"):
        text = "drng" if base in _BUSY else "drain"
    else:
        text = _SHORT.get(base, base.lower())
    return text + ("*" if node.get("responding") is False else "")


def long_state(node: dict) -> str:
    base = _base(node)
    if node.get("drain"):
        text = "draining" if base in _BUSY else "drained"
    else:
        text = _LONG.get(base, base.lower())
    return text + ("*" if node.get("responding") is False else "")


def complete_state(node: dict) -> str:
    """``-O StateComplete``: the base state and every flag, ``idle+drain``, ``down+drain``."""
    base = _base(node)
    text = _LONG.get(base, base.lower())
    if node.get("drain"):
        text += "+drain"
    if node.get("responding") is False:
        text += "+not_responding"
    return text


def unavailable(node: dict) -> bool:
    """Down, drained or silent: its idle CPUs count as "other" in A/I/O/T."""
    return (
        _base(node) in ("DOWN", "UNKNOWN", "FUTURE")
        or bool(node.get("drain"))
        or node.get("responding") is False
    )


def _state_filter_names(node: dict) -> set[str]:
    base = _base(node)
    names = {base.lower(), _SHORT.get(base, ""), _LONG.get(base, "")}
    if node.get("drain"):
        names |= {"drain", "drained", "draining", "drng"}
    if node.get("responding") is False:
        names |= {"no_respond", "not_responding"}
    return names - {""}


# --- rows ---------------------------------------------------------------------------------------


class Row:
    """One output line: a partition (or none) and the nodes it covers."""

    __slots__ = ("part", "nodes")

    def __init__(self, part: dict | None, nodes: list[dict]) -> None:
        self.part = part
        self.nodes = nodes


def _compress(names: list[str]) -> str:
    if not names:
        return ""
    from muster.core.hostlist import compress

    return compress(names)


def _limit(seconds: object) -> str:
    from muster.core.timefmt import format_sinfo_limit

    return format_sinfo_limit(None if seconds is None else int(seconds))  # type: ignore[arg-type]


def _ts(epoch: object) -> str:
    from muster.core.timefmt import format_timestamp

    return format_timestamp(epoch, none="Unknown")  # type: ignore[arg-type]


def _part_name(row: Row, star: bool = True) -> str:
    if row.part is None:
        return "n/a"
    name = str(row.part.get("name") or "")
    return name + "*" if star and row.part.get("default") else name


def _avail(row: Row) -> str:
    if row.part is None:
        return "n/a"
    state = str(row.part.get("state") or "UP").upper()
    return {"UP": "up", "DOWN": "down", "DRAIN": "drain", "INACTIVE": "inact"}.get(
        state, state.lower()
    )


def _cpus_aiot(row: Row) -> str:
    alloc = idle = other = total = 0
    for n in row.nodes:
        cpus = int(n.get("cpus") or 0)
        used = int(n.get("cpus_alloc") or 0)
        total += cpus
        alloc += used
        if unavailable(n):
            other += cpus - used
        else:
            idle += cpus - used
    return f"{alloc}/{idle}/{other}/{total}"


def _nodes_aiot(row: Row) -> str:
    alloc = idle = other = 0
    for n in row.nodes:
        if unavailable(n):
            other += 1
        elif _base(n) in _BUSY:
            alloc += 1
        else:
            idle += 1
    return f"{alloc}/{idle}/{other}/{len(row.nodes)}"


def _nodes_ai(row: Row) -> str:
    a, i, _, _ = _nodes_aiot(row).split("/")
    return f"{a}/{i}"


def _same(row: Row, fn) -> str:  # noqa: ANN001 - a node -> str function
    """A per-node value for the row: the first node's (rows group equal values)."""
    return fn(row.nodes[0]) if row.nodes else ""


def _gres(node: dict) -> str:
    if node.get("gres"):
        return str(node["gres"])
    gpus = int(node.get("gpus") or 0)
    if not gpus:
        return "(null)"
    return f"gpu:{node['gpu_type']}:{gpus}" if node.get("gpu_type") else f"gpu:{gpus}"


def _features(node: dict) -> str:
    return ",".join(node.get("features") or []) or "(null)"


def _reason(node: dict) -> str:
    return str(node.get("reason") or "none")


def _sct(node: dict) -> str:
    """Sockets:cores:threads; a node that reports no topology is one socket of its CPUs."""
    sockets = int(node.get("sockets") or 1)
    threads = int(node.get("threads_per_core") or 1)
    cores = int(
        node.get("cores_per_socket") or max(1, int(node.get("cpus") or 1) // (sockets * threads))
    )
    return f"{sockets}:{cores}:{threads}"


def _job_size(row: Row) -> str:
    if row.part is None:
        return "n/a"
    lo = max(1, int(row.part.get("min_nodes") or 0))
    hi = row.part.get("max_nodes")
    return f"{lo}-{'infinite' if hi is None else hi}"


# letter -> (header, value(row), per-node key or None). Per-node fields split rows.
FIELDS: dict[str, tuple[str, object, object]] = {
    "a": ("AVAIL", _avail, None),
    "A": ("NODES(A/I)", _nodes_ai, None),
    "b": ("ACTIVE_FEATURES", lambda r: _same(r, _features), _features),
    "c": ("CPUS", lambda r: _same(r, lambda n: str(n.get("cpus") or 0)), lambda n: n.get("cpus")),
    "C": ("CPUS(A/I/O/T)", _cpus_aiot, None),
    "d": ("TMP_DISK", lambda r: "0", None),
    "D": ("NODES", lambda r: str(len(r.nodes)), None),
    "e": ("FREE_MEM", lambda r: "N/A", None),
    "E": ("REASON", lambda r: _same(r, _reason), _reason),
    "f": ("AVAIL_FEATURES", lambda r: _same(r, _features), _features),
    "F": ("NODES(A/I/O/T)", _nodes_aiot, None),
    "g": ("GROUPS", lambda r: ",".join((r.part or {}).get("allow_groups") or []) or "all", None),
    "G": ("GRES", lambda r: _same(r, _gres), _gres),
    "h": ("OVERSUBSCRIBE", lambda r: str((r.part or {}).get("oversubscribe") or "NO"), None),
    "H": (
        "TIMESTAMP",
        lambda r: _same(r, lambda n: _ts(n.get("reason_time"))),
        lambda n: n.get("reason_time"),
    ),
    "l": ("TIMELIMIT", lambda r: _limit((r.part or {}).get("max_time")), None),
    "L": (
        "DEFAULTTIME",
        lambda r: (
            "n/a" if not (r.part or {}).get("default_time") else _limit(r.part["default_time"])
        ),
        None,
    ),  # type: ignore[index]
    "m": (
        "MEMORY",
        lambda r: _same(r, lambda n: str(n.get("real_memory") or 0)),
        lambda n: n.get("real_memory"),
    ),
    "n": ("HOSTNAMES", lambda r: ",".join(str(n.get("name")) for n in r.nodes), None),
    "N": ("NODELIST", lambda r: _compress([str(n.get("name")) for n in r.nodes]), None),
    "o": ("NODE_ADDR", lambda r: ",".join(str(n.get("addr")) for n in r.nodes), None),
    "O": ("CPU_LOAD", lambda r: "N/A", None),
    "p": ("PRIO_TIER", lambda r: str((r.part or {}).get("priority_tier", 1)), None),
    "P": ("PARTITION", lambda r: _part_name(r), None),
    "r": ("ROOT", lambda r: "no", None),
    "R": ("PARTITION", lambda r: _part_name(r, star=False), None),
    "s": ("JOB_SIZE", _job_size, None),
    "S": ("ALLOCNODES", lambda r: "all", None),
    "t": ("STATE", lambda r: _same(r, short_state), short_state),
    "T": ("STATE", lambda r: _same(r, long_state), long_state),
    # no letter in Slurm's -o: reachable by -O StateComplete only
    "statecomplete": ("STATECOMPLETE", lambda r: _same(r, complete_state), complete_state),
    "u": (
        "USER",
        lambda r: _same(r, lambda n: str(n.get("reason_user") or "Unknown")),
        lambda n: n.get("reason_user"),
    ),
    "U": (
        "USER",
        lambda r: _same(r, lambda n: str(n.get("reason_user") or "Unknown")),
        lambda n: n.get("reason_user"),
    ),
    "w": (
        "WEIGHT",
        lambda r: _same(r, lambda n: str(n.get("weight") or 1)),
        lambda n: n.get("weight"),
    ),
    "X": ("SOCKETS", lambda r: _same(r, lambda n: _sct(n).split(":")[0]), _sct),
    "Y": ("CORES", lambda r: _same(r, lambda n: _sct(n).split(":")[1]), _sct),
    "Z": ("THREADS", lambda r: _same(r, lambda n: _sct(n).split(":")[2]), _sct),
    "z": ("S:C:T", lambda r: _same(r, _sct), _sct),
}

LONG_NAMES = {
    "available": "a",
    "cpus": "c",
    "cpusstate": "C",
    "disk": "d",
    "freemem": "e",
    "features": "f",
    "features_act": "b",
    "groups": "g",
    "gres": "G",
    "maxcpuspernode": "c",
    "memory": "m",
    "nodeaddr": "o",
    "nodehost": "n",
    "nodelist": "N",
    "nodes": "D",
    "nodeai": "A",
    "nodeaiot": "F",
    "oversubscribe": "h",
    "partition": "P",
    "partitionname": "R",
    "prioritytier": "p",
    "reason": "E",
    "root": "r",
    "size": "s",
    "statecompact": "t",
    "statelong": "T",
    "statecomplete": "statecomplete",
    "time": "l",
    "timestamp": "H",
    "user": "u",
    "userlong": "U",
    "weight": "w",
    "defaulttime": "L",
    "sockets": "X",
    "cores": "Y",
    "threads": "Z",
    "socketcorethread": "z",
    "cpusload": "O",
}


class Column:
    __slots__ = ("prefix", "letter", "width", "right")

    def __init__(self, prefix: str, letter: str | None, width: int, right: bool) -> None:
        self.prefix = prefix
        self.letter = letter
        self.width = width
        self.right = right


def columns_from_format(fmt: str) -> list[Column]:
    cols = []
    for literal, letter, width, right in parse_format(fmt):
        if letter is not None and letter not in FIELDS:
            raise CommandError(f"Invalid node format specification: {letter}")
        cols.append(Column(literal, letter, width, right))
    return cols


def columns_from_long_format(spec: str) -> list[Column]:
    cols = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, colon, size = item.partition(":")
        letter = LONG_NAMES.get(name.lower())
        if letter is None:
            raise CommandError(f"Invalid node format specification: {name}")
        right = size.startswith(".")
        digits = size.lstrip(".")
        width = field_width(digits) if digits.isdigit() else (20 if not colon else 0)
        cols.append(Column(" " if cols else "", letter, width, right))
    return cols


def _name_key(name: str) -> tuple:
    """Numeric-aware order for node names (node2 before node10)."""
    head = name.rstrip("0123456789")
    tail = name[len(head) :]
    return (head, int(tail) if tail else -1, name)


def build_rows(
    parts: list[dict], nodes: list[dict], cols: list[Column], node_view: bool, summary: bool
) -> list[Row]:
    """Group nodes into rows: per partition (as configured), per equal per-node values."""
    by_name = {str(n.get("name")): n for n in nodes}
    splitters = [FIELDS[c.letter][2] for c in cols if c.letter and FIELDS[c.letter][2] is not None]
    uses_partition = any(
        c.letter in ("P", "R", "a", "l", "L", "s", "g", "h", "p", "S") for c in cols
    )
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
        groups: dict[tuple, list[dict]] = {}
        for node in members:
            key = tuple(fn(node) for fn in splitters)  # type: ignore[operator]
            groups.setdefault(key, []).append(node)
        part_rows = [Row(part, group) for group in groups.values()]
        # Slurm's default "-t" (stable: rows of one state keep the nodes' order).
        part_rows.sort(key=lambda r: -state_rank(r.nodes[0]))
        rows.extend(part_rows)
    return rows


def render(rows: list[Row], cols: list[Column], header: bool = True) -> list[str]:
    widths = []
    for c in cols:
        if c.width != -1 or c.letter is None:
            widths.append(c.width)
            continue
        values = [FIELDS[c.letter][1](r) for r in rows]  # type: ignore[operator]
        widths.append(max([MIN_NAME_FIELD] + [len(v) for v in values]))
    lines = []
    if header:
        lines.append(
            "".join(
                c.prefix + (fit(FIELDS[c.letter][0], w, c.right) if c.letter else "")  # type: ignore[index]
                for c, w in zip(cols, widths, strict=True)
            )
        )
    for row in rows:
        parts = []
        for c, w in zip(cols, widths, strict=True):
            if c.letter is None:
                parts.append(c.prefix)
                continue
            value = FIELDS[c.letter][1](row)  # type: ignore[operator]
            # Node lists are never cut (Slurm prints them whole).
            parts.append(c.prefix + fit(value, w, c.right, cut=c.letter not in ("N", "n", "o")))
        lines.append("".join(parts))
    return lines


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


_KNOWN_STATES = frozenset(
    "alloc allocated comp completing down drain drained draining drng fail future futr idle "
    "maint mix mixed no_respond not_responding planned reboot resv unk unknown".split()
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
            # Slurm's list: "a,b" is either state, "a&b" both (the two do not mix)
            text = (value or "").lower()
            req.states_all = "&" in text
            states = {s.strip() for s in text.replace("&", ",").split(",") if s.strip()}
            bad = sorted(states - _KNOWN_STATES - {"all"})
            if bad or (req.states_all and "," in text):
                raise CommandError(f"Invalid node state specified: {bad[0] if bad else value}")
            req.states = None if "all" in states else states
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


def select_nodes(nodes: list[dict], req: Request) -> list[dict]:
    out = []
    for n in nodes:
        if req.nodes is not None and n.get("name") not in req.nodes:
            continue
        if req.responding and n.get("responding") is False:
            continue
        if req.dead and not (n.get("responding") is False or _base(n) == "DOWN"):
            continue
        if req.states:
            have = _state_filter_names(n)
            if not (req.states <= have if req.states_all else req.states & have):
                continue
        if req.reasons and not (
            n.get("reason")
            and (n.get("drain") or _base(n) == "DOWN" or n.get("responding") is False)
        ):
            continue
        out.append(n)
    return out


def report_lines(parts: list[dict], nodes: list[dict], req: Request, now: float = 0.0) -> list[str]:
    """The whole output for one pass, from wire dicts (the testable core of sinfo)."""
    if req.partitions is not None:
        wanted = set(req.partitions)
        parts = [p for p in parts if p.get("name") in wanted]
    chosen = select_nodes(nodes, req)
    if req.reasons:
        # Reasons are about nodes, not partitions: one row per reason, user and time.
        groups: dict[tuple, list[dict]] = {}
        for n in sorted(chosen, key=lambda n: _name_key(str(n.get("name")))):
            groups.setdefault(
                (n.get("reason"), n.get("reason_user"), n.get("reason_time")), []
            ).append(n)
        rows = [Row(None, group) for group in groups.values()]
    else:
        filtered = req.nodes is not None or req.states is not None or req.responding or req.dead
        if filtered:
            names = {n.get("name") for n in chosen}
            parts = [p for p in parts if names & set(p.get("nodes") or [])]
        rows = build_rows(parts, chosen, req.cols, req.node_view, req.summary)
        if filtered:
            rows = [r for r in rows if r.nodes]
    lines = render(rows, req.cols, req.header)
    if req.long or req.iterate is not None:
        import time

        lines.insert(0, time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))
    return lines


def to_json(parts: list[dict], nodes: list[dict]) -> str:
    import json

    from muster import __version__

    doc = {
        "meta": {
            "plugin": {"type": "muster", "name": f"muster {__version__}"},
            "Slurm": {"release": "22.05.8"},
        },
        "errors": [],
        "nodes": [
            {
                "name": n.get("name"),
                "address": n.get("addr"),
                "port": n.get("port"),
                "state": long_state(n).rstrip("*"),
                "state_flags": (["DRAIN"] if n.get("drain") else [])
                + (["NOT_RESPONDING"] if n.get("responding") is False else []),
                "cpus": n.get("cpus"),
                "alloc_cpus": n.get("cpus_alloc"),
                "real_memory": n.get("real_memory"),
                "alloc_memory": n.get("mem_alloc"),
                "gres": _gres(n) if n.get("gpus") else "",
                "features": ",".join(n.get("features") or []),
                "partitions": n.get("partitions") or [],
                "reason": n.get("reason") or "",
                "weight": n.get("weight"),
            }
            for n in nodes
        ],
        "partitions": [
            {
                "name": p.get("name"),
                "nodes": p.get("nodelist") or _compress(p.get("nodes") or []),
                "default": bool(p.get("default")),
                "state": p.get("state"),
                "max_time": None if p.get("max_time") is None else int(p["max_time"]) // 60,
                "total_cpus": p.get("total_cpus"),
                "total_nodes": p.get("total_nodes"),
            }
            for p in parts
        ],
    }
    return json.dumps(doc, indent=2)


def fetch() -> tuple[list[dict], list[dict], float]:
    from muster.protocol.client import ApiError, ConnectError

    try:
        ctl = connect(PROG)
        part_answer = ctl.get("/v1/partitions")
        node_answer = ctl.get("/v1/nodes")
    except ConnectError as e:
        raise CommandError(f"slurm_load_partitions: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"slurm_load_partitions: {e.message}", 1, raw=True) from None
    parts = [p for p in part_answer.get("partitions") or [] if isinstance(p, dict)]
    nodes = [n for n in node_answer.get("nodes") or [] if isinstance(n, dict)]
    return parts, nodes, float(node_answer.get("now") or 0)


def main(argv: list[str] | None = None) -> int:
    try:
        req = parse_args(argv_or_sys(argv), dict(os.environ))
        if isinstance(req, str):
            sys.stdout.write(req)
            return 0
        while True:
            parts, nodes, now = fetch()
            if req.json:
                print_lines([to_json(parts, nodes)])
                return 0
            lines = report_lines(parts, nodes, req, now)
            if req.iterate is None:
                print_lines(lines)
                return 0
            print_lines(lines + [""])
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
