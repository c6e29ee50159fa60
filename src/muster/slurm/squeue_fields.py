"""squeue's field table: what each ``-o`` letter and ``-O`` name shows of a job.

A job is a ``JobWire`` dict (docs/api.md); every value here is computed from it alone,
as text, the way Slurm's squeue prints it (``(null)`` for a missing string, ``N/A`` for
an unknown time, ``NODELIST(REASON)`` as ``(Reason)`` for jobs that wait). The width,
justification and cutting rules are ``muster.slurm.columns``'s; this module only says what
the fields are: ``FIELDS`` (letter -> header, value, cut), ``LONG_NAMES`` (``-O`` name ->
letter) and ``EXTRA_FIELDS`` (``-O`` names with no letter).
"""

from muster.slurm.columns import Column, letter_columns, named_columns, null_text, timefmt
from muster.slurm.jobarrays import array_job_id_text, array_task_text, job_id_text

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

# Jobs whose %R shows "(reason)" rather than nodes (Slurm's rule).
_REASON_STATES = frozenset({"PENDING", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "FAILED"})


def job_spec(job: dict[str, "Any"]) -> dict[str, "Any"]:
    """What the job asked for (its ``spec``), empty when the controller sent none."""
    spec = job.get("spec")
    return spec if isinstance(spec, dict) else {}


def long_state(job: dict[str, "Any"]) -> str:
    if job.get("completing") or job.get("state_code") == "CG":
        return "COMPLETING"
    return str(job.get("state") or "UNKNOWN")


def state_code(job: dict[str, "Any"]) -> str:
    return str(job.get("state_code") or "")


_DURATIONS: dict[object, str] = {}  # seconds -> text: a queue repeats a few values (0:00) many times


def _dur(seconds: "Any") -> str:
    text = _DURATIONS.get(seconds)
    if text is None:
        text = timefmt().format_duration(seconds if seconds is None else int(seconds))
        if len(_DURATIONS) < 4096:
            _DURATIONS[seconds] = text
    return text


def _ts(epoch: "Any", none: str = "N/A") -> str:
    text: str = timefmt().format_timestamp(epoch, none=none)
    return text


def time_left(job: dict[str, "Any"]) -> str:
    limit = job.get("time_limit")
    if limit is None:
        return "UNLIMITED"
    return _dur(max(0, int(limit) - int(job.get("run_time") or 0)))


def start_time(job: dict[str, "Any"]) -> object:
    """When the job started, or is expected to (``planned_start``, or its --begin time)."""
    if job.get("start_time"):
        return job["start_time"]
    if job.get("state") == "PENDING":
        return job.get("planned_start") or job_spec(job).get("begin_time") or None
    return None


def end_time_text(job: dict[str, "Any"]) -> str:
    if job.get("end_time"):
        return _ts(job["end_time"])
    start = start_time(job)
    if start:
        limit = job.get("time_limit")
        return "NONE" if limit is None else _ts(float(start) + int(limit))  # type: ignore[arg-type]
    return "N/A"


def tres_per_node(job: dict[str, "Any"]) -> str:
    shape = job.get("shape") or {}
    spec = job_spec(job)
    gpus = shape.get("gpus_per_node") or spec.get("gpus_per_node") or 0
    if not gpus:
        return "N/A"
    gtype = shape.get("gpu_type") or spec.get("gpu_type")
    return f"gres:gpu:{gtype}:{gpus}" if gtype else f"gres:gpu:{gpus}"


def reason_list(job: dict[str, "Any"]) -> str:
    state = long_state(job)
    if state in _REASON_STATES or (state != "COMPLETING" and not job.get("nodelist")):
        return f"({job.get('reason') or 'None'})"
    return str(job.get("nodelist") or "")


def _compress(names: object) -> str:
    if not names:
        return ""
    from muster.core.hostlist import compress

    return compress(names)  # type: ignore[arg-type]


