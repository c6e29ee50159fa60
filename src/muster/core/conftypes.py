"""What a parsed slurm.conf is: ``Config`` (global settings with typed reads, nodes,
partitions, warnings), ``NodeConf``, ``PartitionConf``, and ``ConfigError``.

``core.config.parse_config`` builds them and checks every typed setting while parsing, so
the accessors here do not fail on a ``Config`` it returned. An accessor exists only for a
setting muster reads; the scheduler's keys are ``sched.config.SchedConfig``'s to read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from muster.core import requeuedelay
from muster.core.confkeys import GLOBAL, HOST_ADDR_RE, PORT_RANGE_RE, split_list, split_params
from muster.core.errors import MusterError
from muster.core.timefmt import TimeFormatError, parse_time_limit
from muster.core.tlsconf import TLSSettings

__all__ = ["BlockConf", "Config", "ConfigError", "NodeConf", "PartitionConf", "SwitchConf", "TopologyConf"]


class ConfigError(MusterError, ValueError):
    """The configuration text is malformed; the message starts with ``path:line:``."""


# --- the parsed objects --------------------------------------------------------------------


class _Record:
    """Shared ``repr`` for the plain slotted records below."""

    __slots__: tuple[str, ...] = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


class NodeConf(_Record):
    """One node as configured. ``port`` is always set (``SlurmdPort`` when not given).

    ``gpus`` is the total GPU count from ``Gres``; ``gpu_type`` the type of the first GPU
    entry (None if untyped); ``gpu_types`` maps each named type to its count. ``gres_counts``
    holds the other generic resources (every name except ``gpu``) with their totals.
    ``params`` holds every key given for the node (defaults included) under Slurm's spelling.
    """

    __slots__ = (
        "name",
        "addr",
        "hostname",
        "port",
        "cpus",
        "boards",
        "sockets",
        "cores_per_socket",
        "threads_per_core",
        "real_memory",
        "tmp_disk",
        "gres",
        "gpus",
        "gpu_type",
        "gpu_types",
        "gres_counts",
        "features",
        "weight",
        "state",
        "reason",
        "params",
        "lineno",
    )

    def __init__(
        self,
        name: str,
        *,
        addr: str | None = None,
        hostname: str | None = None,
        port: int = 6818,
        cpus: int = 1,
        boards: int = 1,
        sockets: int = 1,
        cores_per_socket: int = 1,
        threads_per_core: int = 1,
        real_memory: int = 1,
        tmp_disk: int = 0,
        gres: str = "",
        gpus: int = 0,
        gpu_type: str | None = None,
        gpu_types: dict[str, int] | None = None,
        gres_counts: dict[str, int] | None = None,
        features: list[str] | None = None,
        weight: int = 1,
        state: str = "UNKNOWN",
        reason: str | None = None,
        params: dict[str, str] | None = None,
        lineno: int = 0,
    ) -> None:
        self.name = name
        self.hostname = hostname or name
        self.addr = addr or self.hostname
        self.port = port
        self.cpus = cpus
        self.boards = boards
        self.sockets = sockets
        self.cores_per_socket = cores_per_socket
        self.threads_per_core = threads_per_core
        self.real_memory = real_memory
        self.tmp_disk = tmp_disk
        self.gres = gres
        self.gpus = gpus
        self.gpu_type = gpu_type
        self.gpu_types = gpu_types if gpu_types is not None else {}
        self.gres_counts = gres_counts if gres_counts is not None else {}
        self.features = features if features is not None else []
        self.weight = weight
        self.state = state
        self.reason = reason
        self.params = params if params is not None else {}
        self.lineno = lineno


class PartitionConf(_Record):
    """One partition as configured.

    ``nodes`` lists node names in configuration-file order (``Nodes=ALL`` means all of them);
    ``nodes_expr`` is the expression as written. Times are seconds, ``None`` for no limit
    (``default_time`` None: jobs get ``max_time``). ``max_nodes`` None is unlimited;
    ``min_nodes`` defaults to 0 as in Slurm. ``allow_*`` None means everyone is allowed and
    ``deny_*`` None means nobody is denied. ``oversubscribe`` is EXCLUSIVE, NO, YES or FORCE,
    optionally with ``:count``.
    """

    __slots__ = (
        "name",
        "nodes",
        "nodes_expr",
        "default",
        "max_time",
        "default_time",
        "max_nodes",
        "min_nodes",
        "state",
        "priority_tier",
        "priority_job_factor",
        "allow_accounts",
        "allow_groups",
        "allow_qos",
        "deny_accounts",
        "deny_qos",
        "oversubscribe",
        "hidden",
        "root_only",
        "grace_time",
        "def_mem_per_cpu",
        "max_mem_per_node",
        "params",
        "lineno",
    )

    def __init__(
        self,
        name: str,
        *,
        nodes: list[str] | None = None,
        nodes_expr: str = "",
        default: bool = False,
        max_time: int | None = None,
        default_time: int | None = None,
        max_nodes: int | None = None,
        min_nodes: int = 0,
        state: str = "UP",
        priority_tier: int = 1,
        priority_job_factor: int = 1,
        allow_accounts: list[str] | None = None,
        allow_groups: list[str] | None = None,
        allow_qos: list[str] | None = None,
        deny_accounts: list[str] | None = None,
        deny_qos: list[str] | None = None,
        oversubscribe: str = "NO",
        hidden: bool = False,
        root_only: bool = False,
        grace_time: int = 0,
        def_mem_per_cpu: int | None = None,
        max_mem_per_node: int | None = None,
        params: dict[str, str] | None = None,
        lineno: int = 0,
    ) -> None:
        self.name = name
        self.nodes = nodes if nodes is not None else []
        self.nodes_expr = nodes_expr
        self.default = default
        self.max_time = max_time
        self.default_time = default_time
        self.max_nodes = max_nodes
        self.min_nodes = min_nodes
        self.state = state
        self.priority_tier = priority_tier
        self.priority_job_factor = priority_job_factor
        self.allow_accounts = allow_accounts
        self.allow_groups = allow_groups
        self.allow_qos = allow_qos
        self.deny_accounts = deny_accounts
        self.deny_qos = deny_qos
        self.oversubscribe = oversubscribe
        self.hidden = hidden
        self.root_only = root_only
        self.grace_time = grace_time
        self.def_mem_per_cpu = def_mem_per_cpu
        self.max_mem_per_node = max_mem_per_node
        self.params = params if params is not None else {}
        self.lineno = lineno

    @property
    def exclusive(self) -> bool:
        """Whether every job gets whole nodes (``OverSubscribe=EXCLUSIVE``)."""
        return self.oversubscribe == "EXCLUSIVE"


# --- topology.conf (parsed by core.topoconf) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class SwitchConf:
    """One ``SwitchName`` line: a leaf (``nodes``) or a switch above others (``switches``)."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: int = 1
    lineno: int = 0


