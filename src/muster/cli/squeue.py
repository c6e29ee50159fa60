"""squeue: show the queue, as Slurm's squeue does.

Rows are jobs as the controller sends them (``JobWire``, see docs/api.md); everything
here is formatting, filtering and sorting on the client, so the output can be checked
from dicts alone.

* Columns follow Slurm's ``-o`` letters (``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R`` by
  default) or ``-O`` names (``JobID,Name:30,State``); values longer than a column are
  cut to its width except node lists, as Slurm does.
* Order: Slurm's default ``-S P,t,-p`` (partition, then state with pending first, then
  priority, highest first), ties by job id. ``--start`` shows pending jobs by expected
  start, unknown last.
* Without ``-t`` and ``-j`` only jobs that are pending, running, suspended or completing
  are shown; ``-j`` shows the named jobs in any state the controller still holds.
* Job arrays: each task is a job of its own (``123_4`` in ``%i``); pending tasks of an
  array that wait for the same reason are shown as one row, ``123_[5-99%10]`` (the ``%N``
  is the array's throttle), unless ``-r`` asks for one row per task. ``-j 123`` names the
  whole array, ``-j 123_4`` one task.
"""

from __future__ import annotations

import os
import sys

from muster.cli.common import (
    CommandError,
    argv_or_sys,
    connect,
    connect_message,
    current_user,
    field_width,
    fit,
    info_text,
    no_operands,
    null_text,
    option_error,
    parse_format,
    parse_iterate,
    print_lines,
    report,
    timefmt,
)
from muster.cli.jobarrays import array_job_id_text, array_task_text, job_id_text, merge_array_rows
from muster.cli.options import NO_ARG, OPTIONAL, Opt, OptionError, OptionTable, getopt
from muster.core.arrays import JobRef, parse_job_ref
from muster.core.states import parse_job_states

PROG = "squeue"

DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
DEFAULT_SORT = "P,t,-p"

