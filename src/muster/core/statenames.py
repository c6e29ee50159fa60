"""Job state names and codes as plain text, for the commands: the one table that
``squeue -t``, ``scancel -t``, ``sacct -s`` and the controller's state filters read.

It imports nothing (``enum`` and what it pulls in cost a command milliseconds at every
start); ``core.states`` builds its ``JobState`` enum's short codes from ``JOB_STATE_SHORT``
here, so the names have one owner.
"""

from __future__ import annotations

# Every state muster's jobs enter, long name -> squeue's short code.
JOB_STATE_SHORT: dict[str, str] = {
    "PENDING": "PD",
    "RUNNING": "R",
    "SUSPENDED": "S",
    "COMPLETED": "CD",
    "CANCELLED": "CA",
    "FAILED": "F",
    "TIMEOUT": "TO",
    "NODE_FAIL": "NF",
    "PREEMPTED": "PR",
    "OUT_OF_MEMORY": "OOM",
    "BOOT_FAIL": "BF",
    "DEADLINE": "DL",
    "STOPPED": "ST",  # shown for a running job sent SIGSTOP (scancel --signal=STOP)
}
# "CG": a job whose state is decided but whose processes are still being cleaned up.
COMPLETING_SHORT = "CG"
COMPLETING_LONG = "COMPLETING"

# Every job state name of Slurm 22.05 with its short code. Besides muster's own states
# (``JOB_STATE_SHORT`` and COMPLETING), it holds the states and flags Slurm shows that muster
# never enters (CONFIGURING, REQUEUED, ...): a tool may pass them, and they then match no job.
JOB_STATE_CODES: dict[str, str] = {
    **{code: name for name, code in JOB_STATE_SHORT.items()},
    COMPLETING_SHORT: COMPLETING_LONG,
    "CF": "CONFIGURING",
    "RV": "REVOKED",
    "SE": "SPECIAL_EXIT",
    "RQ": "REQUEUED",
    "RS": "RESIZING",
    "SI": "SIGNALING",
    "SO": "STAGE_OUT",
    "RD": "RESV_DEL_HOLD",
    "RF": "REQUEUE_FED",
    "RH": "REQUEUE_HOLD",
}
JOB_STATE_NAMES: frozenset[str] = frozenset(JOB_STATE_CODES.values())


def job_state_name(text: str) -> str | None:
    """The long name of a state given by code or name, any case (``pd``, ``Pending``);
    None when Slurm knows no such state."""
    up = text.strip().upper()
    if up in JOB_STATE_NAMES:
        return up
    return JOB_STATE_CODES.get(up)


def parse_job_states(text: str) -> set[str] | None:
    """A comma-separated list of states (``-t``/``-s``) as long names; None for ``all``.

    Raises ``ValueError("Invalid job state specified: X")`` (Slurm's words) for junk."""
    wanted: set[str] = set()
    for item in text.split(","):
        if not item.strip():
            continue
        if item.strip().lower() == "all":
            return None
        name = job_state_name(item)
        if name is None:
            raise ValueError(f"Invalid job state specified: {item.strip()}")
        wanted.add(name)
    return wanted
