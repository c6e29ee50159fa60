"""Job and node states, and pending reasons, with Slurm's names.

``squeue``'s ST column and ``sinfo``'s STATE column use the short forms defined here.
"""

from __future__ import annotations

from enum import StrEnum

from muster.core.statenames import (
    COMPLETING_LONG,
    COMPLETING_SHORT,
    JOB_STATE_CODES,
    JOB_STATE_NAMES,
    job_state_name,
    parse_job_states,
)
from muster.core.statenames import JOB_STATE_SHORT as _SHORT_NAMES

__all__ = [
    "COMPLETING_LONG",
    "COMPLETING_SHORT",
    "HEALTH_DRAIN_PREFIX",
    "JOB_STATE_CODES",
    "JOB_STATE_NAMES",
    "JOB_STATE_SHORT",
    "JobState",
    "NodeState",
    "Reason",
    "job_state_name",
    "parse_job_state",
    "parse_job_states",
]


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    # Shown, never entered (``Job.display_state``): a running job sent SIGSTOP as a whole
    # (``scancel --signal=STOP``), until SIGCONT; its resources and time keep counting.
    STOPPED = "STOPPED"

    @property
    def short(self) -> str:
        return JOB_STATE_SHORT[self]

    @property
    def is_terminal(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED, JobState.STOPPED)


JOB_STATE_SHORT: dict[JobState, str] = {JobState(name): code for name, code in _SHORT_NAMES.items()}
_JOB_STATE_ALIASES = {v: k for k, v in JOB_STATE_SHORT.items()}


def parse_job_state(text: str) -> JobState | str:
    """Accept ``PD``/``pending``/``PENDING``; return ``"COMPLETING"`` for CG; raise on junk."""
    up = text.strip().upper()
    if up in ("CG", COMPLETING_LONG):
        return COMPLETING_LONG
    if up in _JOB_STATE_ALIASES:
        return _JOB_STATE_ALIASES[up]
    try:
        return JobState(up)
    except ValueError:
        raise ValueError(f"Invalid job state specified: {text}") from None


class NodeState(StrEnum):
    """The base state of a node; DRAIN is a flag kept separately (see ``Node``)."""

    UNKNOWN = "UNKNOWN"
    IDLE = "IDLE"
    ALLOCATED = "ALLOCATED"
    MIXED = "MIXED"
    DOWN = "DOWN"
    FUTURE = "FUTURE"


class Reason(StrEnum):
    """Why a pending job is not running (squeue's NODELIST(REASON) column)."""

    NONE = "None"
    PRIORITY = "Priority"
    RESOURCES = "Resources"
    DEPENDENCY = "Dependency"
    DEPENDENCY_NEVER = "DependencyNeverSatisfied"
    JOB_ARRAY_TASK_LIMIT = "JobArrayTaskLimit"  # the array's %N throttle is reached
    BEGIN_TIME = "BeginTime"
    HELD_USER = "JobHeldUser"
    HELD_ADMIN = "JobHeldAdmin"
    PARTITION_DOWN = "PartitionDown"
    PARTITION_INACTIVE = "PartitionInactive"
    PARTITION_TIME_LIMIT = "PartitionTimeLimit"
    PARTITION_NODE_LIMIT = "PartitionNodeLimit"
    REQ_NODE_NOT_AVAIL = "ReqNodeNotAvail"
    NODE_DOWN = "NodeDown"
    # Why an ended job ended (scontrol's Reason=, squeue -t all), as Slurm records it.
    NON_ZERO_EXIT = "NonZeroExitCode"
    RAISED_SIGNAL = "RaisedSignal"
    TIME_LIMIT = "TimeLimit"
    OUT_OF_MEMORY = "OutOfMemory"
    RESERVATION = "Reservation"
    BAD_CONSTRAINTS = "BadConstraints"
    LAUNCH_FAILED = "launch failed requeued held"  # a Prolog failed: held until released
    HOLD_MAX_REQUEUE = "JobHoldMaxRequeue"  # its launch failed on too many nodes: held
    LAUNCH_FAILURE = "JobLaunchFailure"  # ended: its own directories or files were unusable
    HUNG = "Hung"  # its reported progress stopped for --hang-timeout (muster's, not Slurm's)
    DEADLINE = "DeadLine"  # it could no longer end before its --deadline
    PREEMPTED = "Preempted"  # a running job suspended for a preemptor (PreemptMode=SUSPEND,GANG)
    ASSOC_GRP_GRES = "AssocGrpGRES"
    ASSOC_MAX_JOBS = "AssocMaxJobsLimit"
    QOS_MAX_JOBS_PER_USER = "QOSMaxJobsPerUserLimit"
    QOS_MAX_WALL = "QOSMaxWallDurationPerJobLimit"
    # Association and QOS limits (muster.ctld.limits), with Slurm's names.
    ASSOC_GRP_CPU = "AssocGrpCpuLimit"
    ASSOC_GRP_MEM = "AssocGrpMemLimit"
    ASSOC_GRP_NODE = "AssocGrpNodeLimit"
    ASSOC_GRP_BILLING = "AssocGrpBilling"
    ASSOC_GRP_JOBS = "AssocGrpJobsLimit"
    ASSOC_GRP_CPU_MIN = "AssocGrpCPUMinutesLimit"
    ASSOC_GRP_GRES_MIN = "AssocGrpGRESMinutes"
    ASSOC_GRP_MEM_MIN = "AssocGrpMemMinutes"
    ASSOC_GRP_NODE_MIN = "AssocGrpNodeMinutes"
    ASSOC_GRP_BILLING_MIN = "AssocGrpBillingMinutes"
    ASSOC_MAX_WALL = "AssocMaxWallDurationPerJobLimit"
    QOS_GRP_CPU = "QOSGrpCpuLimit"
    QOS_GRP_MEM = "QOSGrpMemLimit"
    QOS_GRP_NODE = "QOSGrpNodeLimit"
    QOS_GRP_GRES = "QOSGrpGRES"
    QOS_GRP_BILLING = "QOSGrpBilling"
    QOS_GRP_JOBS = "QOSGrpJobsLimit"
    QOS_MAX_CPU_PER_USER = "QOSMaxCpuPerUserLimit"
    QOS_MAX_MEM_PER_USER = "QOSMaxMemoryPerUser"
    QOS_MAX_NODE_PER_USER = "QOSMaxNodePerUserLimit"
    QOS_MAX_GRES_PER_USER = "QOSMaxGRESPerUser"
    QOS_MAX_BILLING_PER_USER = "QOSMaxBillingPerUser"
    INVALID_ACCOUNT = "InvalidAccount"
    INVALID_QOS = "InvalidQOS"


# A node drained by its own HealthCheckProgram has a reason that starts so; a later passing
# check returns such a node (and only such) to service.
HEALTH_DRAIN_PREFIX = "HealthCheck: "
