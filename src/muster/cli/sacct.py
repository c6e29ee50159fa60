"""sacct: accounting records of jobs, their attempts and steps, as Slurm's sacct prints them.

Records come from the controller (``GET /v1/accounting/jobs``), which reads the store; this
module chooses the window and the filters, and formats.

* Window: without ``-S`` records since midnight today; with ``-j`` and no ``-S``, all time;
  ``-E`` defaults to now. With ``-s`` and no ``-S`` the start is *now* (Slurm's quirk: ``sacct
  -s CA,F`` alone prints nothing), and a record matches when it was in one of the states
  during the window.
* Users: your own records, unless ``-a``, ``-u`` or you are root.
* Rows: a job (its latest attempt; every attempt with ``-D``), then its steps (``.batch``,
  ``.0``, ...) unless ``-X``.
* Columns: ``--format``/``-o`` names (case-blind, ``Name%width``), default
  ``JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode`` (``$SACCT_FORMAT``), ``-b``
  brief, ``-l`` long. A field given a width is right-justified; values longer than their
  column are cut with a ``+``. ``-p``/``-P`` print parsable rows (``--delimiter``).
"""

from __future__ import annotations

import os
import sys
import time

from muster.cli.acctfmt import call, query_string
from muster.cli.common import (
    CommandError,
    argv_or_sys,
    current_user,
    print_lines,
    report,
    usage_error,
    version_line,
)
from muster.slurm.columns import Printer, field_list
from muster.slurm.jobarrays import merge_array_records
from muster.slurm.options import NO_ARG, Opt, OptionError, OptionTable, getopt

TYPE_CHECKING = False  # typing and collections.abc cost a command milliseconds to import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PROG = "sacct"

DEFAULT_FORMAT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
BRIEF_FORMAT = "JobID,State,ExitCode"
LONG_FORMAT = (
    "JobID,JobIDRaw,JobName,Partition,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,"
    "MaxRSSNode,MaxRSSTask,AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,"
    "MinCPUTask,AveCPU,NTasks,AllocCPUS,Elapsed,State,ExitCode,AveCPUFreq,ReqCPUFreqMin,"
    "ReqCPUFreqMax,ReqCPUFreqGov,ReqMem,ConsumedEnergy,MaxDiskRead,MaxDiskReadNode,"
    "MaxDiskReadTask,AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,AveDiskWrite,"
    "ReqTRES,AllocTRES,TRESUsageInAve,TRESUsageInMax,TRESUsageInMaxNode,TRESUsageInMaxTask,"
    "TRESUsageInMin,TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutMax,"
    "TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutAve,TRESUsageOutTot"
)

OPTIONS: tuple[Opt, ...] = (
    Opt("allusers", "a", NO_ARG),
    Opt(("accounts", "account"), "A"),
    Opt("brief", "b", NO_ARG),
    Opt("completion", "c", NO_ARG),
    Opt("duplicates", "D", NO_ARG),
    Opt("delimiter"),
    Opt("starttime", "S"),
    Opt("endtime", "E"),
    Opt("helpformat", "e", NO_ARG),
    Opt("help", "h", NO_ARG),
    Opt("jobs", "j"),
    Opt("long", "l", NO_ARG),
    Opt("allocations", "X", NO_ARG),
    Opt("noheader", "n", NO_ARG),
    Opt("format", "o"),
    Opt("parsable", "p", NO_ARG),
    Opt("parsable2", "P", NO_ARG),
    Opt("partition", "r"),
    Opt("state", "s"),
    Opt(("user", "uid"), "u"),
    Opt("units"),
    Opt("usage", None, NO_ARG),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("name"),
    Opt("qos", "q"),
    Opt("nodelist", "N"),
    Opt("truncate", "T", NO_ARG),
    Opt("json", None, NO_ARG),
    Opt("clusters", "M"),
    Opt("local", "L", NO_ARG),
    Opt("array", None, NO_ARG),
    Opt("noconvert", None, NO_ARG),
    Opt("group", "g"),
)


# --- values -------------------------------------------------------------------------------------


def _ts(epoch: object, none: str = "Unknown") -> str:
    if not epoch:
        return none
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(epoch)))  # type: ignore[arg-type]


