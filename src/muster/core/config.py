"""muster's configuration: the slurm.conf grammar, parsed purely from text.

``parse_config(text, path)`` returns a ``Config`` or raises ``ConfigError`` whose message is
``<path>:<line>: <what is wrong>``. It reads no file and no clock: the caller reads the file
and passes its text and name (the name is used in messages and to place ``AuthKeyFile``).

Grammar (Slurm's, in our words):

* A line holds whitespace-separated ``Key=Value`` pairs. Keys are case-insensitive and are
  stored under Slurm's spelling. A value is a run of non-blank characters or a double-quoted
  string (which may hold blanks and ``#``).
* ``#`` starts a comment unless written ``\\#``; a trailing backslash joins the next line,
  and errors on the joined line are reported at its first physical line.
* A line whose first key is ``NodeName`` defines nodes, ``PartitionName`` partitions; the
  name ``DEFAULT`` sets defaults for the lines of that kind that follow. Other lines are
  global settings. ``Include`` and other line kinds muster does not support are recorded in
  ``Config.warnings`` and skipped, as are unknown keys; known Slurm keys that muster does not
  use are kept in ``settings`` silently.

Invariants of a returned ``Config``: node names are unique; every partition names only
defined nodes; every typed setting that was given parses (accessors never raise).

This module is the grammar; what it returns is ``core.conftypes`` (re-exported here) and the
keys it knows are ``core.confkeys``.
"""

from __future__ import annotations

import copy
import re

from muster.core.confkeys import (
    BOOL_KEYS,
    CHOICE_KEYS,
    FALSE,
    GLOBAL,
    HOST_ADDR_RE,
    INT_KEYS,
    KEY_RE,
    NODE,
    NODE_STATES,
    OVERSUBSCRIBE_RE,
    PARTITION,
    PARTITION_STATES,
    PORT_RANGE_RE,
    PREEMPT_TYPES,
    SUSPEND_NEEDS_GANG,
    TIME_KEYS,
    TRUE,
    UNLIMITED,
    UNSUPPORTED_LINES,
    WORD_RE,
    preempt_gang,
    preempt_mode,
    split_list,
)
from muster.core.conftext import strip_comment
from muster.core.conftypes import Config, ConfigError, NodeConf, PartitionConf
from muster.core.hostlist import HostlistError, expand
from muster.core.resources import GresError, parse_gres_entry
from muster.core.rlimits import RlimitError, parse_names
from muster.core.timefmt import TimeFormatError, parse_time_limit
from muster.core.tlsconf import CTLD_NAME, TLS_MUSTER, TLSConfError, check_type, parse_parameters

__all__ = ["Config", "ConfigError", "NodeConf", "PartitionConf", "add_partitions", "parse_config"]


# --- parsing --------------------------------------------------------------------------------


def parse_config(text: str, path: str = "<config>") -> Config:
    """Parse slurm.conf-syntax ``text``; ``path`` names it in messages and places defaults.

    Raises ``ConfigError`` (``<path>:<line>: ...``) on the first malformed line.
    """
    parser = _Parser(path)
    for lineno, line in _logical_lines(text):
        parser.line(lineno, line)
    return parser.finish()


def add_partitions(config: Config, lines: list[str], where: str = "scontrol") -> Config:
    """``config`` with more partitions, each a ``PartitionName=...`` line in the file's
    syntax (``scontrol create partition``'s, kept by the controller): a new ``Config``,
    ``config`` untouched. The file's ``PartitionName=DEFAULT`` values do not apply; a line
    that is not a partition, or names a partition ``config`` has, is a ``ConfigError``
    (``<where>:<n>: ...``, ``n`` counting ``lines`` from 1)."""
    parser = _Parser(where)
    parser.settings = dict(config.settings)
    parser.nodes = config.nodes
    parser.partitions = [copy.copy(p) for p in config.partitions]
    for lineno, line in enumerate(lines, start=1):
        if not line.strip().lower().startswith("partitionname="):
            raise ConfigError(f"{where}:{lineno}: not a PartitionName line")
        parser.line(lineno, line)
    added = parser.warnings
    parser.warnings = []
    fresh = parser.finish()
    fresh.path = config.path
    fresh.warnings = [*config.warnings, *added]
    fresh.ctld_hosts = config.ctld_hosts
    fresh.topology = config.topology
    return fresh


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continued lines and strip comments: (first physical line number, content)."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for lineno, physical in enumerate(text.splitlines(), start=1):
        if not pending:
            start = lineno
        stripped = physical.rstrip()
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(physical)
        out.append((start, strip_comment("".join(pending))))
        pending = []
    if pending:  # a backslash on the last line continues into nothing
        out.append((start, strip_comment("".join(pending))))
    return out


