"""``scontrol show config``: every parameter, in Slurm 22.05's order and words.

Each line is the value the configuration file sets or, where it sets none, the default
Slurm documents, with Slurm's unit (``MinJobAge = 300 sec``). Keys Slurm computes at run
time are filled from what the controller answers (``BOOT_TIME``, ``SLURM_CONF``,
``SLURM_VERSION``, ``SlurmctldHost[0]``, ``MaxNodeCount``). Keys muster adds
(``CtldSocket``, ``AuthKeyFile``, ...) and Slurm keys this table lacks follow, sorted.
Where muster's behaviour without a key differs from Slurm's documented default, the line
says what muster does: an unset ``ProctrackType`` is ``proctrack/linuxproc`` (processes
tracked by their parentage in ``/proc``; Slurm documents ``proctrack/cgroup``, which muster
uses only when the key says so: docs/containment.md). An unset ``PriorityType`` is
``priority/basic`` (FIFO by submission), as in Slurm 22.05. ``SchedulerParameters`` shows
the requeue delay muster applies (``requeue_delay=120`` where the file names none).
Standard library only: the commands start fast.
"""

from __future__ import annotations

from muster.core import requeuedelay

__all__ = ["PARAMETERS", "config_lines"]

# ``Key|default|unit``, in the order Slurm 22.05 prints them. An empty unit: none.
_TABLE = """\
AccountingStorageBackupHost|(null)|
AccountingStorageEnforce|none|
AccountingStorageHost|localhost|
AccountingStorageExternalHost|(null)|
AccountingStorageParameters|(null)|
AccountingStoragePort|0|
AccountingStorageTRES|cpu,mem,energy,node,billing,fs/disk,vmem,pages|
AccountingStorageType|accounting_storage/none|
AccountingStorageUser|root|
AccountingStoreFlags|(null)|
AcctGatherEnergyType|acct_gather_energy/none|
AcctGatherFilesystemType|acct_gather_filesystem/none|
AcctGatherInterconnectType|acct_gather_interconnect/none|
AcctGatherNodeFreq|0|sec
AcctGatherProfileType|acct_gather_profile/none|
AllowSpecResourcesUsage|No|
AuthAltTypes|(null)|
AuthAltParameters|(null)|
AuthInfo|(null)|
AuthType|auth/muster|
BatchStartTimeout|10|sec
BcastExclude|/lib,/usr/lib,/lib64,/usr/lib64|
BcastParameters|(null)|
BOOT_TIME||
BurstBufferType|(null)|
CliFilterPlugins|(null)|
ClusterName|(null)|
CommunicationParameters|(null)|
CompleteWait|0|sec
CoreSpecPlugin|core_spec/none|
CpuFreqDef|Unknown|
CpuFreqGovernors|OnDemand,Performance,UserSpace|
CredType|cred/munge|
DebugFlags|(null)|
DefMemPerCPU||
DependencyParameters|(null)|
DisableRootJobs|No|
EioTimeout|60|
EnforcePartLimits|NO|
Epilog|(null)|
EpilogMsgTime|2000|usec
EpilogSlurmctld|(null)|
ExtSensorsType|ext_sensors/none|
ExtSensorsFreq|0|sec
FederationParameters|(null)|
FirstJobId|1|
GetEnvTimeout|2|sec
GresTypes|(null)|
GpuFreqDef|high,memory=high|
GroupUpdateForce|1|
GroupUpdateTime|600|sec
HASH_VAL|Match|
HealthCheckInterval|0|sec
HealthCheckNodeState|ANY|
HealthCheckProgram|(null)|
InactiveLimit|0|sec
InteractiveStepOptions|--interactive --preserve-env --pty $SHELL|
JobAcctGatherFrequency|30|
JobAcctGatherType|jobacct_gather/none|
JobAcctGatherParams|(null)|
JobCompHost|localhost|
JobCompLoc|/var/log/slurm_jobcomp.log|
JobCompPort|0|
JobCompType|jobcomp/none|
JobCompUser|root|
JobContainerType|job_container/none|
JobCredentialPrivateKey|(null)|
JobCredentialPublicCertificate|(null)|
JobDefaults|(null)|
JobFileAppend|0|
JobRequeue|1|
JobSubmitPlugins|(null)|
KillOnBadExit|0|
KillWait|30|sec
LaunchParameters|(null)|
LaunchType|launch/slurm|
Licenses|(null)|
LogTimeFormat|iso8601_ms|
MailDomain|(null)|
MailProg|/bin/mail|
MaxArraySize|1001|
MaxDBDMsgs|20000|
MaxJobCount|10000|
MaxJobId|67043328|
MaxMemPerNode|UNLIMITED|
MaxNodeCount||
MaxStepCount|40000|
MaxTasksPerNode|512|
MCSPlugin|mcs/none|
MCSParameters|(null)|
MessageTimeout|10|sec
MinJobAge|300|sec
MpiDefault|none|
MpiParams|(null)|
MULTIPLE_SLURMD|Yes|
NEXT_JOB_ID||
NodeFeaturesPlugins|(null)|
OverTimeLimit|0|min
PluginDir|(null)|
PlugStackConfig|(null)|
PowerParameters|(null)|
PowerPlugin||
PreemptMode|OFF|
PreemptType|preempt/none|
PreemptExemptTime|00:00:00|
PrEpParameters|(null)|
PrEpPlugins|prep/script|
PriorityParameters|(null)|
PrioritySiteFactorParameters|(null)|
PrioritySiteFactorPlugin|(null)|
PriorityType|priority/basic|
PrivateData|none|
ProctrackType|proctrack/linuxproc|
Prolog|(null)|
PrologEpilogTimeout|65534|
PrologSlurmctld|(null)|
PrologFlags|(null)|
PropagatePrioProcess|0|
PropagateResourceLimits|ALL|
PropagateResourceLimitsExcept|(null)|
RebootProgram|(null)|
ReconfigFlags|(null)|
RequeueExit|(null)|
RequeueExitHold|(null)|
ResumeFailProgram|(null)|
ResumeProgram|(null)|
ResumeRate|300|nodes/min
ResumeTimeout|60|sec
ResvEpilog|(null)|
ResvOverRun|0|min
ResvProlog|(null)|
ReturnToService|0|
RoutePlugin|route/default|
SchedulerParameters|(null)|
SchedulerTimeSlice|30|sec
SchedulerType|sched/backfill|
ScronParameters|(null)|
SelectType|select/cons_tres|
SelectTypeParameters|(null)|
SlurmUser|root(0)|
SlurmctldAddr|(null)|
SlurmctldDebug|info|
SlurmctldHost[0]||
SlurmctldLogFile|(null)|
SlurmctldPort|6817|
SlurmctldSyslogDebug|(null)|
SlurmctldPrimaryOffProg|(null)|
SlurmctldPrimaryOnProg|(null)|
SlurmctldTimeout|120|sec
SlurmctldParameters|(null)|
SlurmdDebug|info|
SlurmdLogFile|(null)|
SlurmdParameters|(null)|
SlurmdPidFile|/var/run/slurmd.pid|
SlurmdPort|6818|
SlurmdSpoolDir|/var/spool/slurmd|
SlurmdSyslogDebug|(null)|
SlurmdTimeout|300|sec
SlurmdUser|root(0)|
SlurmSchedLogFile|(null)|
SlurmSchedLogLevel|0|
SlurmctldPidFile|/var/run/slurmctld.pid|
SlurmctldPlugstack|(null)|
SLURM_CONF||
SLURM_VERSION||
SrunEpilog|(null)|
SrunPortRange|0-0|
SrunProlog|(null)|
StateSaveLocation|/var/spool/slurmctld|
SuspendExcNodes|(null)|
SuspendExcParts|(null)|
SuspendProgram|(null)|
SuspendRate|60|nodes/min
SuspendTime|INFINITE|
SuspendTimeout|30|sec
SwitchParameters|(null)|
SwitchType|switch/none|
TaskEpilog|(null)|
TaskPlugin|task/none|
TaskPluginParam|(null type)|
TaskProlog|(null)|
TCPTimeout|2|sec
TmpFS|/tmp|
TopologyParam|(null)|
TopologyPlugin|topology/none|
TrackWCKey|No|
TreeWidth|50|
UsePam|No|
UnkillableStepProgram|(null)|
UnkillableStepTimeout|60|sec
VSizeFactor|0|percent
WaitTime|0|sec
X11Parameters|(null)|
"""