def _hms(seconds: object) -> str:
    if seconds is None or seconds == "":
        return ""
    s = int(seconds)  # type: ignore[call-overload]
    days, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return f"{days}-{h:02d}:{m:02d}:{sec:02d}" if days else f"{h:02d}:{m:02d}:{sec:02d}"


def _kb(kb: object, units: str | None) -> str:
    """MaxRSS: kilobytes as Slurm prints them (``1180K``), or in ``--units``."""
    if kb is None or kb == "":
        return ""
    if units:
        return _mem(float(kb) / 1024, units)  # type: ignore[arg-type]
    return f"{int(kb)}K"  # type: ignore[call-overload]


def _cpu(seconds: object) -> str:
    """UserCPU/SystemCPU/TotalCPU as Slurm prints CPU time: ``MM:SS.mmm`` under an hour,
    ``HH:MM:SS`` under a day, ``D-HH:MM:SS`` beyond."""
    if seconds is None or seconds == "":
        return ""
    total = float(seconds)  # type: ignore[arg-type]
    if total < 3600:
        m, sec = divmod(total, 60)
        whole = int(sec)
        return f"{int(m):02d}:{whole:02d}.{int(round((sec - whole) * 1000)) % 1000:03d}"
    return _hms(int(total))


def _mem(mb: object, units: str | None) -> str:
    if mb is None or mb == "":
        return ""
    value = float(mb)  # type: ignore[arg-type]
    if units:
        factor = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}.get(units.upper()[:1], 1)
        shown = value / factor
        return f"{shown:.2f}{units.upper()[:1]}" if shown != int(shown) else f"{int(shown)}{units.upper()[:1]}"
    if value and value % 1024 == 0:
        return f"{int(value // 1024)}G"
    return f"{int(value)}M"


def _start(r: dict[str, Any]) -> str:
    if r.get("start_none"):
        return "None"
    return _ts(r.get("start"))


def _timelimit(r: dict[str, Any]) -> str:
    if r.get("is_step"):
        return ""
    limit = r.get("time_limit")
    return "UNLIMITED" if limit is None else _hms(limit)


def _replaced(r: dict[str, Any], _u: str | None) -> str:
    """``node2>node4@2026-12-07T16:54:37(not_responding)``, one per replacement, by commas."""
    return ",".join(
        f"{e.get('old')}>{e.get('new')}@{_ts(e.get('time'))}({e.get('cause')})" for e in r.get("replacements") or []
    )


def _text(key: str) -> Callable[[dict[str, Any], str | None], str]:
    return lambda r, _u: "" if r.get(key) is None else str(r.get(key))


def _blank(_r: dict[str, Any], _u: str | None) -> str:
    return ""


# name -> (default width; negative: left-justified), value
FIELDS: dict[str, tuple[str, int, Callable[[dict[str, Any], str | None], str]]] = {}


def _field(name: str, width: int, fn: Callable[[dict[str, Any], str | None], str]) -> None:
    FIELDS[name.lower()] = (name, width, fn)