OPTIONS: tuple[Opt, ...] = (
    Opt("account", "A"),
    Opt("all", "a", NO_ARG),
    Opt("array", "r", NO_ARG),
    Opt("noheader", "h", NO_ARG),
    Opt("help", None, NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("iterate", "i"),
    Opt("jobs", "j"),
    Opt("long", "l", NO_ARG),
    Opt("me", None, NO_ARG),
    Opt("name", "n"),
    Opt("noconvert", None, NO_ARG),
    Opt("format", "o"),
    Opt("Format", "O"),
    Opt("partition", "p"),
    Opt("priority", "P", NO_ARG),
    Opt("qos", "q"),
    Opt("reservation", "R"),
    Opt("sort", "S"),
    Opt("start", None, NO_ARG),
    Opt("steps", "s", OPTIONAL),
    Opt("states", "t"),
    Opt("user", "u"),
    Opt("nodelist", "w"),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("json", None, NO_ARG),
    Opt("yaml", None, NO_ARG),
    Opt("clusters", "M"),
    Opt("local", None, NO_ARG),
    Opt("federation", None, NO_ARG),
    Opt("sibling", None, NO_ARG),
    Opt("licenses", "L"),
)

_ACTIVE = frozenset({"PENDING", "RUNNING", "SUSPENDED"})
_STATE_ORDER = {
    name: i
    for i, name in enumerate(
        "PENDING RUNNING SUSPENDED COMPLETED CANCELLED FAILED TIMEOUT NODE_FAIL PREEMPTED "
        "BOOT_FAIL DEADLINE OUT_OF_MEMORY".split()
    )
}
# Jobs whose %R shows "(reason)" rather than nodes (Slurm's rule).
_REASON_STATES = frozenset({"PENDING", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "FAILED"})


# --- job values ------------------------------------------------------------------------------


def _spec(job: dict) -> dict:
    spec = job.get("spec")
    return spec if isinstance(spec, dict) else {}


def long_state(job: dict) -> str:
    if job.get("completing") or job.get("state_code") == "CG":
        return "COMPLETING"
    return str(job.get("state") or "UNKNOWN")


def state_code(job: dict) -> str:
    return str(job.get("state_code") or "")


def _dur(seconds: object) -> str:
    return timefmt().format_duration(seconds if seconds is None else int(seconds))  # type: ignore[arg-type]


def _ts(epoch: object, none: str = "N/A") -> str:
    return timefmt().format_timestamp(epoch, none=none)  # type: ignore[arg-type]


def time_left(job: dict) -> str:
    limit = job.get("time_limit")
    if limit is None:
        return "UNLIMITED"
    return _dur(max(0, int(limit) - int(job.get("run_time") or 0)))


def start_time(job: dict) -> object:
    """When the job started, or is expected to (``planned_start``, or its --begin time)."""
    if job.get("start_time"):
        return job["start_time"]
    if job.get("state") == "PENDING":
        return job.get("planned_start") or _spec(job).get("begin_time") or None
    return None


def end_time_text(job: dict) -> str:
    if job.get("end_time"):
        return _ts(job["end_time"])
    start = start_time(job)
    if start:
        limit = job.get("time_limit")
        return "NONE" if limit is None else _ts(float(start) + int(limit))  # type: ignore[arg-type]
    return "N/A"


def tres_per_node(job: dict) -> str:
    shape = job.get("shape") or {}
    spec = _spec(job)
    gpus = shape.get("gpus_per_node") or spec.get("gpus_per_node") or 0
    if not gpus:
        return "N/A"
    gtype = shape.get("gpu_type") or spec.get("gpu_type")
    return f"gres:gpu:{gtype}:{gpus}" if gtype else f"gres:gpu:{gpus}"


def reason_list(job: dict) -> str:
    state = long_state(job)
    if state in _REASON_STATES or (state != "COMPLETING" and not job.get("nodelist")):
        return f"({job.get('reason') or 'None'})"
    return str(job.get("nodelist") or "")


def _compress(names: object) -> str:
    if not names:
        return ""
    from muster.core.hostlist import compress

    return compress(names)  # type: ignore[arg-type]


def _prio_float(job: dict) -> str:
    return f"{int(job.get('priority') or 0) / 4294967295:.8f}"


def _mem_text(job: dict) -> str:
    spec = _spec(job)
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
    "E": ("DEPENDENCY", lambda j: null_text(_spec(j).get("dependency")), True),
    "f": ("FEATURES", lambda j: null_text(_spec(j).get("constraint")), True),
    "F": ("ARRAY_JOB_ID", array_job_id_text, True),
    "g": ("GROUP", lambda j: str(j.get("group") or ""), True),
    "G": ("GROUP", lambda j: str(j.get("gid", "")), True),
    "h": ("OVER_SUBSCRIBE", lambda j: "NO" if _spec(j).get("exclusive") else "OK", True),
    "H": ("SOCKETS_PER_NODE", lambda j: "*", True),
    "i": ("JOBID", job_id_text, True),
    "I": ("CORES_PER_SOCKET", lambda j: "*", True),
    "j": ("NAME", lambda j: str(_spec(j).get("name") or ""), True),
    "J": ("THREADS_PER_CORE", lambda j: "*", True),
    "k": ("COMMENT", lambda j: null_text(_spec(j).get("comment")), True),
    "K": ("ARRAY_TASK_ID", array_task_text, True),
    "l": ("TIME_LIMIT", lambda j: _dur(j.get("time_limit")), True),
    "L": ("TIME_LEFT", time_left, True),
    "m": ("MIN_MEMORY", _mem_text, True),
    "M": ("TIME", lambda j: _dur(int(j.get("run_time") or 0)), True),
    "n": ("REQ_NODES", lambda j: _compress(_spec(j).get("nodelist")), True),
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
    "v": ("RESERVATION", lambda j: null_text(_spec(j).get("reservation")), True),
    "V": ("SUBMIT_TIME", lambda j: _ts(j.get("submit_time")), True),
    "w": ("WCKEY", lambda j: "(null)", True),
    "x": ("EXC_NODES", lambda j: _compress(_spec(j).get("exclude")), True),
    "y": ("NICE", lambda j: str(_spec(j).get("nice") or 0), True),
    "Y": ("SCHEDNODES", lambda j: null_text(j.get("sched_nodelist")), True),
    "z": ("S:C:T", lambda j: "*:*:*", True),
    "Z": ("WORK_DIR", lambda j: str(_spec(j).get("workdir") or ""), True),
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
    "cpus-per-task": ("CPUS_PER_TASK", lambda j: str(_spec(j).get("cpus_per_task") or 1)),
    "tres-alloc": ("TRES_ALLOC", lambda j: str(j.get("tres") or "")),
    "tres": ("TRES_ALLOC", lambda j: str(j.get("tres") or "")),
    "eligibletime": ("ELIGIBLE_TIME", lambda j: _ts(j.get("eligible_time"))),
    "restartcnt": ("RESTARTCNT", lambda j: str(j.get("restart_count") or 0)),
    "exitcode": ("EXIT_CODE", lambda j: f"{j.get('exit_code') or 0}:{j.get('exit_signal') or 0}"),
    "stdout": ("STDOUT", lambda j: str(j.get("stdout_path") or "")),
    "stderr": ("STDERR", lambda j: str(j.get("stderr_path") or "")),
    "stdin": ("STDIN", lambda j: str(_spec(j).get("stdin") or "/dev/null")),
    "gres": ("TRES_PER_NODE", tres_per_node),
    "cluster": ("CLUSTER", lambda j: ""),
}