PARAMETERS: list[tuple[str, str, str]] = [
    (key, default, unit) for key, default, unit in (line.split("|") for line in _TABLE.splitlines())
]
_KNOWN = {key.lower() for key, _d, _u in PARAMETERS}
# Keys whose file spelling differs from the line Slurm prints.
_FILE_KEY = {"slurmctldhost[0]": "slurmctldhost"}


def _with_unit(value: str, unit: str) -> str:
    return f"{value} {unit}" if unit and value.lstrip("-").isdigit() else value


def _scheduler_parameters(raw: str | None, auth_info: str | None) -> str:
    """The file's value with the requeue delay muster applies added where it names none
    (``core.requeuedelay``: Slurm 22.05 has no ``requeue_delay``; its delay is 120 s)."""
    if requeuedelay.stated(raw):
        return raw or "(null)"
    try:
        delay = requeuedelay.requeue_delay(raw, auth_info)
    except ValueError:
        return raw or "(null)"
    return ",".join(x for x in (raw, f"requeue_delay={delay}") if x)


def _preempt_mode(raw: str) -> str:
    """PreemptMode as Slurm prints it: upper case, GANG first (``GANG,SUSPEND``)."""
    words = [w.strip().upper() for w in raw.split(",") if w.strip()]
    return ",".join(sorted(words, key=lambda w: w != "GANG")) or raw


def config_lines(settings: dict[str, str], computed: dict[str, str]) -> list[str]:
    """``Key = value`` lines: ``settings`` from the file (any capitalisation), ``computed``
    the run-time values by Slurm's key (``BOOT_TIME``, ``SLURM_CONF``, ...)."""
    given = {k.lower(): str(v) for k, v in settings.items()}
    lines = []
    for key, default, unit in PARAMETERS:
        lower = key.lower()
        if key in computed:
            value = computed[key]
        elif lower == "defmempercpu" and lower not in given:
            lines.append(f"{'DefMemPerNode':<23} = UNLIMITED")
            continue
        elif lower == "schedulerparameters":
            value = _scheduler_parameters(given.get(lower), given.get("authinfo"))
        elif lower == "preemptmode" and lower in given:
            value = _preempt_mode(given[lower])
        else:
            value = given.get(_FILE_KEY.get(lower, lower), default)
        lines.append(f"{key:<23} = {_with_unit(value, unit)}")
    extra = sorted((k for k in settings if k.lower() not in _KNOWN and k.lower() != "slurmctldhost"), key=str.lower)
    lines += [f"{k:<23} = {settings[k]}" for k in extra]
    return lines