for _name, _width, _fn in (
    ("JobID", -12, _text("job_id_text")),
    ("JobIDRaw", -12, _text("job_id_raw")),
    ("JobName", 10, _text("name")),
    ("Partition", 10, _text("partition")),
    ("Account", 10, _text("account")),
    ("AllocCPUS", 10, _text("ncpus")),
    ("NCPUS", 10, _text("ncpus")),
    ("AllocNodes", 10, lambda r, u: str(r.get("nnodes") if r.get("alloc_tres") else 0)),
    ("AllocTRES", 10, _text("alloc_tres")),
    ("ReqTRES", 10, _text("req_tres")),
    ("ReqCPUS", 8, _text("req_cpus")),
    ("ReqMem", 10, lambda r, u: _mem(r.get("req_mem"), u)),
    ("ReqNodes", 8, _text("req_nodes")),
    ("Cluster", 10, _text("cluster")),
    ("Comment", 15, _text("comment")),
    ("SystemComment", 15, _text("system_comment")),
    ("Constraints", 19, _text("constraints")),
    ("DerivedExitCode", 15, _text("derived_exit_code")),
    ("Elapsed", 10, lambda r, u: _hms(r.get("elapsed"))),
    ("ElapsedRaw", 10, _text("elapsed")),
    ("Eligible", 19, lambda r, u: _ts(r.get("eligible"))),
    ("End", 19, lambda r, u: _ts(r.get("end"))),
    ("ExitCode", 8, _text("exit_code")),
    ("GID", 6, _text("gid")),
    ("Group", 9, _text("group")),
    ("NNodes", 8, _text("nnodes")),
    ("NodeList", 15, _text("nodelist")),
    ("NTasks", 8, _text("ntasks")),
    ("Priority", 10, _text("priority")),
    ("QOS", 10, _text("qos")),
    ("Reason", 20, lambda r, u: "" if r.get("is_step") else str(r.get("reason") or "None")),
    ("Reservation", 20, _text("reservation")),
    ("Restarts", 8, _text("restart_count")),
    ("Start", 19, lambda r, u: _start(r)),
    ("State", 10, _text("state_text")),
    ("Submit", 19, lambda r, u: _ts(r.get("submit"))),
    ("Suspended", 10, lambda r, u: _hms(r.get("suspended") or 0)),  # scontrol suspend's time
    ("Timelimit", 10, lambda r, u: _timelimit(r)),
    (
        "TimelimitRaw",
        15,
        lambda r, u: (
            ""
            if r.get("is_step")
            else ("UNLIMITED" if r.get("time_limit") is None else str(int(r["time_limit"]) // 60))
        ),
    ),
    ("UID", 6, _text("uid")),
    ("User", 9, _text("user")),
    ("WorkDir", 15, _text("workdir")),
    ("Attempt", 8, _text("attempt")),
    # Measured by the agent (getrusage of the batch script and what it waited for), on the
    # .batch row; the job's line totals its steps' CPU, as Slurm's does.
    ("MaxRSS", 10, lambda r, u: _kb(r.get("max_rss_kb"), u)),
    ("AveRSS", 10, lambda r, u: _kb(r.get("ave_rss_kb", r.get("max_rss_kb")), u)),
    (
        "MaxRSSNode",
        10,
        lambda r, u: "" if r.get("max_rss_kb") is None else str(r.get("max_rss_node") or r.get("nodelist") or ""),
    ),
    ("MaxRSSTask", 10, lambda r, u: "" if r.get("max_rss_kb") is None else str(r.get("max_rss_task", 0))),
    ("UserCPU", 10, lambda r, u: _cpu(r.get("user_cpu"))),
    ("SystemCPU", 10, lambda r, u: _cpu(r.get("system_cpu"))),
    (
        "TotalCPU",
        10,
        lambda r, u: _cpu(
            None if r.get("user_cpu") is None else float(r["user_cpu"]) + float(r.get("system_cpu") or 0)
        ),
    ),
    # Allocated CPUs times elapsed time, as Slurm defines CPUTime.
    ("CPUTime", 10, lambda r, u: _hms(int(r.get("elapsed") or 0) * int(r.get("ncpus") or 0))),
    ("CPUTimeRAW", 10, lambda r, u: str(int(r.get("elapsed") or 0) * int(r.get("ncpus") or 0))),
    # Goodput across the job's attempts (muster's own fields; docs/training.md). Empty
    # where the job reported no progress (only GPUTime is known then).
    ("GPUTime", 10, lambda r, u: _hms(r.get("gpu_seconds"))),
    ("GPUTimeRAW", 10, _text("gpu_seconds")),
    ("StartupTime", 11, lambda r, u: _hms(r.get("startup"))),
    ("LostTime", 10, lambda r, u: _hms(r.get("lost"))),
    ("LostPerAttempt", 14, _text("lost_per_attempt")),
    ("ProductiveTime", 14, lambda r, u: _hms(r.get("productive"))),
    ("Goodput", 8, lambda r, u: "" if r.get("goodput") is None else f"{100 * float(r['goodput']):.1f}%"),
    ("LastStep", 8, _text("last_step")),
    # Failed nodes replaced in the running allocation, same attempt (docs/recovery.md).
    ("Replaced", 40, _replaced),
    ("ReplacedCount", 13, lambda r, u: str(len(r.get("replacements") or []))),
    ("LastCheckpoint", 14, _text("last_ckpt")),
    # What a preempted attempt lost: GPU time since its last checkpoint (docs/preemption.md).
    ("LostWork", 10, lambda r, u: _hms(r.get("lost_work"))),
    ("LostWorkRAW", 11, lambda r, u: "" if r.get("lost_work") is None else str(int(r["lost_work"]))),
):
    _field(_name, _width, _fn)

# Statistics muster does not gather (virtual memory, pages, I/O, energy, per-task minima):
# known names with empty values, in the widths sacct gives them.
for _name, _width in (
    ("MaxVMSize", 10),
    ("MaxVMSizeNode", 14),
    ("MaxVMSizeTask", 14),
    ("AveVMSize", 10),
    ("MaxPages", 8),
    ("MaxPagesNode", 12),
    ("MaxPagesTask", 14),
    ("AvePages", 10),
    ("MinCPU", 10),
    ("MinCPUNode", 10),
    ("MinCPUTask", 10),
    ("AveCPU", 10),
    ("AveCPUFreq", 10),
    ("ReqCPUFreqMin", 13),
    ("ReqCPUFreqMax", 13),
    ("ReqCPUFreqGov", 13),
    ("ReqCPUFreq", 13),
    ("ConsumedEnergy", 14),
    ("ConsumedEnergyRaw", 17),
    ("MaxDiskRead", 12),
    ("MaxDiskReadNode", 15),
    ("MaxDiskReadTask", 15),
    ("AveDiskRead", 14),
    ("MaxDiskWrite", 12),
    ("MaxDiskWriteNode", 16),
    ("MaxDiskWriteTask", 16),
    ("AveDiskWrite", 14),
    ("TRESUsageInAve", 14),
    ("TRESUsageInMax", 14),
    ("TRESUsageInMaxNode", 18),
    ("TRESUsageInMaxTask", 18),
    ("TRESUsageInMin", 14),
    ("TRESUsageInMinNode", 18),
    ("TRESUsageInMinTask", 18),
    ("TRESUsageInTot", 14),
    ("TRESUsageOutMax", 15),
    ("TRESUsageOutMaxNode", 19),
    ("TRESUsageOutMaxTask", 19),
    ("TRESUsageOutAve", 15),
    ("TRESUsageOutTot", 15),
    ("AssocID", 10),
    ("WCKey", 10),
    ("WCKeyID", 10),
    ("Layout", 8),
    ("AdminComment", 15),
    ("McsLabel", 10),
    ("Container", 19),
    ("DBIndex", 10),
    ("Flags", 20),
    ("Planned", 10),
    ("PlannedCPU", 10),
    ("PlannedCPURAW", 13),
    ("ReservationId", 13),
    ("SubmitLine", 20),
    ("QOSRAW", 10),
    ("TRESUsageInMaxNode", 18),
):
    _field(_name, _width, _blank)


def parse_format(text: str) -> list[tuple[str, int, Callable[[dict[str, Any], str | None], str]]]:
    """``JobID,JobName%30,...`` -> columns; raises CommandError for unknown names."""
    return field_list(text, FIELDS, 'Invalid field requested: "{}"')


# --- arguments ----------------------------------------------------------------------------------


class Request:
    __slots__ = ("cols", "printer", "params", "allocations", "units", "json", "array", "steps")

    def __init__(self) -> None:
        self.cols: list[Any] = []
        self.printer = Printer()
        self.params: dict[str, object] = {}
        self.allocations = False
        self.array = False  # --array: every pending array task on its own row
        self.units: str | None = None
        self.json = False
        # -j N.S: job N's rows narrowed to these steps (``steps_asked``)
        self.steps: dict[str, set[str]] = {}


def parse_time(text: str, now: float, end_of_day: bool = False) -> float:
    """sacct's -S/-E: Slurm's time formats (``core.timefmt.parse_timestamp``); a time of day
    or a date without a year looks back (sacct looks into the past): "10:00" is this
    morning's, "12/24" last Christmas Eve in January."""
    from muster.core.timefmt import TimeFormatError, parse_timestamp

    try:
        return parse_timestamp(text, now, past=True)
    except TimeFormatError:
        raise CommandError(f"Invalid time specification: {text}") from None


def midnight(now: float) -> float:
    lt = time.localtime(now)
    return time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))


