"""sacctmgr's vocabulary: its keys (with the aliases Slurm accepts) and how each value reads.

``canonical_key`` gives a key's one spelling (``InvalidRequest`` "Unknown option" for
others); ``parse_value`` reads a value as its key wants (a TRES list, a count, a time, a
factor, an admin level, QOS flags), where ``-1`` clears a limit; ``merge_tres`` applies a
TRES list to the one already set. ``ASSOC_LIMITS`` and ``QOS_FIELDS`` map keys to the
attributes they set (``ctld.acct_objects``).
"""

from __future__ import annotations

from typing import Any

from muster.core.confkeys import preempt_mode
from muster.core.errors import InvalidRequest
from muster.core.timefmt import MAX_TIME_LIMIT, TimeFormatError, parse_time_limit
from muster.ctld.tres import TresError, parse_tres

ADMIN_LEVELS = {"none": "None", "operator": "Operator", "administrator": "Administrator", "admin": "Administrator"}
QOS_FLAGS = {
    f.lower(): f
    for f in (
        "DenyOnLimit",
        "EnforceUsageThreshold",
        "NoReserve",
        "OverPartQOS",
        "PartitionMaxNodes",
        "PartitionMinNodes",
        "PartitionTimeLimit",
        "RequiresReservation",
        "NoDecay",
        "UsageFactorSafe",
    )
}


# --- sacctmgr keys ---------------------------------------------------------------------------
# key (lower case) -> canonical name. Values are parsed by ``parse_value``.

_KEY_ALIASES = {
    "name": "Name",
    "names": "Name",
    "account": "Account",
    "accounts": "Account",
    "acct": "Account",
    "user": "User",
    "users": "User",
    "parent": "Parent",
    "parentname": "Parent",
    "description": "Description",
    "descr": "Description",
    "organization": "Organization",
    "org": "Organization",
    "fairshare": "Fairshare",
    "shares": "Fairshare",
    "share": "Fairshare",
    "grptres": "GrpTRES",
    "grptresmins": "GrpTRESMins",
    "grpjobs": "GrpJobs",
    "grpsubmitjobs": "GrpSubmitJobs",
    "grpsubmit": "GrpSubmitJobs",
    "maxjobs": "MaxJobs",
    "maxsubmitjobs": "MaxSubmitJobs",
    "maxsubmit": "MaxSubmitJobs",
    "maxwall": "MaxWall",
    "maxwalldurationperjob": "MaxWall",
    "maxtres": "MaxTRES",
    "maxtresperjob": "MaxTRES",
    "qos": "QOS",
    "qoslevel": "QOS",
    "defaultqos": "DefaultQOS",
    "defqos": "DefaultQOS",
    "defaultaccount": "DefaultAccount",
    "defacct": "DefaultAccount",
    "adminlevel": "AdminLevel",
    "admin": "AdminLevel",
    "priority": "Priority",
    "flags": "Flags",
    "usagefactor": "UsageFactor",
    "maxtresperuser": "MaxTRESPerUser",
    "maxtrespu": "MaxTRESPerUser",
    "maxjobsperuser": "MaxJobsPerUser",
    "maxjobspu": "MaxJobsPerUser",
    "maxsubmitjobsperuser": "MaxSubmitJobsPerUser",
    "maxsubmitpu": "MaxSubmitJobsPerUser",
    "maxsubmitjobspu": "MaxSubmitJobsPerUser",
    "preempt": "Preempt",
    "preemptmode": "PreemptMode",
    "gracetime": "GraceTime",
    "preemptexempttime": "PreemptExemptTime",
    "expediterequeue": "ExpediteRequeue",
    "cluster": "Cluster",
    "clusters": "Cluster",
    "partition": "Partition",
}

