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
"""

from __future__ import annotations

import os
import re

from muster.core.conftext import strip_comment
from muster.core.errors import MusterError
from muster.core.hostlist import HostlistError, expand
from muster.core.timefmt import TimeFormatError, parse_time_limit

__all__ = ["Config", "ConfigError", "NodeConf", "PartitionConf", "parse_config"]


class ConfigError(MusterError, ValueError):
    """The configuration text is malformed; the message starts with ``path:line:``."""


# --- key tables --------------------------------------------------------------------------
# Canonical spellings; lookups go through lower case. Global keys are Slurm 22.05's
# slurm.conf keys (including a few older spellings) plus muster's own.

_GLOBAL_KEYS = """
AccountingStorageBackupHost AccountingStorageEnforce AccountingStorageExternalHost
AccountingStorageHost AccountingStorageLoc AccountingStorageParameters AccountingStoragePass
AccountingStoragePort AccountingStorageTRES AccountingStorageType AccountingStorageUser
AccountingStoreFlags AccountingStoreJobComment AcctGatherEnergyType AcctGatherFilesystemType
AcctGatherInterconnectType AcctGatherNodeFreq AcctGatherProfileType AllowSpecResourcesUsage
AuthAltParameters AuthAltTypes AuthInfo AuthType BackupAddr BackupController
BatchStartTimeout BcastExclude BcastParameters BurstBufferType CheckpointType
CliFilterPlugins ClusterName CommunicationParameters CompleteWait ControlAddr ControlMachine
CoreSpecPlugin CpuFreqDef CpuFreqGovernors CredType CryptoType DebugFlags DefCpuPerGPU DefMemPerCPU
DefMemPerGPU DefMemPerNode DependencyParameters DisableRootJobs EioTimeout EnforcePartLimits
Epilog EpilogMsgTime EpilogSlurmctld ExtSensorsFreq ExtSensorsType FairShareDampeningFactor
FastSchedule FederationParameters FirstJobId GetEnvTimeout GpuFreqDef GresTypes
GroupUpdateForce GroupUpdateTime HashPlugin HealthCheckInterval HealthCheckNodeState
HealthCheckProgram InactiveLimit InteractiveStepOptions JobAcctGatherFrequency
JobAcctGatherParams JobAcctGatherType JobCheckpointDir JobCompHost JobCompLoc JobCompParams
JobCompPass JobCompPort JobCompType JobCompUser JobContainerType JobCredentialPrivateKey
JobCredentialPublicCertificate JobDefaults JobFileAppend JobRequeue JobSubmitPlugins
KeepAliveTime KillOnBadExit KillWait LaunchParameters LaunchType Licenses LogTimeFormat
MailDomain MailProg MaxArraySize MaxBatchRequeue MaxDBDMsgs MaxJobCount MaxJobId
MaxMemPerCPU MaxMemPerNode MaxNodeCount MaxStepCount MaxTasksPerNode MCSParameters MCSPlugin
MemLimitEnforce MessageTimeout MinJobAge MpiDefault MpiParams NodeFeaturesPlugins
OverTimeLimit PluginDir PlugStackConfig PowerParameters PowerPlugin PreemptExemptTime
PreemptMode PreemptParameters PreemptType PrEpParameters PrEpPlugins PriorityCalcPeriod
PriorityDecayHalfLife PriorityFavorSmall PriorityFlags PriorityMaxAge PriorityParameters
PrioritySiteFactorParameters PrioritySiteFactorPlugin PriorityType PriorityUsageResetPeriod
PriorityWeightAge PriorityWeightAssoc PriorityWeightFairshare PriorityWeightJobSize
PriorityWeightPartition PriorityWeightQOS PriorityWeightTRES PrivateData ProctrackType Prolog
PrologEpilogTimeout PrologFlags PrologSlurmctld PropagatePrioProcess PropagateResourceLimits
PropagateResourceLimitsExcept RebootProgram ReconfigFlags RequeueExit RequeueExitHold
ResumeFailProgram ResumeProgram ResumeRate ResumeTimeout ResvEpilog ResvOverRun ResvProlog
ReturnToService RoutePlugin SallocDefaultCommand SbcastParameters SchedulerParameters
SchedulerTimeSlice SchedulerType ScronParameters SelectType SelectTypeParameters
SlurmctldAddr SlurmctldDebug SlurmctldHost SlurmctldLogFile SlurmctldParameters
SlurmctldPidFile SlurmctldPlugstack SlurmctldPort SlurmctldPrimaryOffProg
SlurmctldPrimaryOnProg SlurmctldSyslogDebug SlurmctldTimeout SlurmdDebug SlurmdLogFile
SlurmdParameters SlurmdPidFile SlurmdPort SlurmdSpoolDir SlurmdSyslogDebug SlurmdTimeout
SlurmdUser SlurmSchedLogFile SlurmSchedLogLevel SlurmUser SrunEpilog SrunPortRange SrunProlog
StateSaveLocation SuspendExcNodes SuspendExcParts SuspendExcStates SuspendProgram SuspendRate
SuspendTime SuspendTimeout SwitchParameters SwitchType TaskEpilog TaskPlugin TaskPluginParam
TaskProlog TCPTimeout TmpFS TopologyParam TopologyPlugin TrackWCKey TreeWidth
UnkillableStepProgram UnkillableStepTimeout UsePam VSizeFactor WaitTime X11Parameters
DefaultStorageHost DefaultStorageLoc DefaultStoragePass DefaultStoragePort DefaultStorageType
DefaultStorageUser
AdminUsers AgentSocketDir AuthKeyFile CtldSocket HeartbeatInterval SchedulerInterval
GpuFaultFile GpuHealthCheckInterval
AccountingStorageURL
"""

_NODE_KEYS = """
NodeName NodeHostname NodeAddr BcastAddr Boards Comment CoreSpecCount CoresPerSocket CpuBind
CPUs CpuSpecList Extra Features Gres MemSpecLimit Port RealMemory Reason Sockets
SocketsPerBoard State ThreadsPerCore TmpDisk Weight
"""

_PARTITION_KEYS = """
PartitionName AllocNodes AllowAccounts AllowGroups AllowQos Alternate CpuBind Default
DefaultTime DefCpuPerGPU DefMemPerCPU DefMemPerGPU DefMemPerNode DenyAccounts DenyQos
DisableRootJobs ExclusiveUser GraceTime Hidden LLN MaxCPUsPerNode MaxCPUsPerSocket
MaxMemPerCPU MaxMemPerNode MaxNodes MaxTime MinNodes Nodes OverSubscribe OverTimeLimit
PowerDownOnIdle PreemptMode Priority PriorityJobFactor PriorityTier QOS ReqResv
ResumeTimeout RootOnly SelectTypeParameters State SuspendTime SuspendTimeout
TRESBillingWeights
HangTimeout
"""


def _table(names: str, **aliases: str) -> dict[str, str]:
    table = {name.lower(): name for name in names.split()}
    table.update(aliases)
    return table


_GLOBAL = _table(_GLOBAL_KEYS)
_NODE = _table(_NODE_KEYS, feature="Features", procs="CPUs")
_PARTITION = _table(_PARTITION_KEYS, shared="OverSubscribe")

# Line kinds Slurm has and muster skips (with a warning) rather than misreading.
_UNSUPPORTED_LINES = {
    "downnodes": "DownNodes",
    "frontendname": "FrontendName",
    "nodeset": "NodeSet",
    "switchname": "SwitchName",
}

# Typed global keys are checked while parsing, so the accessors below cannot fail.
_INT_KEYS = frozenset(
    """
    SlurmdPort SlurmdTimeout SlurmctldTimeout KillWait MinJobAge ReturnToService JobRequeue
    FirstJobId MaxArraySize DefMemPerCPU DefMemPerGPU DefMemPerNode MaxJobCount MaxJobId
    MaxStepCount MaxTasksPerNode MessageTimeout InactiveLimit WaitTime BatchStartTimeout
    TreeWidth TCPTimeout HealthCheckInterval CompleteWait MaxBatchRequeue GpuHealthCheckInterval
    UnkillableStepTimeout PrologEpilogTimeout SchedulerTimeSlice ResumeTimeout SuspendTimeout
    GetEnvTimeout EioTimeout GroupUpdateTime KeepAliveTime
    PriorityWeightAge PriorityWeightAssoc PriorityWeightFairshare PriorityWeightJobSize
    PriorityWeightPartition PriorityWeightQOS
    """.split()
)
_TIME_KEYS = frozenset({"PriorityMaxAge", "PriorityDecayHalfLife", "PriorityCalcPeriod"})
_BOOL_KEYS = frozenset({"PriorityFavorSmall"})

_TRUE = frozenset({"yes", "true", "1", "on"})
_FALSE = frozenset({"no", "false", "0", "off"})
_UNLIMITED = frozenset({"unlimited", "infinite"})

_NODE_STATES = frozenset({"UNKNOWN", "IDLE", "DOWN", "DRAIN", "FAIL", "FAILING", "FUTURE", "CLOUD"})
_PARTITION_STATES = frozenset({"UP", "DOWN", "DRAIN", "INACTIVE"})
# Patterns are kept as strings and compiled on first use (re caches compiled patterns):
# compiling them at import would cost each CLI start-up a few milliseconds.
_OVERSUBSCRIBE_RE = r"^(EXCLUSIVE|NO|YES|FORCE)(?::(\d+))?$"

_KEY_RE = r"([A-Za-z0-9_.]+)[ \t]*=[ \t]*"
_WORD_RE = r"\S*"
_HOST_ADDR_RE = r"^([^()\s]+)(?:\(([^()\s]+)\))?$"
_PORT_RANGE_RE = r"^(\d+)(?:-(\d+))?$"
_GRES_COUNT_RE = r"(?i)^(\d+)([KMGT]?)$"
# A GRES type: letters, digits, "_", "." or "-", not starting with a sign and not a number
# ("a100", "1g.5gb" for MIG slices; "-2" or "1.5" is a bad count, not a type).
_GRES_TYPE_RE = r"^(?![0-9.]+$)[A-Za-z0-9][A-Za-z0-9_.\-]*$"
_GRES_NAME_RE = r"^[A-Za-z0-9_]+$"
_GRES_FACTORS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}

_DAY = 86400


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

    def default_partition(self) -> PartitionConf | None:
        """The first partition marked ``Default=YES``, else the first one, else None."""
        for part in self.partitions:
            if part.default:
                return part
        return self.partitions[0] if self.partitions else None

    # -- generic typed reads (for keys without a property) --

    def get(self, key: str, default: str | None = None) -> str | None:
        """Raw value of ``key`` (any capitalisation), or ``default``."""
        return self.settings.get(_GLOBAL.get(key.lower(), key), default)

    def get_int(self, key: str, default: int) -> int:
        """``key`` as an integer; ``default`` when unset. Raises ConfigError if not one."""
        raw = self.get(key)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{self.path}: {key}={raw!r} is not an integer") from None

    def get_bool(self, key: str, default: bool) -> bool:
        """``key`` as YES/NO (also true/false, 1/0); ``default`` when unset."""
        raw = self.get(key)
        if raw is None:
            return default
        lowered = raw.lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise ConfigError(f"{self.path}: {key}={raw!r} is not YES or NO")

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
        return _split_list(self.get(key) or "")

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
            m = re.compile(_HOST_ADDR_RE).match(self.ctld_hosts[0])
            assert m is not None  # checked while parsing
            return m.group(1), m.group(2) or m.group(1)
        machine = self.settings.get("ControlMachine")
        if machine:
            return machine, self.settings.get("ControlAddr", machine)
        return "localhost", "127.0.0.1"

    @property
    def ctld_port(self) -> int:
        """First port of ``SlurmctldPort`` (Slurm allows a range); default 6817."""
        m = re.compile(_PORT_RANGE_RE).match(self.settings.get("SlurmctldPort", "6817"))
        assert m is not None  # checked while parsing
        return int(m.group(1))

    @property
    def slurmd_port(self) -> int:
        return self.get_int("SlurmdPort", 6818)

    @property
    def state_save_location(self) -> str:
        return self.settings.get("StateSaveLocation", "/var/spool/muster")

    @property
    def ctld_socket(self) -> str:
        """Unix socket for local clients; default ``<StateSaveLocation>/musterctld.sock``."""
        return self.settings.get(
            "CtldSocket", os.path.join(self.state_save_location, "musterctld.sock")
        )

    @property
    def auth_key_file(self) -> str:
        """Cluster key file; default ``muster.key`` beside the configuration file."""
        return self.settings.get(
            "AuthKeyFile", os.path.join(os.path.dirname(self.path), "muster.key")
        )

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
    def slurmctld_timeout(self) -> int:
        return self.get_int("SlurmctldTimeout", 120)

    @property
    def message_timeout(self) -> int:
        return self.get_int("MessageTimeout", 10)

    @property
    def kill_wait(self) -> int:
        return self.get_int("KillWait", 30)

    @property
    def min_job_age(self) -> int:
        return self.get_int("MinJobAge", 300)

    @property
    def inactive_limit(self) -> int:
        return self.get_int("InactiveLimit", 0)

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

    @property
    def gres_types(self) -> list[str]:
        return self.get_list("GresTypes")

    # -- scheduling and priority --

    @property
    def scheduler_type(self) -> str:
        return self.settings.get("SchedulerType", "sched/backfill")

    @property
    def scheduler_parameters(self) -> dict[str, str]:
        """``a,b=c`` -> ``{"a": "", "b": "c"}``."""
        params: dict[str, str] = {}
        for item in self.get_list("SchedulerParameters"):
            key, _, value = item.partition("=")
            params[key.strip()] = value.strip()
        return params

    @property
    def select_type(self) -> str:
        return self.settings.get("SelectType", "select/cons_tres")

    @property
    def select_type_parameters(self) -> list[str]:
        return self.get_list("SelectTypeParameters")

    @property
    def priority_type(self) -> str:
        return self.settings.get("PriorityType", "priority/basic")

    @property
    def priority_weight_age(self) -> int:
        return self.get_int("PriorityWeightAge", 0)

    @property
    def priority_weight_fairshare(self) -> int:
        return self.get_int("PriorityWeightFairshare", 0)

    @property
    def priority_weight_job_size(self) -> int:
        return self.get_int("PriorityWeightJobSize", 0)

    @property
    def priority_weight_partition(self) -> int:
        return self.get_int("PriorityWeightPartition", 0)

    @property
    def priority_weight_qos(self) -> int:
        return self.get_int("PriorityWeightQOS", 0)

    @property
    def priority_max_age(self) -> int | None:
        """Age at which the age factor saturates; default 7 days."""
        return self.get_seconds("PriorityMaxAge", 7 * _DAY)

    @property
    def priority_decay_half_life(self) -> int | None:
        """Half-life of past usage in fair-share; default 7 days, 0 disables decay."""
        return self.get_seconds("PriorityDecayHalfLife", 7 * _DAY)

    @property
    def priority_favor_small(self) -> bool:
        return self.get_bool("PriorityFavorSmall", False)


# --- parsing --------------------------------------------------------------------------------


def parse_config(text: str, path: str = "<config>") -> Config:
    """Parse slurm.conf-syntax ``text``; ``path`` names it in messages and places defaults.

    Raises ``ConfigError`` (``<path>:<line>: ...``) on the first malformed line.
    """
    parser = _Parser(path)
    for lineno, line in _logical_lines(text):
        parser.line(lineno, line)
    return parser.finish()


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
        m = re.compile(_KEY_RE).match(line, pos)
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
            word_match = re.compile(_WORD_RE).match(line, pos)
            assert word_match is not None  # \S* always matches
            value = word_match.group()
            # "A= B=1" would otherwise read as A="B=1": a blank after '=' then a pair
            # means A's value is missing, which is the likelier mistake.
            if not value or (line[pos - 1].isspace() and re.compile(_KEY_RE).match(value)):
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
        elif first in _UNSUPPORTED_LINES:
            self.warn(lineno, f"{_UNSUPPORTED_LINES[first]} lines are not supported; ignored")
        else:
            for key, value in pairs:
                self.global_setting(lineno, key, value)

    # -- global settings --

    def global_setting(self, lineno: int, key: str, value: str) -> None:
        canon = _GLOBAL.get(key.lower())
        if canon is None:
            self.warn(lineno, f"unknown key {key!r} ignored")
            return
        where = self.where(lineno)
        if canon in _INT_KEYS:
            _int(value, canon, where)
        elif canon in _TIME_KEYS:
            _time(value, canon, where)
        elif canon in _BOOL_KEYS:
            _bool(value, canon, where)
        elif canon == "SlurmctldPort":
            m = re.compile(_PORT_RANGE_RE).match(value)
            if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
                raise ConfigError(
                    f"{where}: bad SlurmctldPort {value!r}: expected PORT or PORT-PORT"
                )
        elif canon == "SlurmctldHost":
            if re.compile(_HOST_ADDR_RE).match(value) is None:
                raise ConfigError(
                    f"{where}: bad SlurmctldHost {value!r}: expected HOST or HOST(ADDR)"
                )
            # Later lines name backup controllers; the first is the primary.
            self.ctld_hosts.append(value)
            self.settings.setdefault(canon, value)
            return
        self.settings[canon] = value

    # -- nodes --

    def node_line(self, lineno: int, pairs: list[tuple[str, str]]) -> None:
        where = self.where(lineno)
        names_expr = pairs[0][1]
        params = self.keyed(lineno, pairs[1:], _NODE, "node")
        if names_expr.upper() == "DEFAULT":
            self.node_defaults.update(params)
            return
        params = {**self.node_defaults, **params}
        names = _hostlist(names_expr, "NodeName", where)
        addrs = _per_node(params.get("NodeAddr"), names, "NodeAddr", where)
        hostnames = _per_node(params.get("NodeHostname"), names, "NodeHostname", where)
        ports = _per_node(params.get("Port"), names, "Port", where)

        boards = _int(params.get("Boards", "1"), "Boards", where, minimum=1)
        sockets = _int(
            params.get("Sockets", params.get("SocketsPerBoard", "1")), "Sockets", where, minimum=1
        )
        if "Sockets" not in params:
            sockets *= boards  # SocketsPerBoard counts per board; Sockets counts per node
        cores = _int(params.get("CoresPerSocket", "1"), "CoresPerSocket", where, minimum=1)
        threads = _int(params.get("ThreadsPerCore", "1"), "ThreadsPerCore", where, minimum=1)
        # Without CPUs, Slurm counts the hardware threads the topology describes.
        cpus = _int(params.get("CPUs", str(sockets * cores * threads)), "CPUs", where, minimum=1)
        gpus, gpu_type, gpu_types, gres_counts = _parse_gres(params.get("Gres", ""), where)
        state = params.get("State", "UNKNOWN").upper()
        if any(part not in _NODE_STATES for part in state.split("+")):
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
        features = _split_list(params.get("Features", ""))
        port_numbers = [_int(p, "Port", where, minimum=1, maximum=65535) for p in ports or ()]
        for i, name in enumerate(names):
            if name in self.node_lines:
                raise ConfigError(
                    f"{where}: duplicate node {name!r} (first defined at line {self.node_lines[name]})"
                )
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
        params = self.keyed(lineno, pairs[1:], _PARTITION, "partition")
        if name.upper() == "DEFAULT":
            self.part_defaults.update(params)
            return
        for other in self.partitions:
            if other.name == name:
                raise ConfigError(
                    f"{where}: duplicate partition {name!r} (first defined at line {other.lineno})"
                )
        params = {**self.part_defaults, **params}
        # nodes stays empty until finish(): nodes may be defined after partitions.
        part = PartitionConf(name)
        part.nodes_expr = params.get("Nodes", "")
        part.default = _bool(params.get("Default", "NO"), "Default", where)
        part.max_time = _time(params.get("MaxTime", "UNLIMITED"), "MaxTime", where)
        default_time = params.get("DefaultTime", "NONE")
        part.default_time = (
            None if default_time.upper() == "NONE" else _time(default_time, "DefaultTime", where)
        )
        part.max_nodes = _int_or_unlimited(params.get("MaxNodes", "UNLIMITED"), "MaxNodes", where)
        part.min_nodes = _int(params.get("MinNodes", "0"), "MinNodes", where)
        part.state = params.get("State", "UP").upper()
        if part.state not in _PARTITION_STATES:
            raise ConfigError(
                f"{where}: bad partition State {params['State']!r}: expected UP, DOWN, DRAIN or INACTIVE"
            )
        # The old single Priority= sets both the tier and the job factor.
        legacy = params.get("Priority", "1")
        part.priority_tier = _int(params.get("PriorityTier", legacy), "PriorityTier", where)
        part.priority_job_factor = _int(
            params.get("PriorityJobFactor", legacy), "PriorityJobFactor", where
        )
        part.allow_accounts = _access_list(params.get("AllowAccounts"))
        part.allow_groups = _access_list(params.get("AllowGroups"))
        part.allow_qos = _access_list(params.get("AllowQos"))
        part.deny_accounts = _access_list(params.get("DenyAccounts"))
        part.deny_qos = _access_list(params.get("DenyQos"))
        oversubscribe = params.get("OverSubscribe", "NO").upper()
        if re.compile(_OVERSUBSCRIBE_RE).match(oversubscribe) is None:
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
        part.max_mem_per_node = _int_or_unlimited(
            params.get("MaxMemPerNode", "UNLIMITED"), "MaxMemPerNode", where
        )
        if "HangTimeout" in params:  # muster's: a training job's default --hang-timeout
            _time(params["HangTimeout"], "HangTimeout", where)
        part.params = params
        part.lineno = lineno
        self.partitions.append(part)

    # -- shared --

    def keyed(
        self, lineno: int, pairs: list[tuple[str, str]], table: dict[str, str], kind: str
    ) -> dict[str, str]:
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
                    raise ConfigError(
                        f"{where}: partition {part.name!r} names unknown node {name!r}"
                    )
                wanted.add(name)
            part.nodes = sorted(wanted, key=order.__getitem__)
        if defaults > 1:
            first = next(p for p in self.partitions if p.default)
            self.warnings.append(
                f"{self.path}: several partitions have Default=YES; {first.name!r} is the default"
            )
        gres_types = set(_split_list(self.settings.get("GresTypes", "")))
        if gres_types:
            reported: set[tuple[int, str]] = set()  # one warning per line, not per node
            for node in self.nodes:
                names = set(node.gres_counts) | ({"gpu"} if node.gpus else set())
                for missing in sorted(names - gres_types):
                    if (node.lineno, missing) not in reported:
                        reported.add((node.lineno, missing))
                        self.warn(node.lineno, f"gres {missing!r} is not listed in GresTypes")
        return Config(
            self.path, self.settings, self.nodes, self.partitions, self.warnings, self.ctld_hosts
        )


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
    return None if value.lower() in _UNLIMITED else _int(value, key, where)


def _bool(value: str, key: str, where: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{where}: bad {key} {value!r}: expected YES or NO")


def _time(value: str, key: str, where: str) -> int | None:
    try:
        return parse_time_limit(value)
    except TimeFormatError:
        raise ConfigError(
            f"{where}: bad {key} {value!r}: expected minutes, [days-]hours:minutes:seconds "
            "or INFINITE"
        ) from None


def _split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _access_list(value: str | None) -> list[str] | None:
    if value is None or value.upper() == "ALL":
        return None
    return _split_list(value)


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
        raise ConfigError(
            f"{where}: {key} {value!r} gives {len(values)} values for {len(names)} nodes"
        )
    return values


def _parse_gres(text: str, where: str) -> tuple[int, str | None, dict[str, int], dict[str, int]]:
    """``gpu:a100:8,gpu:h100:2,nic:1`` -> (10, 'a100', {'a100': 8, 'h100': 2}, {'nic': 1})."""
    gpus = 0
    gpu_type: str | None = None
    gpu_types: dict[str, int] = {}
    others: dict[str, int] = {}
    seen_gpu = False
    for entry in _split_list(text):
        spec = entry.split("(", 1)[0]  # drop socket binding such as "(S:0-1)"
        fields = [f for f in spec.split(":") if f.lower() != "no_consume"]
        name = fields[0] if fields else ""
        if not re.compile(_GRES_NAME_RE).match(name) or len(fields) > 3:
            raise ConfigError(f"{where}: bad Gres {entry!r}: expected NAME[:TYPE][:COUNT]")
        count_match = re.compile(_GRES_COUNT_RE).match(fields[-1]) if len(fields) > 1 else None
        if count_match is not None:
            count = int(count_match.group(1)) * _GRES_FACTORS[count_match.group(2).upper()]
            type_fields = fields[1:-1]
        else:
            if len(fields) == 3:
                raise ConfigError(f"{where}: bad Gres count in {entry!r}")
            count = 1
            type_fields = fields[1:]
        gres_type = type_fields[0] if type_fields else None
        if gres_type is not None and not re.compile(_GRES_TYPE_RE).match(gres_type):
            # "gpu:-2", "gpu:1.5": a count that is not one, not a type name
            raise ConfigError(f"{where}: bad Gres count in {entry!r}")
        if name != "gpu":
            others[name] = others.get(name, 0) + count
            continue
        gpus += count
        if not seen_gpu:
            gpu_type, seen_gpu = gres_type, True
        if gres_type is not None:
            gpu_types[gres_type] = gpu_types.get(gres_type, 0) + count
    return gpus, gpu_type, gpu_types, others