@dataclass(frozen=True, slots=True)
class BlockConf:
    """One ``BlockName`` line: a base block and its nodes."""

    name: str
    nodes: tuple[str, ...]
    lineno: int = 0


@dataclass(frozen=True, slots=True)
class TopologyConf:
    """A parsed topology.conf: switches (tree) or blocks, never both."""

    path: str
    switches: tuple[SwitchConf, ...] = ()
    blocks: tuple[BlockConf, ...] = ()
    block_sizes: tuple[int, ...] = ()  # as given (BlockSizes=), () when not given
    warnings: tuple[str, ...] = ()

    @property
    def plugin(self) -> str:
        """The TopologyPlugin this file is written for."""
        return "topology/block" if self.blocks else "topology/tree"


def instance_path(path: str, index: int) -> str:
    """A file of controller number ``index``: ``path`` for the primary, ``path.N`` else."""
    return path if index == 0 else f"{path}.{index}"


class Config:
    """A parsed configuration: global ``settings``, ``nodes``, ``partitions``, ``warnings``.

    ``settings`` maps Slurm's key spelling to the raw value; the properties give typed views
    with Slurm's defaults (muster's where the key is muster's own).
    """

    __slots__ = (
        "path",
        "settings",
        "nodes",
        "partitions",
        "warnings",
        "ctld_hosts",
        "topology",
        "_nodes_by_name",
        "_parts_by_name",
    )

    def __init__(
        self,
        path: str = "<config>",
        settings: dict[str, str] | None = None,
        nodes: list[NodeConf] | None = None,
        partitions: list[PartitionConf] | None = None,
        warnings: list[str] | None = None,
        ctld_hosts: list[str] | None = None,
    ) -> None:
        self.path = path
        self.settings = settings if settings is not None else {}
        self.nodes = nodes if nodes is not None else []
        self.partitions = partitions if partitions is not None else []
        self.warnings = warnings if warnings is not None else []
        # Every SlurmctldHost given, primary first; the primary is also in settings.
        self.ctld_hosts = ctld_hosts if ctld_hosts is not None else []
        if "SlurmctldHost" in self.settings and not self.ctld_hosts:
            self.ctld_hosts = [self.settings["SlurmctldHost"]]
        # topology.conf, when TopologyPlugin names one (read beside this file by the caller)
        self.topology: TopologyConf | None = None
        self._nodes_by_name = {n.name: n for n in self.nodes}
        self._parts_by_name = {p.name: p for p in self.partitions}

    def __repr__(self) -> str:
        return (
            f"Config(path={self.path!r}, {len(self.settings)} settings, "
            f"{len(self.nodes)} nodes, {len(self.partitions)} partitions)"
        )

    # -- lookups --

    def node(self, name: str) -> NodeConf | None:
        """The node called ``name``, or None."""
        return self._nodes_by_name.get(name)

    def partition(self, name: str) -> PartitionConf | None:
        """The partition called ``name``, or None."""
        return self._parts_by_name.get(name)

    def partition_preempt_mode(self, part: PartitionConf) -> str:
        """The PreemptMode that applies to ``part``: its own, else the cluster's, else OFF,
        in upper case (``REQUEUE``, ``GANG,SUSPEND``...), as scontrol shows it."""
        return (part.params.get("PreemptMode") or self.settings.get("PreemptMode") or "OFF").upper()

    def default_partition(self) -> PartitionConf | None:
        """The first partition marked ``Default=YES``, else the first one, else None."""
        for part in self.partitions:
            if part.default:
                return part
        return self.partitions[0] if self.partitions else None

    # -- generic typed reads (for keys without a property) --

    def get(self, key: str, default: str | None = None) -> str | None:
        """Raw value of ``key`` (any capitalisation), or ``default``."""
        return self.settings.get(GLOBAL.get(key.lower(), key), default)

    def get_int(self, key: str, default: int) -> int:
        """``key`` as an integer; ``default`` when unset. Raises ConfigError if not one."""
        raw = self.get(key)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{self.path}: {key}={raw!r} is not an integer") from None

    def get_seconds(self, key: str, default: int | None) -> int | None:
        """``key`` in Slurm's time format as seconds (None for INFINITE); ``default`` if unset."""
        raw = self.get(key)
        if raw is None:
            return default
        try:
            return parse_time_limit(raw)
        except TimeFormatError:
            raise ConfigError(f"{self.path}: {key}={raw!r} is not a time") from None

    def get_list(self, key: str) -> list[str]:
        """``key`` as a comma-separated list; empty when unset."""
        return split_list(self.get(key) or "")

    # -- cluster and daemons --

    @property
    def cluster_name(self) -> str:
        # Slurm folds the cluster name to lower case; accounting keys on it.
        return self.settings.get("ClusterName", "cluster").lower()

    @property
    def ctld_host(self) -> str:
        """Host name of the primary controller (``SlurmctldHost=host(addr)`` or ControlMachine)."""
        return self._ctld_host_addr()[0]

    @property
    def ctld_addr(self) -> str:
        """Address to reach the controller: the ``(addr)`` part, ControlAddr, or the host."""
        return self._ctld_host_addr()[1]

    def _ctld_host_addr(self) -> tuple[str, str]:
        if self.ctld_hosts:
            m = re.compile(HOST_ADDR_RE).match(self.ctld_hosts[0])
            assert m is not None  # checked while parsing
            return m.group(1), m.group(2) or m.group(1)
        machine = self.settings.get("ControlMachine")
        if machine:
            return machine, self.settings.get("ControlAddr", machine)
        return "localhost", "127.0.0.1"

    @property
    def ctld_port(self) -> int:
        """First port of ``SlurmctldPort`` (Slurm allows a range); default 6817."""
        m = re.compile(PORT_RANGE_RE).match(self.settings.get("SlurmctldPort", "6817"))
        assert m is not None  # checked while parsing
        return int(m.group(1))

    @property
    def state_save_location(self) -> str:
        return self.settings.get("StateSaveLocation", "/var/spool/muster")

    @property
    def ctld_socket(self) -> str:
        """Unix socket for local clients; default ``<StateSaveLocation>/musterctld.sock``."""
        return self.settings.get("CtldSocket", os.path.join(self.state_save_location, "musterctld.sock"))

    def ctld_socket_for(self, index: int) -> str:
        """The Unix socket of the controller at ``SlurmctldHost`` number ``index`` (0: the
        primary's ``ctld_socket``; a backup's gets ``.N`` added, so that controllers of one
        host, as ``muster up --backup-controllers`` runs them, do not share one)."""
        return instance_path(self.ctld_socket, index)

    @property
    def ctld_addrs(self) -> list[tuple[str, str]]:
        """(host, address) of every ``SlurmctldHost``, the primary first."""
        out = []
        for entry in self.ctld_hosts:
            m = re.compile(HOST_ADDR_RE).match(entry)
            assert m is not None  # checked while parsing
            out.append((m.group(1), m.group(2) or m.group(1)))
        return out or [self._ctld_host_addr()]

    @property
    def slurmctld_timeout(self) -> int:
        """``SlurmctldTimeout``: how long a backup waits for a silent active controller."""
        return self.get_int("SlurmctldTimeout", 120)

    @property
    def auth_key_file(self) -> str:
        """Cluster key file; default ``muster.key`` beside the configuration file."""
        return self.settings.get("AuthKeyFile", os.path.join(os.path.dirname(self.path), "muster.key"))

    @property
    def auth_type(self) -> str:
        """``AuthType``: ``auth/muster`` (agent-signed user credentials, the default) or
        ``auth/munge`` (MUNGE credentials accepted too: login nodes without an agent)."""
        return (self.settings.get("AuthType") or "auth/muster").lower()

    @property
    def tls(self) -> TLSSettings:
        """``TLSType`` and ``TLSParameters`` (``core.tlsconf``); checked while parsing."""
        return TLSSettings(self.settings, self.auth_key_file)

    @property
    def agent_socket_dir(self) -> str | None:
        """``AgentSocketDir`` as given; None lets the agent choose."""
        return self.settings.get("AgentSocketDir")

    @property
    def slurm_user(self) -> str:
        return self.settings.get("SlurmUser", "root")

    @property
    def admin_users(self) -> list[str]:
        """``AdminUsers`` as listed (root's rights are the caller's rule, not listed here)."""
        return self.get_list("AdminUsers")

    # -- timers and limits (seconds unless noted) --

    @property
    def slurmd_timeout(self) -> int:
        return self.get_int("SlurmdTimeout", 300)

    @property
    def heartbeat_interval(self) -> float:
        """The agents' beat, in seconds: ``HeartbeatInterval`` (muster's key) when it is a
        positive number, else a fifth of SlurmdTimeout, at least 1 s. The agents beat at it;
        the controller's grace periods count in it (the one reader of the key)."""
        raw = self.get("HeartbeatInterval")
        try:
            value = float(raw) if raw else 0.0
        except ValueError:
            value = 0.0
        return value if value > 0 else max(1.0, self.slurmd_timeout / 5)

    @property
    def message_timeout(self) -> int:
        return self.get_int("MessageTimeout", 10)

    @property
    def tree_width(self) -> int:
        """``TreeWidth``: how many agents one sender contacts itself in a launch (``core.launchtree``)."""
        return max(1, self.get_int("TreeWidth", 50))

    @property
    def kill_wait(self) -> int:
        return self.get_int("KillWait", 30)

    @property
    def min_job_age(self) -> int:
        return self.get_int("MinJobAge", 300)

    @property
    def return_to_service(self) -> int:
        """0: DOWN nodes stay down; 1: back if down for not responding; 2: always back."""
        return self.get_int("ReturnToService", 0)

    @property
    def job_requeue(self) -> bool:
        """Whether batch jobs are requeueable by default (``JobRequeue``, default 1)."""
        return self.get_int("JobRequeue", 1) != 0

    @property
    def first_job_id(self) -> int:
        return self.get_int("FirstJobId", 1)

    @property
    def max_job_count(self) -> int:
        return self.get_int("MaxJobCount", 10000)

    @property
    def max_script_size(self) -> int:
        """Bytes a batch script may have (``SchedulerParameters=max_script_size=N``; 4 MB)."""
        return self._sched_int("max_script_size", 4 * 1024 * 1024, 512 * 1024 * 1024)

    @property
    def max_submit_jobs_per_user(self) -> int:
        """Pending and running jobs one user may have (muster's
        ``SchedulerParameters=max_submit_jobs_per_user=N``); 0: no limit but MaxJobCount."""
        return self._sched_int("max_submit_jobs_per_user", 0, 2**31)

    @property
    def requeue_delay(self) -> int:
        """Seconds a requeued job waits before it is eligible again (``core.requeuedelay``:
        ``SchedulerParameters=requeue_delay``, else ``AuthInfo=cred_expire``, else 120)."""
        try:
            return requeuedelay.requeue_delay(self.get("SchedulerParameters"), self.get("AuthInfo"))
        except ValueError as e:
            raise ConfigError(str(e)) from None

    @property
    def expedited_requeue(self) -> bool:
        """``SlurmctldParameters=enable_expedited_requeue``: a job's ``--requeue=expedite`` counts."""
        return requeuedelay.expedited_requeue_enabled(self.get("SlurmctldParameters"))

    def _sched_int(self, name: str, default: int, most: int) -> int:
        raw = self.scheduler_parameters.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"SchedulerParameters: {name}={raw} is not an integer") from None
        if not 0 <= value <= most:
            raise ConfigError(f"SchedulerParameters: {name}={raw} is out of range (0-{most})")
        return value

    @property
    def max_array_size(self) -> int:
        return self.get_int("MaxArraySize", 1001)

    @property
    def def_mem_per_cpu(self) -> int:
        """MB per CPU when a job asks for no memory; 0 means unset."""
        return self.get_int("DefMemPerCPU", 0)

    # -- scheduling --

    @property
    def scheduler_parameters(self) -> dict[str, str]:
        """``a,b=c`` -> ``{"a": "", "b": "c"}``."""
        return split_params(self.get("SchedulerParameters"))