ASSOC_LIMITS = {
    "GrpTRES": "grp_tres",
    "GrpTRESMins": "grp_tres_mins",
    "GrpJobs": "grp_jobs",
    "GrpSubmitJobs": "grp_submit_jobs",
    "MaxJobs": "max_jobs",
    "MaxSubmitJobs": "max_submit_jobs",
    "MaxWall": "max_wall",
    "MaxTRES": "max_tres_per_job",
}
QOS_FIELDS = {
    "Description": "description",
    "Priority": "priority",
    "Flags": "flags",
    "UsageFactor": "usage_factor",
    "MaxWall": "max_wall",
    "MaxTRESPerUser": "max_tres_per_user",
    "MaxJobsPerUser": "max_jobs_per_user",
    "MaxSubmitJobsPerUser": "max_submit_jobs_per_user",
    "MaxTRES": "max_tres_per_job",
    "GrpTRES": "grp_tres",
    "GrpJobs": "grp_jobs",
    "GrpSubmitJobs": "grp_submit_jobs",
    "Preempt": "preempt",
    "PreemptMode": "preempt_mode",
    "GraceTime": "grace_time",
    "PreemptExemptTime": "preempt_exempt_time",
    "ExpediteRequeue": "expedite_requeue",
}
_TRES_KEYS = {"GrpTRES", "GrpTRESMins", "MaxTRES", "MaxTRESPerUser"}
_INT_KEYS = {
    "GrpJobs",
    "GrpSubmitJobs",
    "MaxJobs",
    "MaxSubmitJobs",
    "MaxJobsPerUser",
    "MaxSubmitJobsPerUser",
    "Fairshare",
    "Priority",
}


_MAX_COUNT = 0xFFFFFFFE


def canonical_key(key: str) -> str:
    name = _KEY_ALIASES.get(key.strip().lower())
    if name is None:
        raise InvalidRequest(f"Unknown option: {key}")
    return name


def parse_value(key: str, raw: str) -> Any:
    """Parse one sacctmgr value; ``-1`` clears a limit (None, or -1 inside a TRES list)."""
    raw = raw.strip()
    try:
        if key in _TRES_KEYS:
            return parse_tres(raw)
        if key in _INT_KEYS:
            if key == "Fairshare" and raw.lower() == "parent":
                return 0
            value = int(raw)
            if value < -1 or value > _MAX_COUNT:  # Slurm's counts and priorities are 32-bit
                raise ValueError
            return None if value == -1 and key != "Priority" else value
        if key in ("MaxWall", "PreemptExemptTime"):
            if raw == "-1":
                return None
            limit = parse_time_limit(raw)
            if limit is not None and limit > MAX_TIME_LIMIT:
                raise ValueError
            return limit
        if key == "GraceTime":  # seconds, as sacctmgr takes it
            value = int(raw)
            if value < -1 or value > _MAX_COUNT:
                raise ValueError
            return max(0, value)
        if key == "UsageFactor":
            return float(raw)
    except (ValueError, TresError, TimeFormatError):
        raise InvalidRequest(f"Invalid value for {key}: {raw}") from None
    if key == "AdminLevel":
        level = ADMIN_LEVELS.get(raw.lower())
        if level is None:
            raise InvalidRequest(f"Invalid AdminLevel: {raw} (None, Operator or Administrator)")
        return level
    if key == "Flags":
        flags = []
        for f in (x for x in raw.split(",") if x and x.lower() != "-1"):
            canon = QOS_FLAGS.get(f.lower())
            if canon is None:
                raise InvalidRequest(f"Invalid QOS flag: {f}")
            flags.append(canon)
        return flags
    if key in ("QOS", "Preempt"):
        return [q for q in raw.split(",") if q and q not in ("''", '""', "-1")]
    if key == "ExpediteRequeue":
        if raw.lower() not in ("yes", "no", "true", "false", "1", "0"):
            raise InvalidRequest(f"Invalid value for {key}: {raw} (yes or no)")
        return raw.lower() in ("yes", "true", "1")
    if key == "PreemptMode":
        if raw.lower() == "cluster":
            return None
        try:
            mode = preempt_mode(raw)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        if mode == "SUSPEND":  # muster suspends for a partition's PriorityTier only
            raise InvalidRequest(
                "PreemptMode=SUSPEND is not supported for a QOS: muster suspends jobs for a partition "
                "of higher PriorityTier only (PreemptType=preempt/partition_prio, PreemptMode=SUSPEND,GANG)"
            )
        return mode
    return raw


def merge_tres(old: dict[str, int], new: dict[str, int]) -> dict[str, int]:
    out = dict(old)
    for k, v in new.items():
        if v == -1:
            out.pop(k, None)
        else:
            out[k] = v
    return out