_PATH_VALUES = (EXTRA_FIELDS["stdout"][1], EXTRA_FIELDS["stderr"][1])  # need ?view=full


class Column:
    """One output column: a literal prefix, then a value fitted to a width."""

    __slots__ = ("prefix", "header", "value", "width", "right", "cut", "suffix")

    def __init__(
        self,
        prefix: str,
        header: str,
        value: object,
        width: int,
        right: bool,
        cut: bool,
        suffix: str = "",
    ) -> None:
        self.prefix = prefix
        self.header = header
        self.value = value
        self.width = width
        self.right = right
        self.cut = cut
        self.suffix = suffix


def columns_from_format(fmt: str) -> list[Column]:
    """``-o``: Slurm's ``%[.][width]letter`` fields with literal text between them."""
    cols: list[Column] = []
    for literal, letter, width, right in parse_format(fmt):
        if letter is None:
            cols.append(Column(literal, "", None, 0, False, False))
            continue
        field = FIELDS.get(letter)
        if field is None:
            raise CommandError(f"Invalid job format specification: {letter}")
        header, value, cut = field
        cols.append(Column(literal, header, value, max(width, 0), right, cut))
    return cols


def columns_from_long_format(spec: str) -> list[Column]:
    """``-O``: ``Name[:[.]width[suffix]]`` items, 20 columns wide unless told."""
    cols: list[Column] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, colon, size = item.partition(":")
        key = name.lower()
        width, right, suffix = 20, False, ""
        if colon:
            if size.startswith("."):
                right, size = True, size[1:]
            digits = ""
            while size and size[0].isdigit():
                digits, size = digits + size[0], size[1:]
            width = field_width(digits)
            suffix = size
        if key in LONG_NAMES:
            header, value, cut = FIELDS[LONG_NAMES[key]]
        elif key in EXTRA_FIELDS:
            header, value = EXTRA_FIELDS[key]
            cut = True
        else:
            raise CommandError(f"Invalid job format specification: {name}")
        cols.append(Column("", header, value, width, right, cut and width > 0, suffix))
    return cols


def _cell(c: Column):  # noqa: ANN202 - returns a job -> str function
    """One column as a function of the job, with its width rule fixed in advance: the
    queue can be thousands of rows and this is the inner loop."""
    value, width, prefix, suffix = c.value, c.width, c.prefix, c.suffix
    if value is None:
        return lambda job: prefix
    if width <= 0:
        return lambda job: prefix + value(job) + suffix  # type: ignore[operator]
    if c.right:
        if c.cut:
            return lambda job: prefix + value(job)[:width].rjust(width) + suffix  # type: ignore[operator]
        return lambda job: prefix + value(job).rjust(width) + suffix  # type: ignore[operator]
    if c.cut:
        return lambda job: prefix + value(job)[:width].ljust(width) + suffix  # type: ignore[operator]
    return lambda job: prefix + value(job).ljust(width) + suffix  # type: ignore[operator]


def render(jobs: list[dict], cols: list[Column], header: bool = True) -> list[str]:
    lines = []
    if header:
        lines.append(
            "".join(
                c.prefix
                + (fit(c.header, c.width, c.right) if c.value is not None else "")
                + c.suffix
                for c in cols
            )
        )
    cells = [_cell(c) for c in cols]
    join = "".join
    lines.extend(join([cell(job) for cell in cells]) for job in jobs)
    return lines


# --- filtering and sorting -----------------------------------------------------------------