def parse_args(argv: list[str], environ: dict[str, str], now: float) -> Request | str:
    table = OptionTable(OPTIONS)
    parsed, operands = getopt(argv, table)
    opts: dict[str, str | None] = {}
    for opt, value in parsed:
        if opt.key == "jobs" and opts.get("jobs"):
            value = f"{opts['jobs']},{value}"  # -j A -j B: both (submitit asks so)
        opts[opt.key] = value
    if "version" in opts:
        return version_line() + "\n"
    if "help" in opts or "usage" in opts:
        return HELP
    if "helpformat" in opts:
        names = sorted({n for n, _w, _f in FIELDS.values()})
        rows = ["".join(f"{n:<20}" for n in names[i : i + 4]).rstrip() for i in range(0, len(names), 4)]
        return "\n".join(rows) + "\n"
    req = Request()
    fmt = opts.get("format")
    if "brief" in opts:
        fmt = BRIEF_FORMAT
    elif "long" in opts and fmt is None:
        fmt = LONG_FORMAT
    if fmt is None:
        fmt = environ.get("SACCT_FORMAT") or DEFAULT_FORMAT
    req.cols = parse_format(fmt)
    parsable2 = "parsable2" in opts
    req.printer = Printer(
        parsable="parsable" in opts or parsable2,
        trailing="parsable" in opts and not parsable2,
        delimiter=opts.get("delimiter") or "|",
        header="noheader" not in opts,
    )
    req.allocations = "allocations" in opts
    req.array = "array" in opts
    req.units = opts.get("units")
    if req.units is not None and req.units.upper() not in ("K", "M", "G", "T", "P"):
        raise CommandError(f"Invalid unit type: {req.units} (use K, M, G, T or P)")
    req.json = "json" in opts
    p = req.params
    jobs = opts.get("jobs")
    if jobs:
        from muster.core.arrays import parse_job_step_ref

        ids = [j.strip() for j in jobs.split(",") if j.strip()]
        for j in ids:
            try:
                parse_job_step_ref(j)
            except ValueError:
                raise CommandError(f"Invalid job id: {j}") from None
        p["job_id"] = ids
        req.steps = steps_asked(ids)
    states = opts.get("state")
    if states:
        from muster.core.statenames import job_state_name

        names = []
        for s in (x.strip() for x in states.split(",") if x.strip()):
            long = job_state_name(s)
            if long is None:
                raise CommandError(f"Invalid state: {s}")
            if long not in names:
                names.append(long)
        p["state"] = names
    # sacct(1)'s DEFAULT TIME WINDOW: with -j the start is Epoch 0 (-s or not); with -s
    # alone it is now; otherwise midnight. With -s the end defaults to the start, or now.
    start_text, end_text = opts.get("starttime"), opts.get("endtime")
    if start_text is not None:
        p["start"] = parse_time(start_text, now)
    elif states and not jobs:
        p["start"] = now
    elif not jobs:
        p["start"] = midnight(now)
    if end_text is not None:
        p["end"] = parse_time(end_text, now)
    elif states and start_text is not None:
        p["end"] = p["start"]
    elif not jobs or start_text is not None or states:
        p["end"] = now
    for key, param in (
        ("accounts", "account"),
        ("partition", "partition"),
        ("qos", "qos"),
        ("name", "name"),
        ("nodelist", "nodelist"),
    ):
        if opts.get(key):
            p[param] = [x for x in str(opts[key]).split(",") if x]
    users = opts.get("user")
    if users:
        p["user"] = [_user_name(u) for u in users.split(",") if u]
    elif "allusers" not in opts and os.getuid() != 0:
        p["user"] = [current_user()]
    if "duplicates" in opts:
        p["duplicates"] = 1
    if operands:
        raise CommandError(f"Unknown arguments: {' '.join(operands)}")
    return req