def _prio_float(job: dict[str, "Any"]) -> str:
    return f"{int(job.get('priority') or 0) / 4294967295:.8f}"


def _mem_text(job: dict[str, "Any"]) -> str:
    spec = job_spec(job)
    if spec.get("mem_per_cpu"):
        return f"{spec['mem_per_cpu']}M"
    mem = (job.get("shape") or {}).get("mem_per_node") or spec.get("mem_per_node") or 0
    return f"{mem}M" if mem else "0"


# letter -> (header, value function, cut to width)
FIELDS: dict[str, tuple[str, object, bool]] = {
    "a": ("ACCOUNT", lambda j: str(j.get("account") or ""), True),
    "A": ("JOBID", lambda j: str(j.get("job_id")), True),
    "b": ("TRES_PER_NODE", tres_per_node, True),
    "B": ("EXEC_HOST", lambda j: str(j.get("batch_host") or "n/a"), True),
    "c": ("MIN_CPUS", lambda j: str((j.get("shape") or {}).get("cpus_per_node") or 1), True),
    "C": ("CPUS", lambda j: str(j.get("num_cpus") or 0), True),
    "d": ("MIN_TMP_DISK", lambda j: "0", True),
    "D": ("NODES", lambda j: str(j.get("num_nodes") or 0), True),
    "e": ("END_TIME", end_time_text, True),
    "E": ("DEPENDENCY", lambda j: null_text(job_spec(j).get("dependency")), True),
    "f": ("FEATURES", lambda j: null_text(job_spec(j).get("constraint")), True),
    "F": ("ARRAY_JOB_ID", array_job_id_text, True),
    "g": ("GROUP", lambda j: str(j.get("group") or ""), True),
    "G": ("GROUP", lambda j: str(j.get("gid", "")), True),
    "h": ("OVER_SUBSCRIBE", lambda j: "NO" if job_spec(j).get("exclusive") else "OK", True),
    "H": ("SOCKETS_PER_NODE", lambda j: "*", True),
    "i": ("JOBID", job_id_text, True),
    "I": ("CORES_PER_SOCKET", lambda j: "*", True),
    "j": ("NAME", lambda j: str(job_spec(j).get("name") or ""), True),
    "J": ("THREADS_PER_CORE", lambda j: "*", True),
    "k": ("COMMENT", lambda j: null_text(job_spec(j).get("comment")), True),
    "K": ("ARRAY_TASK_ID", array_task_text, True),
    "l": ("TIME_LIMIT", lambda j: _dur(j.get("time_limit")), True),
    "L": ("TIME_LEFT", time_left, True),
    "m": ("MIN_MEMORY", _mem_text, True),
    "M": ("TIME", lambda j: _dur(int(j.get("run_time") or 0)), True),
    "n": ("REQ_NODES", lambda j: _compress(job_spec(j).get("nodelist")), True),
    "N": ("NODELIST", lambda j: str(j.get("nodelist") or ""), False),
    "o": ("COMMAND", lambda j: null_text(j.get("command")), True),
    "O": ("CONTIGUOUS", lambda j: "0", True),
    "p": ("PRIORITY", _prio_float, True),
    "P": ("PARTITION", lambda j: str(j.get("partition") or ""), True),
    "q": ("QOS", lambda j: str(j.get("qos") or "normal"), True),
    "Q": ("PRIORITY", lambda j: str(int(j.get("priority") or 0)), True),
    "r": ("REASON", lambda j: str(j.get("reason") or "None"), True),
    "R": ("NODELIST(REASON)", reason_list, False),
    "S": ("START_TIME", lambda j: _ts(start_time(j)), True),
    "t": ("ST", state_code, True),
    "T": ("STATE", long_state, True),
    "u": ("USER", lambda j: str(j.get("user") or ""), True),
    "U": ("UID", lambda j: str(j.get("uid", "")), True),
    "v": ("RESERVATION", lambda j: null_text(job_spec(j).get("reservation")), True),
    "V": ("SUBMIT_TIME", lambda j: _ts(j.get("submit_time")), True),
    "w": ("WCKEY", lambda j: "(null)", True),
    "x": ("EXC_NODES", lambda j: _compress(job_spec(j).get("exclude")), True),
    "y": ("NICE", lambda j: str(job_spec(j).get("nice") or 0), True),
    "Y": ("SCHEDNODES", lambda j: null_text(j.get("sched_nodelist")), True),
    "z": ("S:C:T", lambda j: "*:*:*", True),
    "Z": ("WORK_DIR", lambda j: str(job_spec(j).get("workdir") or ""), True),
}

