"""sinfo's field table: node states as sinfo names them, the rows it prints, and what each
``-o`` letter and ``-O`` name shows of a row.

A row (``Row``) is a partition, or none, and the nodes it covers, as ``NodeWire`` and
``PartitionWire`` dicts (docs/api.md). ``FIELDS`` maps a letter to its header, its value
(a function of the row) and, for per-node values, the function whose result splits rows
(nodes that differ in a column shown never share a row). The width, justification and
cutting rules are ``muster.slurm.columns``'s; node lists are never cut.
"""

from muster.slurm.columns import Column, letter_columns, named_columns

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

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


def state_rank(node: dict[str, "Any"]) -> int:
    rank = _STATE_RANK.get(base_state(node), 0)
    if node.get("drain"):
        rank += _DRAIN_FLAG
    if node.get("responding") is False:
        rank += _NO_RESPOND_FLAG
    return rank


_BUSY = frozenset({"ALLOCATED", "MIXED"})


def base_state(node: dict[str, "Any"]) -> str:
    """The node's state without flags, upper case (``IDLE``, ``MIXED``, ...)."""
    return str(node.get("state") or "UNKNOWN").upper()


def short_state(node: dict[str, "Any"]) -> str:
    """``idle``, ``mix``, ``alloc``, ``down``, ``drain``, ``drng``, ``unk``; ``*`` if silent."""
    base = base_state(node)
    if node.get("drain"):
        text = "drng" if base in _BUSY else "drain"
    else:
        text = _SHORT.get(base, base.lower())
    return text + ("*" if node.get("responding") is False else "")


def long_state(node: dict[str, "Any"]) -> str:
    base = base_state(node)
    if node.get("drain"):
        text = "draining" if base in _BUSY else "drained"
    else:
        text = _LONG.get(base, base.lower())
    return text + ("*" if node.get("responding") is False else "")


def complete_state(node: dict[str, "Any"]) -> str:
    """``-O StateComplete``: the base state and every flag, ``idle+drain``, ``down+drain``."""
    base = base_state(node)
    text = _LONG.get(base, base.lower())
    if node.get("drain"):
        text += "+drain"
    if node.get("responding") is False:
        text += "+not_responding"
    return text


def unavailable(node: dict[str, "Any"]) -> bool:
    """Down, drained or silent: its idle CPUs count as "other" in A/I/O/T."""
    return (
        base_state(node) in ("DOWN", "UNKNOWN", "FUTURE") or bool(node.get("drain")) or node.get("responding") is False
    )


def state_filter_names(node: dict[str, "Any"]) -> set[str]:
    """Every name ``-t`` may use for this node's state (short, long, and its flags')."""
    base = base_state(node)
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

    def __init__(self, part: dict[str, "Any"] | None, nodes: list[dict[str, "Any"]]) -> None:
        self.part = part
        self.nodes = nodes


def compress_names(names: list[str]) -> str:
    """Node names as a hostlist (``gpu[01-04]``)."""
    if not names:
        return ""
    from muster.core.hostlist import compress

    return compress(names)


def _limit(seconds: "Any") -> str:
    from muster.core.timetext import format_sinfo_limit

    return format_sinfo_limit(None if seconds is None else int(seconds))


def _ts(epoch: object) -> str:
    from muster.core.timetext import format_timestamp

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
    return {"UP": "up", "DOWN": "down", "DRAIN": "drain", "INACTIVE": "inact"}.get(state, state.lower())


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
        elif base_state(n) in _BUSY:
            alloc += 1
        else:
            idle += 1
    return f"{alloc}/{idle}/{other}/{len(row.nodes)}"


def _nodes_ai(row: Row) -> str:
    a, i, _, _ = _nodes_aiot(row).split("/")
    return f"{a}/{i}"


def _same(row: Row, fn: "Callable[[dict[str, Any]], str]") -> str:
    """A per-node value for the row: the first node's (rows group equal values)."""
    return fn(row.nodes[0]) if row.nodes else ""


def _version(node: dict[str, "Any"]) -> str:
    """The version of the node's agent, as it registered (``N/A`` before it did)."""
    return str(node.get("version") or "N/A")


