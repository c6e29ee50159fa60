"""slurm.conf's vocabulary: every key muster knows, under Slurm's spelling, the kind of value
each takes, and the shapes of values that more than one reader checks.

``core.config`` parses with it and ``core.conftypes.Config`` reads settings by it. Keys are
case-insensitive: each table maps the lower-case spelling to Slurm's. Pure and cheap: the
patterns are strings that ``re`` compiles (and caches) on first use.
"""

from __future__ import annotations

# --- key tables ----------------------------------------------------------------------
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
GpuFaultFile GpuHealthCheckInterval NodeHostnames
AccountingStorageURL AccountingStoragePassFile
ExpediteHoldTime QuarantineFailures QuarantineWindow
PreflightProgram PreflightGpuDevices PreflightMinFreeMB PreflightMaxClockOffset
PreflightAllReduce PreflightAllReduceTimeout
AdminMail
MetricsType LogFormat
TLSType TLSParameters
MinAgentProtocol
CommandServer
DbdParameters
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
Stragglers StragglerWindow
HangTimeout ExpediteRequeue SpareNodes Preflight PreflightAllReduce
"""


def _table(names: str, **aliases: str) -> dict[str, str]:
    table = {name.lower(): name for name in names.split()}
    table.update(aliases)
    return table


GLOBAL = _table(_GLOBAL_KEYS)
NODE = _table(_NODE_KEYS, feature="Features", procs="CPUs")
PARTITION = _table(_PARTITION_KEYS, shared="OverSubscribe")

# Line kinds Slurm has and muster skips (with a warning) rather than misreading.
UNSUPPORTED_LINES = {
    "downnodes": "DownNodes",
    "frontendname": "FrontendName",
    "nodeset": "NodeSet",
    "switchname": "SwitchName",
}

# Typed global keys are checked while parsing, so the accessors below cannot fail.
INT_KEYS = frozenset(
    """
    SlurmdPort SlurmdTimeout SlurmctldTimeout KillWait MinJobAge ReturnToService JobRequeue
    FirstJobId MaxArraySize DefMemPerCPU DefMemPerGPU DefMemPerNode MaxJobCount MaxJobId
    MaxStepCount MaxTasksPerNode MessageTimeout InactiveLimit WaitTime BatchStartTimeout
    TreeWidth TCPTimeout HealthCheckInterval CompleteWait MaxBatchRequeue GpuHealthCheckInterval
    UnkillableStepTimeout PrologEpilogTimeout SchedulerTimeSlice ResumeTimeout SuspendTimeout
    GetEnvTimeout EioTimeout GroupUpdateTime KeepAliveTime MinAgentProtocol
    QuarantineFailures QuarantineWindow PreflightMinFreeMB PreflightMaxClockOffset
    PreflightAllReduceTimeout
    PriorityWeightAge PriorityWeightAssoc PriorityWeightFairshare PriorityWeightJobSize
    PriorityWeightPartition PriorityWeightQOS
    """.split()
)
TIME_KEYS = frozenset(
    {"PriorityMaxAge", "PriorityDecayHalfLife", "PriorityCalcPeriod", "PreemptExemptTime", "ExpediteHoldTime"}
)

PREEMPT_TYPES = frozenset({"preempt/none", "preempt/qos", "preempt/partition_prio"})
PREEMPT_MODES = ("OFF", "CANCEL", "REQUEUE", "SUSPEND")


def preempt_mode(text: str) -> str:
    """A PreemptMode value as muster applies it: OFF, CANCEL, REQUEUE or SUSPEND (GANG is a
    flag beside them: ``preempt_gang``; muster does not time-slice). ValueError says what
    is refused. Whether SUSPEND has the GANG it needs is the caller's check (a partition's
    SUSPEND relies on the cluster's GANG: ``core.config``)."""
    modes = [m.strip().upper() for m in text.split(",") if m.strip() and m.strip().upper() != "GANG"]
    if not modes:
        return "OFF"
    if len(modes) != 1 or modes[0] not in PREEMPT_MODES:
        raise ValueError(f"bad PreemptMode {text!r}: expected OFF, CANCEL, REQUEUE or SUSPEND,GANG")
    return modes[0]


def preempt_gang(text: str) -> bool:
    """Whether a PreemptMode value carries GANG (``SUSPEND,GANG``)."""
    return any(m.strip().upper() == "GANG" for m in text.split(","))


# Slurm's words (read_config.c) when the cluster's PreemptMode has SUSPEND without GANG
SUSPEND_NEEDS_GANG = "PreemptMode=SUSPEND requires GANG too"


BOOL_KEYS = frozenset({"PriorityFavorSmall", "PreflightAllReduce"})
# Keys that take one of a few words (case-insensitive): MetricsType is Slurm 25.11's,
# LogFormat muster's own (docs/metrics.md).
CHOICE_KEYS = {
    "MetricsType": ("metrics/openmetrics", "metrics/none"),
    "LogFormat": ("text", "json"),
    "AuthType": ("auth/muster", "auth/munge"),
}

TRUE = frozenset({"yes", "true", "1", "on"})
FALSE = frozenset({"no", "false", "0", "off"})
UNLIMITED = frozenset({"unlimited", "infinite"})

NODE_STATES = frozenset({"UNKNOWN", "IDLE", "DOWN", "DRAIN", "FAIL", "FAILING", "FUTURE", "CLOUD"})
PARTITION_STATES = frozenset({"UP", "DOWN", "DRAIN", "INACTIVE"})
# Patterns are kept as strings and compiled on first use (re caches compiled patterns):
# compiling them at import would cost each CLI start-up a few milliseconds.
OVERSUBSCRIBE_RE = r"^(EXCLUSIVE|NO|YES|FORCE)(?::(\d+))?$"

KEY_RE = r"([A-Za-z0-9_.]+)[ \t]*=[ \t]*"
WORD_RE = r"\S*"
HOST_ADDR_RE = r"^([^()\s]+)(?:\(([^()\s]+)\))?$"
PORT_RANGE_RE = r"^(\d+)(?:-(\d+))?$"


def split_list(value: str) -> list[str]:
    """A comma-separated value's items, blanks dropped."""
    return [item.strip() for item in value.split(",") if item.strip()]


def split_params(value: str | None) -> dict[str, str]:
    """A comma-separated parameter list (``SchedulerParameters``, ``AuthInfo``...) by key:
    ``a,b=c`` -> ``{"a": "", "b": "c"}``, keys and values stripped, blanks dropped."""
    out: dict[str, str] = {}
    for item in split_list(value or ""):
        key, _, val = item.partition("=")
        if key.strip():
            out[key.strip()] = val.strip()
    return out