def parse_states(text: str) -> set[str] | None:
    """``-t``: short or long names (``core.states``), comma separated, any case; ``all``
    means every state (None)."""
    try:
        return parse_job_states(text)
    except ValueError as e:
        raise CommandError(str(e)) from None


class Filters:
    __slots__ = (
        "job_ids",
        "users",
        "names",
        "partitions",
        "states",
        "accounts",
        "qos",
        "nodes",
        "reservations",
    )

    def __init__(self) -> None:
        self.job_ids: list[JobRef] | None = None
        self.users: list[str] | None = None
        self.names: list[str] | None = None
        self.partitions: list[str] | None = None
        self.states: set[str] | None = set()  # empty: the default (active jobs); None: all
        self.accounts: list[str] | None = None
        self.qos: list[str] | None = None
        self.nodes: set[str] | None = None
        self.reservations: list[str] | None = None

    def query(self) -> str:
        """The server-side part of the filter, as the query string of GET /v1/jobs."""
        params = []
        if self.job_ids:
            params.append("job_id=" + ",".join(_query_ids(self.job_ids)))
        if self.users:
            params.append("user=" + ",".join(self.users))
        if self.partitions:
            params.append("partition=" + ",".join(self.partitions))
        if self.names and len(self.names) == 1:
            params.append("name=" + _quote(self.names[0]))
        # Ask only for the states shown: the controller keeps ended jobs for MinJobAge,
        # and thousands of them would otherwise be sent only to be dropped here.
        if self.states:
            wanted = sorted(self.states - {"COMPLETING"}) + (
                ["CG"] if "COMPLETING" in self.states else []
            )
            params.append("state=" + ",".join(wanted))
        elif self.states is not None and not self.job_ids:
            params.append("state=PD,R,S,CG")
        return ("?" + "&".join(params)) if params else ""

    def keep(self, job: dict) -> bool:
        state = long_state(job)
        if self.states is None:
            pass
        elif self.states:
            base = str(job.get("state") or "")
            if state not in self.states and base not in self.states:
                return False
        elif not self.job_ids and state != "COMPLETING" and state not in _ACTIVE:
            return False
        if self.job_ids:
            ids = (job.get("job_id"), job.get("array_job_id"), job.get("array_task_id"))
            if not any(ref.matches(*ids) for ref in self.job_ids):
                return False
        if self.users and job.get("user") not in self.users:
            return False
        if self.names and _spec(job).get("name") not in self.names:
            return False
        if self.partitions and job.get("partition") not in self.partitions:
            return False
        if self.accounts and job.get("account") not in self.accounts:
            return False
        if self.qos and (job.get("qos") or "normal") not in self.qos:
            return False
        if self.reservations and _spec(job).get("reservation") not in self.reservations:
            return False
        if self.nodes is not None:
            from muster.core.hostlist import expand

            here = set(expand(job["nodelist"])) if job.get("nodelist") else set()
            if not here & self.nodes:
                return False
        return True


def _query_ids(refs: list[JobRef]) -> list[str]:
    """Job ids for the query string: array task ranges one by one (no brackets, no commas)."""
    out = []
    for ref in refs:
        if ref.tasks is None:
            out.append(str(ref.job_id))
        else:
            out.extend(f"{ref.job_id}_{t}" for t in ref.tasks)
    return out


def _quote(text: str) -> str:
    safe = []
    for ch in text:
        if ch.isalnum() or ch in "-_.~":
            safe.append(ch)
        else:
            safe.extend(f"%{b:02X}" for b in ch.encode())
    return "".join(safe)


def _inf_if_none(value: object) -> float:
    return float("inf") if value is None else float(value)  # type: ignore[arg-type]