def _user_name(text: str) -> str:
    if text.isdigit():
        import pwd

        try:
            return pwd.getpwuid(int(text)).pw_name
        except KeyError:
            return text
    return text


# --- output ----------------------------------------------------------------------------------------


def render(records: list[dict[str, Any]], req: Request) -> list[str]:
    rows: list[list[str]] = []
    for rec in records:
        for r in [rec] + ([] if req.allocations else list(rec.get("steps") or [])):
            row = []
            for _name, _w, fn in req.cols:
                row.append(fn(r, req.units))
            rows.append(row)
    columns = [(name, w) for name, w, _fn in req.cols]
    return req.printer.lines(columns, rows)


def steps_asked(ids: list[str]) -> dict[str, set[str]]:
    """The jobs of ``-j`` asked for by step only (``12.0``, ``12.batch``), by job: their
    step ids. A job also named whole (``-j 12,12.0``) is not narrowed."""
    whole = {i for i in ids if "." not in i}
    out: dict[str, set[str]] = {}
    for i in ids:
        job, dot, step = i.partition(".")
        if dot and job not in whole:
            out.setdefault(job, set()).add(step)
    return out


def narrow_to_steps(records: list[dict[str, Any]], steps: dict[str, set[str]]) -> list[dict[str, Any]]:
    """``sacct -j N.S`` prints step N.S's row alone, not the job's (sacct(1)): each record of
    a job asked for by step keeps only those steps (as step rows), and its own row goes."""
    if not steps:
        return records
    out = []
    for rec in records:
        keys = {str(rec.get("job_id_text")), str(rec.get("job_id_raw")), str(rec.get("job_id"))}
        wanted = next((steps[k] for k in keys if k in steps), None)
        if wanted is None:
            out.append(rec)
            continue
        for step in rec.get("steps") or []:
            if str(step.get("job_id_text", "")).rpartition(".")[2] in wanted:
                out.append({**step, "steps": []})
    return out