def _tokenize(line: str, where: str) -> list[tuple[str, str]]:
    """Split a logical line into (key as written, value) pairs."""
    pairs: list[tuple[str, str]] = []
    pos, end = 0, len(line)
    while True:
        while pos < end and line[pos].isspace():
            pos += 1
        if pos >= end:
            return pairs
        m = re.compile(KEY_RE).match(line, pos)
        if m is None:
            word = line[pos:].split(None, 1)[0]
            raise ConfigError(f"{where}: expected Key=Value, found {word!r}")
        key = m.group(1)
        pos = m.end()
        if pos < end and line[pos] == '"':
            close = line.find('"', pos + 1)
            if close < 0:
                raise ConfigError(f"{where}: unterminated quote in value of {key}")
            value = line[pos + 1 : close]
            pos = close + 1
            if pos < end and not line[pos].isspace():
                raise ConfigError(f"{where}: unexpected text after the closing quote of {key}")
        else:
            word_match = re.compile(WORD_RE).match(line, pos)
            assert word_match is not None  # \S* always matches
            value = word_match.group()
            # "A= B=1" would otherwise read as A="B=1": a blank after '=' then a pair
            # means A's value is missing, which is the likelier mistake.
            if not value or (line[pos - 1].isspace() and re.compile(KEY_RE).match(value)):
                raise ConfigError(f"{where}: missing value for {key}")
            pos = word_match.end()
        pairs.append((key, value))