SORT_KEYS: dict[str, object] = {
    "i": lambda j: int(j.get("job_id") or 0),
    "A": lambda j: int(j.get("job_id") or 0),
    "j": lambda j: str(_spec(j).get("name") or ""),
    "u": lambda j: str(j.get("user") or ""),
    "U": lambda j: int(j.get("uid") or 0),
    "t": lambda j: _STATE_ORDER.get(str(j.get("state")), 99),
    "T": lambda j: _STATE_ORDER.get(str(j.get("state")), 99),
    "p": lambda j: int(j.get("priority") or 0),
    "Q": lambda j: int(j.get("priority") or 0),
    "P": lambda j: str(j.get("partition") or ""),
    "M": lambda j: int(j.get("run_time") or 0),
    "l": lambda j: _inf_if_none(j.get("time_limit")),
    "L": lambda j: _inf_if_none(
        None if j.get("time_limit") is None else int(j["time_limit"]) - int(j.get("run_time") or 0)
    ),
    "D": lambda j: int(j.get("num_nodes") or 0),
    "C": lambda j: int(j.get("num_cpus") or 0),
    "S": lambda j: _inf_if_none(start_time(j)),
    "V": lambda j: float(j.get("submit_time") or 0),
    "e": lambda j: _inf_if_none(j.get("end_time")),
    "N": lambda j: str(j.get("nodelist") or ""),
    "r": lambda j: str(j.get("reason") or ""),
    "a": lambda j: str(j.get("account") or ""),
    "q": lambda j: str(j.get("qos") or ""),
    "g": lambda j: str(j.get("group") or ""),
    "y": lambda j: int(_spec(j).get("nice") or 0),
}


def sort_jobs(jobs: list[dict], order: str = DEFAULT_SORT) -> list[dict]:
    """Slurm's ``-S``: comma-separated letters, ``-`` for descending.

    Ties fall back to the default order (``P,t,-p``) and then to the job id, so the output
    never depends on the order the controller happened to send.
    """
    out = sorted(jobs, key=lambda j: int(j.get("job_id") or 0))
    layers = [DEFAULT_SORT] if order == DEFAULT_SORT else [DEFAULT_SORT, order]
    for layer in layers:
        keys = [k.strip() for k in layer.split(",") if k.strip()]
        for key in reversed(keys):
            fn = SORT_KEYS.get(key.lstrip("+-"))
            if fn is None:
                raise CommandError(f"Invalid sort specification: {key}")
            out.sort(key=fn, reverse=key.startswith("-"))  # type: ignore[arg-type]
    return out


# --- the command ------------------------------------------------------------------------------


class Request:
    __slots__ = ("filters", "cols", "header", "sort", "start", "long", "json", "iterate", "expand")

    def __init__(self) -> None:
        self.filters = Filters()
        self.cols: list[Column] = []
        self.header = True
        self.sort = DEFAULT_SORT
        self.start = False
        self.long = False
        self.json = False
        self.iterate: float | None = None
        self.expand = False  # -r: one row per array task


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def parse_args(argv: list[str], environ: dict[str, str]) -> Request | str:
    """Build a Request; return text for --help/--usage/--version."""
    try:
        parsed, operands = getopt(argv, OptionTable(OPTIONS))
    except OptionError as e:
        raise option_error(PROG, e) from None
    no_operands(PROG, operands)
    req = Request()
    f = req.filters
    fmt = environ.get("SQUEUE_FORMAT")
    long_fmt = environ.get("SQUEUE_FORMAT2")
    if environ.get("SQUEUE_SORT"):
        req.sort = environ["SQUEUE_SORT"]
    sort_given = bool(environ.get("SQUEUE_SORT"))
    if environ.get("SQUEUE_STATES"):
        f.states = parse_states(environ["SQUEUE_STATES"])
    if environ.get("SQUEUE_USERS"):
        f.users = _split(environ["SQUEUE_USERS"])
    if environ.get("SQUEUE_PARTITION"):
        f.partitions = _split(environ["SQUEUE_PARTITION"])
    if environ.get("SQUEUE_ACCOUNT"):
        f.accounts = _split(environ["SQUEUE_ACCOUNT"])
    if environ.get("SQUEUE_NAMES"):
        f.names = _split(environ["SQUEUE_NAMES"])
    for opt, value in parsed:
        key = opt.key
        text = info_text((key,), HELP, USAGE)
        if text is not None:
            return text
        if key == "account":
            f.accounts = _split(value)
        elif key == "noheader":
            req.header = False
        elif key == "iterate":
            req.iterate = parse_iterate(value)
        elif key == "jobs":
            f.job_ids = _job_refs(value or "")
        elif key == "long":
            req.long = True
        elif key == "array":
            req.expand = True
        elif key == "me":
            f.users = [current_user()]
        elif key == "name":
            f.names = _split(value)
        elif key == "format":
            fmt, long_fmt = value, None
        elif key == "Format":
            long_fmt, fmt = value, None
        elif key == "partition":
            f.partitions = _split(value)
        elif key == "qos":
            f.qos = _split(value)
        elif key == "reservation":
            f.reservations = _split(value)
        elif key == "sort":
            req.sort = value or DEFAULT_SORT
            sort_given = True
        elif key == "start":
            req.start = True
        elif key == "steps":
            from muster.cli.squeue_steps import StepsQuery

            return StepsQuery(parsed, environ)  # type: ignore[return-value]
        elif key == "states":
            f.states = parse_states(value or "")
        elif key == "user":
            f.users = _users(value)
        elif key == "nodelist":
            from muster.core.hostlist import HostlistError, expand

            try:
                f.nodes = set(expand(value or ""))
            except HostlistError as e:
                raise CommandError(str(e)) from None
        elif key in ("json", "yaml"):
            if key == "yaml":
                raise CommandError("--yaml is not supported by muster; use --json")
            req.json = True
    if req.start:
        if not f.states:
            f.states = {"PENDING"}
        if not sort_given:
            req.sort = "S"
    if req.json:
        return req
    if long_fmt:
        req.cols = columns_from_long_format(long_fmt)
    else:
        if not fmt:
            fmt = START_FORMAT if req.start else (LONG_FORMAT if req.long else DEFAULT_FORMAT)
        req.cols = columns_from_format(fmt)
    return req