# -O names (lower case) -> (% letter, header); headers follow Slurm's.
LONG_NAMES: dict[str, str] = {
    "account": "a",
    "arrayjobid": "F",
    "arraytaskid": "K",
    "batchhost": "B",
    "command": "o",
    "comment": "k",
    "dependency": "E",
    "endtime": "e",
    "excnodes": "x",
    "feature": "f",
    "groupid": "G",
    "groupname": "g",
    "jobarrayid": "i",
    "jobid": "A",
    "mincpus": "c",
    "minmemory": "m",
    "mintmpdisk": "d",
    "name": "j",
    "nice": "y",
    "nodelist": "N",
    "numcpus": "C",
    "numnodes": "D",
    "oversubscribe": "h",
    "partition": "P",
    "priority": "p",
    "prioritylong": "Q",
    "qos": "q",
    "reason": "r",
    "reasonlist": "R",
    "reqnodes": "n",
    "reservation": "v",
    "schednodes": "Y",
    "starttime": "S",
    "state": "T",
    "statecompact": "t",
    "submittime": "V",
    "timeleft": "L",
    "timelimit": "l",
    "timeused": "M",
    "tres-per-node": "b",
    "userid": "U",
    "username": "u",
    "workdir": "Z",
    "wckey": "w",
    "contiguous": "O",
    "sct": "z",
}
# -O names with no % letter.
EXTRA_FIELDS: dict[str, tuple[str, object]] = {
    "numtasks": ("TASKS", lambda j: str(j.get("num_tasks") or 1)),
    "cpus-per-task": ("CPUS_PER_TASK", lambda j: str(job_spec(j).get("cpus_per_task") or 1)),
    "tres-alloc": ("TRES_ALLOC", lambda j: str(j.get("tres") or "")),
    "tres": ("TRES_ALLOC", lambda j: str(j.get("tres") or "")),
    "eligibletime": ("ELIGIBLE_TIME", lambda j: _ts(j.get("eligible_time"))),
    "restartcnt": ("RESTARTCNT", lambda j: str(j.get("restart_count") or 0)),
    "exitcode": ("EXIT_CODE", lambda j: f"{j.get('exit_code') or 0}:{j.get('exit_signal') or 0}"),
    "stdout": ("STDOUT", lambda j: str(j.get("stdout_path") or "")),
    "stderr": ("STDERR", lambda j: str(j.get("stderr_path") or "")),
    "stdin": ("STDIN", lambda j: str(job_spec(j).get("stdin") or "/dev/null")),
    "gres": ("TRES_PER_NODE", tres_per_node),
    "cluster": ("CLUSTER", lambda j: ""),
    # muster's: the job's nodes flagged slower than their peers (docs/training.md)
    "stragglers": ("STRAGGLERS", lambda j: str(j.get("stragglers") or "")),
}

# The output paths are not in the brief view: a column showing them asks for the full one.
PATH_VALUES = (EXTRA_FIELDS["stdout"][1], EXTRA_FIELDS["stderr"][1])


def _named(name: str) -> tuple[str, object, bool] | None:
    """An ``-O`` name's field (lower case): by its letter, else one with no letter."""
    letter = LONG_NAMES.get(name)
    if letter is not None:
        return FIELDS[letter]
    extra = EXTRA_FIELDS.get(name)
    return None if extra is None else (extra[0], extra[1], True)