def run(req: Request) -> list[str]:
    answer = call(PROG, "GET", "/v1/accounting/jobs" + query_string(req.params))
    records = answer.get("jobs") or []
    if req.json:
        from muster.slurm.slurmjson import sacct_document

        return [sacct_document(records, ["sacct", "--json"])]
    if not req.array:
        records = merge_array_records(records)
    return render(narrow_to_steps(records, req.steps), req)


def main(argv: list[str] | None = None) -> int:
    try:
        req = parse_args(argv_or_sys(argv), dict(os.environ), time.time())
        if isinstance(req, str):
            sys.stdout.write(req)
            return 0
        print_lines(run(req))
        return 0
    except OptionError as e:
        return usage_error(PROG, str(e))
    except CommandError as e:
        return report(PROG, e)
    except KeyboardInterrupt:
        return 1


HELP = """\
sacct [<OPTION>]
    Valid <OPTION> values are:
     -a, --allusers:   Display jobs for all users.
     -A, --accounts:   Use this comma separated list of accounts to select jobs.
         --array:      Show each pending array task on its own line (by default they
                       share one, 123_[5-99%10], as Slurm's database keeps them).
     -b, --brief:      Equivalent to '--format=jobid,state,exitcode'.
     -D, --duplicates: Also show records of earlier attempts (requeued jobs).
         --delimiter:  The delimiter used with --parsable/--parsable2 (default '|').
     -e, --helpformat: Print the fields that can be given to --format.
     -E, --endtime:    Select jobs eligible before this time (default: now).
     -j, --jobs:       Display information about these jobs (all time by default).
         --json:       Print the records as JSON, in the layout of Slurm's
                       data_parser v0.0.40 (Slurm 23.11/24.05).
     -l, --long:       Equivalent to a long list of fields.
     -n, --noheader:   No header lines.
     -N, --nodelist:   Display jobs that ran on any of these nodes.
         --name:       Display jobs that have any of these names.
     -o, --format:     Comma separated list of fields (Name%width).
     -p, --parsable:   Output delimited by '|', with a trailing '|'.
     -P, --parsable2:  Output delimited by '|', without a trailing '|'.
     -q, --qos:        Only send data about jobs using these QOS.
     -r, --partition:  Only jobs of these partitions.
     -s, --state:      Select jobs by state during the window (CD, CA, F, TO, NF, PD, R, ...).
     -S, --starttime:  Select jobs eligible after this time (default: midnight today).
     -u, --user:       Use this comma separated list of users.
         --units=[KMGTP]: Display memory in this unit.
     -V, --version:    Print the version.
     -X, --allocations: Only show allocations, not steps.
"""


if __name__ == "__main__":
    sys.exit(main())