def _job_refs(value: str) -> list[JobRef]:
    """``-j``: ids, array tasks (``12_3``, ``12_[1-3,5]``); a step suffix (``.0``) is dropped."""
    refs = []
    for item in _split_ids(value):
        try:
            refs.append(parse_job_ref(item.split(".", 1)[0]))
        except ValueError:
            raise CommandError(f"Invalid job id: {item}") from None
    return refs


def _split_ids(value: str) -> list[str]:
    """Split on commas outside brackets: ``1,2_[3,5]`` -> ``1``, ``2_[3,5]``."""
    items, depth, current = [], 0, []
    for ch in value:
        if ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
            continue
        depth += ch == "["
        depth -= ch == "]"
        current.append(ch)
    items.append("".join(current).strip())
    return [i for i in items if i]


def _users(value: str | None) -> list[str]:
    """``-u``: names or uids; a name this host does not know is an error, as in Slurm."""
    import pwd

    users = []
    for item in _split(value):
        if item.isdigit():
            try:
                users.append(pwd.getpwuid(int(item)).pw_name)
            except KeyError:
                raise CommandError(f"Invalid user: {item}") from None
            continue
        try:
            pwd.getpwnam(item)
        except KeyError:
            raise CommandError(f"Invalid user: {item}") from None
        users.append(item)
    return users


def select(jobs: list[dict], req: Request) -> list[dict]:
    return sort_jobs([j for j in jobs if req.filters.keep(j)], req.sort)


def long_header(now: float) -> str:
    import time

    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))


def listing_query(req: Request) -> str:
    """The query string: the filters, and ``view=brief`` (only what squeue shows, see
    ``ctld.wire.BRIEF_FIELDS``) unless --json or an output path column needs the rest."""
    query = req.filters.query()
    if req.json or any(c.value in _PATH_VALUES for c in req.cols):
        return query
    return query + ("&" if query else "?") + "view=brief"