def columns_from_format(fmt: str) -> list[Column]:
    """``-o``: Slurm's ``%[.][width]letter`` fields with literal text between them;
    ``%all``: every field, a to z then A to Z, a bar between each (``all_format``)."""
    if fmt == "%all":
        fmt = all_format()
    return letter_columns(fmt, FIELDS.get, "Invalid job format specification: {}")


def all_format() -> str:
    """``-o %all``: Slurm's letters in its order, as wide as their values, ``|`` between
    them; the letters muster has no field for (Slurm's %s, %W, %X) are left out."""
    return "|".join(f"%{c}" for c in LETTERS if c in FIELDS)


LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def columns_from_long_format(spec: str) -> list[Column]:
    """``-O``: ``Name[:[.]width[suffix]]`` items, 20 columns wide unless told."""
    return named_columns(spec, _named, "Invalid job format specification: {}")


# --- what to ask the controller for ---------------------------------------------------------

# The brief job keys (ctld.listing.BRIEF_KEYS; ``spec.K`` a key of the job's spec) that
# squeue reads whatever it shows: ids as %i writes them, array merging, the state filter and
# the default sort's keys (P,t,-p). A user (%u, -u) and a state's code (%t) only when asked.
BASE_KEYS = (
    "job_id",
    "state",
    "completing",
    "reason",
    "priority",
    "partition",
    "array_job_id",
    "array_task_id",
    "array_throttle",
    "het_job_id",
    "het_job_offset",
)
_START = ("start_time", "state", "planned_start", "spec.begin_time")
_GRES = ("shape", "spec.gpus_per_node", "spec.gpu_type")
# Each letter's (and each -O name without one) keys besides BASE_KEYS; the sort letters
# read the same keys as the columns of those letters.
JOB_KEYS: dict[str, tuple[str, ...]] = {
    "a": ("account",),
    "b": _GRES,
    "B": ("batch_host",),
    "c": ("shape",),
    "C": ("num_cpus",),
    "D": ("num_nodes",),
    "e": ("end_time", "time_limit", *_START),
    "E": ("spec.dependency",),
    "f": ("spec.constraint",),
    "g": ("group",),
    "G": ("gid",),
    "h": ("spec.exclusive",),
    "j": ("spec.name",),
    "k": ("spec.comment",),
    "l": ("time_limit",),
    "L": ("time_limit", "run_time"),
    "m": ("shape", "spec.mem_per_cpu", "spec.mem_per_node"),
    "M": ("run_time",),
    "n": ("spec.nodelist",),
    "N": ("nodelist",),
    "q": ("qos",),
    "R": ("nodelist",),
    "S": _START,
    "t": ("state_code",),
    "u": ("user",),
    "U": ("uid",),
    "v": ("spec.reservation",),
    "V": ("submit_time",),
    "x": ("spec.exclude",),
    "y": ("spec.nice",),
    "Y": ("sched_nodelist",),
    "Z": ("spec.workdir",),
    "numtasks": ("num_tasks",),
    "cpus-per-task": ("spec.cpus_per_task",),
    "tres-alloc": ("tres",),
    "tres": ("tres",),
    "eligibletime": ("eligible_time",),
    "restartcnt": ("restart_count",),
    "exitcode": ("exit_code", "exit_signal"),
    "stdin": ("spec.stdin",),
    "gres": _GRES,
    "stragglers": ("stragglers",),
}
# Letters that read BASE_KEYS alone, or nothing of the job.
BASE_ONLY = frozenset("AdFHiIJKOpPQrTwz") | {"cluster", "o"}  # %o: the brief view has no command


def job_keys(keys: list[str]) -> list[str]:
    """The brief job keys that columns, sort letters or -O names ``keys`` read."""
    out = dict.fromkeys(BASE_KEYS)
    for key in keys:
        out.update(dict.fromkeys(JOB_KEYS.get(LONG_NAMES.get(key, key), ())))
    return list(out)