class _Parser:
    """Accumulates one file's lines; ``finish`` resolves cross references."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.settings: dict[str, str] = {}
        self.ctld_hosts: list[str] = []
        self.warnings: list[str] = []
        self.node_defaults: dict[str, str] = {}
        self.part_defaults: dict[str, str] = {}
        self.nodes: list[NodeConf] = []
        self.node_lines: dict[str, int] = {}
        self.partitions: list[PartitionConf] = []

    def where(self, lineno: int) -> str:
        return f"{self.path}:{lineno}"

    def warn(self, lineno: int, message: str) -> None:
        self.warnings.append(f"{self.where(lineno)}: {message}")

    def line(self, lineno: int, line: str) -> None:
        words = line.split(None, 1)
        if not words:
            return
        if words[0].lower() == "include":
            target = words[1].strip() if len(words) > 1 else ""
            self.warn(lineno, f"Include is not supported; {target!r} ignored")
            return
        where = self.where(lineno)
        pairs = _tokenize(line, where)
        first = pairs[0][0].lower()
        for key, _ in pairs[1:]:
            if key.lower() in ("nodename", "partitionname"):
                raise ConfigError(f"{where}: {key} must be the first key on its line")
        if first == "nodename":
            self.node_line(lineno, pairs)
        elif first == "partitionname":
            self.partition_line(lineno, pairs)
        elif first in UNSUPPORTED_LINES:
            self.warn(lineno, f"{UNSUPPORTED_LINES[first]} lines are not supported; ignored")
        else:
            for key, value in pairs:
                self.global_setting(lineno, key, value)

    # -- global settings --

    def global_setting(self, lineno: int, key: str, value: str) -> None:
        canon = GLOBAL.get(key.lower())
        if canon is None:
            self.warn(lineno, f"unknown key {key!r} ignored")
            return
        where = self.where(lineno)
        if canon in INT_KEYS:
            _int(value, canon, where)
        elif canon in TIME_KEYS:
            _time(value, canon, where)
        elif canon in BOOL_KEYS:
            _bool(value, canon, where)
        elif canon == "PreemptType":
            if value.lower() not in PREEMPT_TYPES:
                raise ConfigError(
                    f"{where}: bad PreemptType {value!r}: expected preempt/none, preempt/qos or preempt/partition_prio"
                )
        elif canon == "PreemptMode":
            if _preempt_mode(value, where) == "SUSPEND" and not preempt_gang(value):
                raise ConfigError(f"{where}: {SUSPEND_NEEDS_GANG}")
        elif canon in CHOICE_KEYS:
            if value.lower() not in CHOICE_KEYS[canon]:
                raise ConfigError(f"{where}: bad {canon} {value!r}: expected {' or '.join(CHOICE_KEYS[canon])}")
        elif canon == "SlurmctldPort":
            m = re.compile(PORT_RANGE_RE).match(value)
            if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
                raise ConfigError(f"{where}: bad SlurmctldPort {value!r}: expected PORT or PORT-PORT")
        elif canon in ("PropagateResourceLimits", "PropagateResourceLimitsExcept"):
            try:
                parse_names(value)
            except RlimitError as e:
                raise ConfigError(f"{where}: bad {canon} {value!r}: {e}") from None
            other = "PropagateResourceLimitsExcept" if canon == "PropagateResourceLimits" else "PropagateResourceLimits"
            if other in self.settings:  # Slurm: only one of the two may be specified
                raise ConfigError(f"{where}: {canon} and {other} cannot both be set")
        elif canon in ("TLSType", "TLSParameters"):
            try:
                if canon == "TLSType":
                    check_type(value)
                else:
                    parse_parameters(value)
            except TLSConfError as e:
                raise ConfigError(f"{where}: {e}") from None
        elif canon == "SlurmctldHost":
            if re.compile(HOST_ADDR_RE).match(value) is None:
                raise ConfigError(f"{where}: bad SlurmctldHost {value!r}: expected HOST or HOST(ADDR)")
            # Later lines name backup controllers; the first is the primary.
            self.ctld_hosts.append(value)
            self.settings.setdefault(canon, value)
            return
        self.settings[canon] = value

    # -- nodes --

    def node_line(self, lineno: int, pairs: list[tuple[str, str]]) -> None:
        where = self.where(lineno)
        names_expr = pairs[0][1]
        params = self.keyed(lineno, pairs[1:], NODE, "node")
        if names_expr.upper() == "DEFAULT":
            self.node_defaults.update(params)
            return
        params = {**self.node_defaults, **params}
        names = _hostlist(names_expr, "NodeName", where)
        addrs = _per_node(params.get("NodeAddr"), names, "NodeAddr", where)
        hostnames = _per_node(params.get("NodeHostname"), names, "NodeHostname", where)
        ports = _per_node(params.get("Port"), names, "Port", where)

        boards = _int(params.get("Boards", "1"), "Boards", where, minimum=1)
        sockets = _int(params.get("Sockets", params.get("SocketsPerBoard", "1")), "Sockets", where, minimum=1)
        if "Sockets" not in params:
            sockets *= boards  # SocketsPerBoard counts per board; Sockets counts per node
        cores = _int(params.get("CoresPerSocket", "1"), "CoresPerSocket", where, minimum=1)
        threads = _int(params.get("ThreadsPerCore", "1"), "ThreadsPerCore", where, minimum=1)
        # Without CPUs, Slurm counts the hardware threads the topology describes.
        cpus = _int(params.get("CPUs", str(sockets * cores * threads)), "CPUs", where, minimum=1)
        gpus, gpu_type, gpu_types, gres_counts = _parse_gres(params.get("Gres", ""), where)
        state = params.get("State", "UNKNOWN").upper()
        if any(part not in NODE_STATES for part in state.split("+")):
            raise ConfigError(f"{where}: bad node State {params['State']!r}")

        shared = {
            "cpus": cpus,
            "boards": boards,
            "sockets": sockets,
            "cores_per_socket": cores,
            "threads_per_core": threads,
            "real_memory": _int(params.get("RealMemory", "1"), "RealMemory", where),
            "tmp_disk": _int(params.get("TmpDisk", "0"), "TmpDisk", where),
            "weight": _int(params.get("Weight", "1"), "Weight", where),
            "gres": params.get("Gres", ""),
            "gpus": gpus,
            "gpu_type": gpu_type,
            "state": state,
            "reason": params.get("Reason"),
            "lineno": lineno,
        }
        features = split_list(params.get("Features", ""))
        port_numbers = [_int(p, "Port", where, minimum=1, maximum=65535) for p in ports or ()]
        for i, name in enumerate(names):
            if name in self.node_lines:
                raise ConfigError(f"{where}: duplicate node {name!r} (first defined at line {self.node_lines[name]})")
            self.node_lines[name] = lineno
            hostname = hostnames[i] if hostnames else name
            self.nodes.append(
                NodeConf(
                    name,
                    hostname=hostname,
                    addr=addrs[i] if addrs else hostname,
                    # 0 until finish(): SlurmdPort may be set further down the file.
                    port=port_numbers[i] if port_numbers else 0,
                    gpu_types=dict(gpu_types),
                    gres_counts=dict(gres_counts),
                    features=list(features),
                    params=dict(params),
                    **shared,  # type: ignore[arg-type]
                )
            )

    # -- partitions --

    def partition_line(self, lineno: int, pairs: list[tuple[str, str]]) -> None:
        where = self.where(lineno)
        name = pairs[0][1]
        params = self.keyed(lineno, pairs[1:], PARTITION, "partition")
        if name.upper() == "DEFAULT":
            self.part_defaults.update(params)
            return
        for other in self.partitions:
            if other.name == name:
                raise ConfigError(f"{where}: duplicate partition {name!r} (first defined at line {other.lineno})")
        params = {**self.part_defaults, **params}
        # nodes stays empty until finish(): nodes may be defined after partitions.
        part = PartitionConf(name)
        part.nodes_expr = params.get("Nodes", "")
        part.default = _bool(params.get("Default", "NO"), "Default", where)
        part.max_time = _time(params.get("MaxTime", "UNLIMITED"), "MaxTime", where)
        default_time = params.get("DefaultTime", "NONE")
        part.default_time = None if default_time.upper() == "NONE" else _time(default_time, "DefaultTime", where)
        part.max_nodes = _int_or_unlimited(params.get("MaxNodes", "UNLIMITED"), "MaxNodes", where)
        part.min_nodes = _int(params.get("MinNodes", "0"), "MinNodes", where)
        part.state = params.get("State", "UP").upper()
        if part.state not in PARTITION_STATES:
            raise ConfigError(f"{where}: bad partition State {params['State']!r}: expected UP, DOWN, DRAIN or INACTIVE")
        # The old single Priority= sets both the tier and the job factor.
        legacy = params.get("Priority", "1")
        part.priority_tier = _int(params.get("PriorityTier", legacy), "PriorityTier", where)
        part.priority_job_factor = _int(params.get("PriorityJobFactor", legacy), "PriorityJobFactor", where)
        part.allow_accounts = _access_list(params.get("AllowAccounts"))
        part.allow_groups = _access_list(params.get("AllowGroups"))
        part.allow_qos = _access_list(params.get("AllowQos"))
        part.deny_accounts = _access_list(params.get("DenyAccounts"))
        part.deny_qos = _access_list(params.get("DenyQos"))
        oversubscribe = params.get("OverSubscribe", "NO").upper()
        if re.compile(OVERSUBSCRIBE_RE).match(oversubscribe) is None:
            raise ConfigError(
                f"{where}: bad OverSubscribe {params['OverSubscribe']!r}: "
                "expected EXCLUSIVE, NO, YES or FORCE (optionally :count)"
            )
        part.oversubscribe = oversubscribe
        part.hidden = _bool(params.get("Hidden", "NO"), "Hidden", where)
        part.root_only = _bool(params.get("RootOnly", "NO"), "RootOnly", where)
        part.grace_time = _int(params.get("GraceTime", "0"), "GraceTime", where)
        def_mem = params.get("DefMemPerCPU")
        part.def_mem_per_cpu = None if def_mem is None else _int(def_mem, "DefMemPerCPU", where)
        part.max_mem_per_node = _int_or_unlimited(params.get("MaxMemPerNode", "UNLIMITED"), "MaxMemPerNode", where)
        if "PreemptMode" in params:
            _preempt_mode(params["PreemptMode"], where)
        if "ExpediteRequeue" in params:  # muster's: the partition's jobs default to --requeue=expedite
            _bool(params["ExpediteRequeue"], "ExpediteRequeue", where)
        if "Preflight" in params:  # muster's: the partition's jobs pass the pre-flight gate
            _bool(params["Preflight"], "Preflight", where)
        if "PreflightAllReduce" in params:  # muster's: the gate's all-reduce across the nodes
            _bool(params["PreflightAllReduce"], "PreflightAllReduce", where)
        if params.get("Stragglers", "flag").lower() not in ("flag", "exclude", "swap", "off"):  # muster's
            raise ConfigError(f"{where}: Stragglers={params['Stragglers']!r}: expected flag, exclude, swap or off")
        if "StragglerWindow" in params:  # muster's: seconds slow before a node is flagged
            _int(params["StragglerWindow"], "StragglerWindow", where, 0, 86400)
        if "HangTimeout" in params:  # muster's: a training job's default --hang-timeout
            _time(params["HangTimeout"], "HangTimeout", where)
        part.params = params
        part.lineno = lineno
        self.partitions.append(part)

    # -- shared --

    def keyed(self, lineno: int, pairs: list[tuple[str, str]], table: dict[str, str], kind: str) -> dict[str, str]:
        params: dict[str, str] = {}
        for key, value in pairs:
            canon = table.get(key.lower())
            if canon is None:
                self.warn(lineno, f"unknown {kind} key {key!r} ignored")
                continue
            params[canon] = value
        return params

    def finish(self) -> Config:
        slurmd_port = _int(self.settings.get("SlurmdPort", "6818"), "SlurmdPort", self.path)
        for node in self.nodes:
            if not node.port:
                node.port = slurmd_port
        all_names = [node.name for node in self.nodes]
        if CTLD_NAME in all_names and self.settings.get("TLSType", "").lower() == TLS_MUSTER:
            # A node's certificate names it; this name is the controller's.
            raise ConfigError(
                f"{self.path}: NodeName={CTLD_NAME} is reserved for the controller with TLSType={TLS_MUSTER}"
            )
        order = {name: i for i, name in enumerate(all_names)}
        defaults = 0
        for part in self.partitions:
            defaults += part.default
            expr = part.nodes_expr.strip()
            if not expr:
                continue
            if expr.upper() == "ALL":
                part.nodes = list(all_names)
                continue
            where = self.where(part.lineno)
            wanted = set()
            for name in _hostlist(expr, "Nodes", where):
                if name not in order:
                    raise ConfigError(f"{where}: partition {part.name!r} names unknown node {name!r}")
                wanted.add(name)
            part.nodes = sorted(wanted, key=order.__getitem__)
        for part in self.partitions:  # muster's SpareNodes=: a pool inside the partition
            spares = part.params.get("SpareNodes", "").strip()
            if spares:
                where = self.where(part.lineno)
                for name in _hostlist(spares, "SpareNodes", where):
                    if name not in part.nodes:
                        raise ConfigError(f"{where}: SpareNodes names {name!r}, not a node of partition {part.name!r}")
        self._check_suspend()
        if defaults > 1:
            first = next(p for p in self.partitions if p.default)
            self.warnings.append(f"{self.path}: several partitions have Default=YES; {first.name!r} is the default")
        gres_types = set(split_list(self.settings.get("GresTypes", "")))
        if gres_types:
            reported: set[tuple[int, str]] = set()  # one warning per line, not per node
            for node in self.nodes:
                names = set(node.gres_counts) | ({"gpu"} if node.gpus else set())
                for missing in sorted(names - gres_types):
                    if (node.lineno, missing) not in reported:
                        reported.add((node.lineno, missing))
                        self.warn(node.lineno, f"gres {missing!r} is not listed in GresTypes")
        return Config(self.path, self.settings, self.nodes, self.partitions, self.warnings, self.ctld_hosts)

    def _check_suspend(self) -> None:
        """PreemptMode=SUSPEND (the cluster's or a partition's) needs GANG in the cluster's
        PreemptMode, as in Slurm, and preemption by partition PriorityTier: muster does not
        suspend for a QOS (``docs/preemption.md``)."""
        cluster = self.settings.get("PreemptMode", "")
        suspending = [(p.lineno, p.name) for p in self.partitions if _mode_of(p.params) == "SUSPEND"]
        if not suspending and _mode_of(self.settings) != "SUSPEND":
            return
        where = self.where(suspending[0][0]) if suspending else self.path
        if not preempt_gang(cluster):
            raise ConfigError(
                f"{where}: {SUSPEND_NEEDS_GANG} (in the cluster's PreemptMode, e.g. PreemptMode=SUSPEND,GANG)"
            )
        kind = self.settings.get("PreemptType", "preempt/none").lower()
        if kind == "preempt/qos":
            raise ConfigError(
                f"{where}: PreemptMode=SUSPEND needs PreemptType=preempt/partition_prio: "
                "muster suspends jobs for a partition of higher PriorityTier only"
            )


def _mode_of(params: dict[str, str]) -> str | None:
    text = params.get("PreemptMode")
    try:
        return preempt_mode(text) if text else None
    except ValueError:
        return None


# --- value helpers ----------------------------------------------------------------------------


def _int(value: str, key: str, where: str, minimum: int = 0, maximum: int | None = None) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{where}: bad {key} {value!r}: expected an integer") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"at least {minimum}" if maximum is None else f"{minimum}..{maximum}"
        raise ConfigError(f"{where}: bad {key} {value!r}: expected {bound}")
    return number


def _int_or_unlimited(value: str, key: str, where: str) -> int | None:
    return None if value.lower() in UNLIMITED else _int(value, key, where)


def _bool(value: str, key: str, where: str) -> bool:
    lowered = value.lower()
    if lowered in TRUE:
        return True
    if lowered in FALSE:
        return False
    raise ConfigError(f"{where}: bad {key} {value!r}: expected YES or NO")


def _time(value: str, key: str, where: str) -> int | None:
    try:
        return parse_time_limit(value)
    except TimeFormatError:
        raise ConfigError(
            f"{where}: bad {key} {value!r}: expected minutes, [days-]hours:minutes:seconds or INFINITE"
        ) from None


def _preempt_mode(value: str, where: str) -> str:
    try:
        return preempt_mode(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _access_list(value: str | None) -> list[str] | None:
    if value is None or value.upper() == "ALL":
        return None
    return split_list(value)


def _hostlist(expr: str, key: str, where: str) -> list[str]:
    try:
        return expand(expr)
    except HostlistError as exc:
        raise ConfigError(f"{where}: bad {key}: {exc}") from None


def _per_node(value: str | None, names: list[str], key: str, where: str) -> list[str] | None:
    """Expand a per-node value: one value for all nodes, or exactly one per node."""
    if value is None:
        return None
    values = _hostlist(value, key, where)
    if len(values) == 1:
        return values * len(names)
    if len(values) != len(names):
        raise ConfigError(f"{where}: {key} {value!r} gives {len(values)} values for {len(names)} nodes")
    return values


def _parse_gres(text: str, where: str) -> tuple[int, str | None, dict[str, int], dict[str, int]]:
    """``gpu:a100:8,gpu:h100:2,nic:1`` -> (10, 'a100', {'a100': 8, 'h100': 2}, {'nic': 1})."""
    gpus = 0
    gpu_type: str | None = None
    gpu_types: dict[str, int] = {}
    others: dict[str, int] = {}
    seen_gpu = False
    for entry in split_list(text):
        spec = entry.split("(", 1)[0]  # drop socket binding such as "(S:0-1)"
        spec = ":".join(f for f in spec.split(":") if f.lower() != "no_consume")
        try:
            gres = parse_gres_entry(spec)
        except GresError as e:
            if e.count:
                raise ConfigError(f"{where}: bad Gres count in {entry!r}") from None
            raise ConfigError(f"{where}: bad Gres {entry!r}: expected NAME[:TYPE][:COUNT]") from None
        name, gres_type, count = gres.name, gres.type, gres.count
        if name != "gpu":
            others[name] = others.get(name, 0) + count
            continue
        gpus += count
        if not seen_gpu:
            gpu_type, seen_gpu = gres_type, True
        if gres_type is not None:
            gpu_types[gres_type] = gpu_types.get(gres_type, 0) + count
    return gpus, gpu_type, gpu_types, others