def fetch(req: Request) -> tuple[list[dict], float]:
    """Ask the controller; CommandError with Slurm's ``slurm_load_jobs error`` texts."""
    from muster.protocol.client import ApiError, ConnectError

    try:
        ctl = connect(PROG)
        answer = ctl.get("/v1/jobs" + listing_query(req))
    except ConnectError as e:
        raise CommandError(f"slurm_load_jobs error: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"slurm_load_jobs error: {e.message}", 1, raw=True) from None
    jobs = answer.get("jobs") or []
    return [j for j in jobs if isinstance(j, dict)], float(answer.get("now") or 0)


def to_json(jobs: list[dict], now: float) -> str:
    """``--json``: the jobs in the field names of Slurm's openapi job records most tools read."""
    import json

    from muster import __version__

    out = []
    for j in jobs:
        spec = _spec(j)
        limit = j.get("time_limit")
        out.append(
            {
                "account": j.get("account"),
                "batch_host": j.get("batch_host") or "",
                "comment": spec.get("comment") or "",
                "cpus": j.get("num_cpus"),
                "current_working_directory": spec.get("workdir"),
                "dependency": spec.get("dependency") or "",
                "end_time": int(j.get("end_time") or 0),
                "exit_code": j.get("exit_code") or 0,
                "group_id": j.get("gid"),
                "job_id": j.get("job_id"),
                "array_job_id": j.get("array_job_id") or 0,
                "array_task_id": j.get("array_task_id"),
                "array_max_tasks": j.get("array_throttle") or 0,
                "array_task_string": j.get("array_tasks_text") or "",
                "job_state": long_state(j),
                "name": spec.get("name"),
                "node_count": j.get("num_nodes"),
                "nodes": j.get("nodelist") or "",
                "partition": j.get("partition"),
                "priority": j.get("priority"),
                "qos": j.get("qos"),
                "restart_cnt": j.get("restart_count") or 0,
                "standard_error": j.get("stderr_path") or "",
                "standard_input": spec.get("stdin") or "/dev/null",
                "standard_output": j.get("stdout_path") or "",
                "start_time": int(j.get("start_time") or 0),
                "state_reason": j.get("reason") or "None",
                "submit_time": int(j.get("submit_time") or 0),
                "tasks": j.get("num_tasks"),
                "time_limit": None if limit is None else int(limit) // 60,
                "tres_alloc_str": j.get("tres") or "",
                "user_id": j.get("uid"),
                "user_name": j.get("user"),
            }
        )
    doc = {
        "meta": {
            "plugin": {"type": "muster", "name": f"muster {__version__}"},
            "Slurm": {"release": "22.05.8"},
        },
        "errors": [],
        "jobs": out,
    }
    return json.dumps(doc, indent=2)


def run_once(req: Request) -> list[str]:
    jobs, now = fetch(req)
    chosen = select(jobs, req)
    if not req.expand:
        chosen = merge_array_rows(chosen)
    if req.json:
        return [to_json(chosen, now)]
    lines = render(chosen, req.cols, req.header)
    if req.long or req.iterate is not None:
        # The time is the controller's, so the command itself never reads the clock.
        lines.insert(0, long_header(now))
    return lines


def main(argv: list[str] | None = None) -> int:
    try:
        req = parse_args(argv_or_sys(argv), dict(os.environ))
        if isinstance(req, str):
            sys.stdout.write(req)
            return 0
        if not isinstance(req, Request):
            return req.run()  # squeue -s: the steps
        if req.iterate is None:
            print_lines(run_once(req))
            return 0
        import time

        while True:
            print_lines(run_once(req) + [""])
            time.sleep(req.iterate)
    except CommandError as e:
        return report(PROG, e)
    except KeyboardInterrupt:
        return 0


USAGE = """\
Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]
              [-n name] [-o format] [--only-job-state] [-p partitions]
              [--qos qos] [--reservation reservation] [--sort fields] [--start]
              [--step step_id] [-t states] [-u user_name] [--usage]
              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]
              [--json] [-ahjlrsv]
"""

HELP = """\
Usage: squeue [OPTIONS]
  -A, --account=account(s)        comma separated list of accounts
                                  to view, default is all accounts
  -a, --all                       display jobs in hidden partitions
  -h, --noheader                  no headers on output
  -i, --iterate=seconds           specify an interation period
  -j, --job=job(s)                comma separated list of jobs IDs
                                  to view, default is all
      --json                      Produce JSON output
  -l, --long                      long report
      --me                        equivalent to --user=<current user>
  -n, --name=job_name(s)          comma separated list of job names to view
  -o, --format=format             format specification
  -O, --Format=format             format specification
  -p, --partition=partition(s)    comma separated list of partitions
                                  to view, default is all partitions
  -q, --qos=qos(s)                comma separated list of qos's
                                  to view, default is all qos's
  -R, --reservation=name          reservation to view, default is all
  -r, --array                     display one job array element per line
  -S, --sort=fields               comma separated list of fields to sort on
      --start                     print expected start times of pending jobs
  -t, --states=states             comma separated list of states to view,
                                  default is pending and running,
                                  '--states=all' reports all states
  -u, --user=user_name(s)         comma separated list of users to view
  -v, --verbose                   verbosity level
  -V, --version                   output version information and exit
  -w, --nodelist=hostlist         list of nodes to view, default is
                                  all nodes

Help options:
  --help                          show this help message
  --usage                         display a brief summary of squeue options
"""


if __name__ == "__main__":
    sys.exit(main())