def gres_text(node: dict[str, "Any"]) -> str:
    """The node's GRES as Slurm prints them (``gpu:a100:8``), ``(null)`` without any."""
    if node.get("gres"):
        return str(node["gres"])
    gpus = int(node.get("gpus") or 0)
    if not gpus:
        return "(null)"
    return f"gpu:{node['gpu_type']}:{gpus}" if node.get("gpu_type") else f"gpu:{gpus}"


def _features(node: dict[str, "Any"]) -> str:
    return ",".join(node.get("features") or []) or "(null)"


def _reason(node: dict[str, "Any"]) -> str:
    return str(node.get("reason") or "none")


def _containment(node: dict[str, "Any"]) -> str:
    return str(node.get("containment") or "N/A")


def _sct(node: dict[str, "Any"]) -> str:
    """Sockets:cores:threads; a node that reports no topology is one socket of its CPUs."""
    sockets = int(node.get("sockets") or 1)
    threads = int(node.get("threads_per_core") or 1)
    cores = int(node.get("cores_per_socket") or max(1, int(node.get("cpus") or 1) // (sockets * threads)))
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
    "G": ("GRES", lambda r: _same(r, gres_text), gres_text),
    "h": ("OVERSUBSCRIBE", lambda r: str((r.part or {}).get("oversubscribe") or "NO"), None),
    "H": (
        "TIMESTAMP",
        lambda r: _same(r, lambda n: _ts(n.get("reason_time"))),
        lambda n: n.get("reason_time"),
    ),
    # muster's own (a letter Slurm leaves free): what confines jobs on the node
    "K": ("CONTAINMENT", lambda r: _same(r, _containment), _containment),
    "l": ("TIMELIMIT", lambda r: _limit((r.part or {}).get("max_time")), None),
    "L": (
        "DEFAULTTIME",
        lambda r: "n/a" if not (r.part or {}).get("default_time") else _limit(r.part["default_time"]),
        None,
    ),
    "m": (
        "MEMORY",
        lambda r: _same(r, lambda n: str(n.get("real_memory") or 0)),
        lambda n: n.get("real_memory"),
    ),
    "n": ("HOSTNAMES", lambda r: ",".join(str(n.get("name")) for n in r.nodes), None),
    "N": ("NODELIST", lambda r: compress_names([str(n.get("name")) for n in r.nodes]), None),
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
    "v": ("VERSION", lambda r: _same(r, _version), _version),
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

# The node fields (NodeWire keys) each letter reads besides BASE_KEYS, so that sinfo asks
# the controller for those alone (``GET /v1/nodes?fields=``, ctld.columns). A letter not
# here reads the partition only. A key the wire lacks (``sockets``) is read as absent.
BASE_KEYS = ("name", "state", "drain", "responding")
NODE_KEYS: dict[str, tuple[str, ...]] = {
    "b": ("features",),
    "c": ("cpus",),
    "C": ("cpus", "cpus_alloc"),
    "E": ("reason",),
    "f": ("features",),
    "G": ("gres", "gpus", "gpu_type"),
    "H": ("reason_time",),
    "K": ("containment",),
    "m": ("real_memory",),
    "o": ("addr",),
    "u": ("reason_user",),
    "U": ("reason_user",),
    "v": ("version",),
    "w": ("weight",),
    "X": ("cpus",),
    "Y": ("cpus",),
    "Z": ("cpus",),
    "z": ("cpus",),
}
PARTITION_ONLY = frozenset("aAdDeFghlLnNOpPrRsStT") | {"statecomplete"}  # besides BASE_KEYS


def node_keys(letters: list[str]) -> list[str]:
    """The node fields that showing, filtering and sorting by ``letters`` reads."""
    keys = dict.fromkeys(BASE_KEYS + ("reason", "reason_user", "reason_time"))  # the filters, -R
    for letter in letters:
        keys.update(dict.fromkeys(NODE_KEYS.get(letter, ())))
    return list(keys)


LONG_NAMES = {
    "available": "a",
    "cpus": "c",
    "containment": "K",
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
    "version": "v",
    "weight": "w",
    "defaulttime": "L",
    "sockets": "X",
    "cores": "Y",
    "threads": "Z",
    "socketcorethread": "z",
    "cpusload": "O",
}


# Node lists are never cut (Slurm prints them whole).
_UNCUT = frozenset("Nno")


def _field(letter: str) -> tuple[str, object, bool] | None:
    field = FIELDS.get(letter)
    return None if field is None else (field[0], field[1], letter not in _UNCUT)


_MUSTER_ONLY = frozenset("K")  # letters Slurm leaves free, muster uses: not in %all


def columns_from_format(fmt: str) -> list[Column]:
    """``-o``: ``%`` letters; ``%#P`` is as wide as the longest value; ``%all``: every
    field (``all_format``)."""
    if fmt == "%all":
        fmt = all_format()
    return letter_columns(fmt, _field, "Invalid node format specification: {}", sized=True)


def all_format() -> str:
    """``-o %all``: the letters in Slurm's order, a to z then A to Z, as wide as their
    values; as Slurm writes it, ``|`` after each lower-case one, `` |`` after each upper-case
    one, and the last one ends with a space instead. The letters muster has no field for
    (Slurm's %B, %I, %M, %V...) are left out, and so are muster's own (%K)."""
    lower = "".join(f"%{c}|" for c in "abcdefghijklmnopqrstuvwxyz" if c in FIELDS)
    upper = "".join(f"%{c} |" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c in FIELDS and c not in _MUSTER_ONLY)
    return (lower + upper)[:-1]


def _named(name: str) -> tuple[str, object, bool] | None:
    letter = LONG_NAMES.get(name)
    return None if letter is None else _field(letter)


def columns_from_long_format(spec: str) -> list[Column]:
    """``-O``: ``Name[:[.]width[suffix]]`` items, 20 wide unless told, one space apart."""
    cols = named_columns(spec, _named, "Invalid node format specification: {}", separator=" ")
    for c in cols:
        c.key = LONG_NAMES[c.key]  # type: ignore[index]  # rows are grouped by letters
    return cols


def parse_sort(spec: str) -> list[tuple[str, bool]]:
    """``-S``: read as Slurm does, one character at a time: each format letter sorts, one
    after ``-`` in descending order, ``#P`` the partitions in their configured order; commas,
    ``+`` and characters that name no field are passed over, not refused. Returns
    (key, descending) pairs, first key first; the key is the letter, or ``#P``."""
    keys = []
    for i, char in enumerate(spec):
        if char in ",#+-" or char not in FIELDS:
            continue
        before = spec[i - 1] if i else ""
        keys.append(("#P" if char == "P" and before == "#" else char, before == "-"))
    return keys


def _sort_value(letter: str, row: Row) -> tuple[int, float, str]:
    text = str(FIELDS[letter][1](row))  # type: ignore[operator]
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def sort_rows(rows: list[Row], keys: list[tuple[str, bool]]) -> list[Row]:
    """Rows in ``-S`` order: stable, the last key first; numbers compare as numbers, node
    names by their numbers (node2 before node10), states by rank."""
    configured: dict[str, int] = {}  # the rows come in the partitions' configured order
    for row in rows:
        configured.setdefault(_part_name(row, star=False), len(configured))
    out = list(rows)
    for key, descending in reversed(keys):
        if key == "#P":
            out.sort(key=lambda row: configured[_part_name(row, star=False)], reverse=descending)
        elif key in ("t", "T"):  # by state, as the default order (-t) ranks them
            out.sort(key=lambda row: state_rank(row.nodes[0]) if row.nodes else 0, reverse=descending)
        elif key == "N":
            out.sort(key=lambda row: [node_key(str(n.get("name"))) for n in row.nodes], reverse=descending)
        else:
            out.sort(key=lambda row, key=key: _sort_value(key, row), reverse=descending)  # type: ignore[misc]
    return out


def node_key(name: str) -> tuple[str, int, str]:
    head = name.rstrip("0123456789")
    tail = name[len(head) :]
    return (head, int(tail) if tail else -1, name)
