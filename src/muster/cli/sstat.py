"""sstat: what a running job's steps use right now, as Slurm's sstat prints it.

``sstat -j JOB[.STEP][,...]`` asks the controller (``GET /v1/jobs/N/stats``), which asks the
agents of the job's nodes for their tasks' processes (``agent.stepstats``: memory, CPU time,
page faults, disk I/O read from ``/proc``), and prints one row per step. The Max*/Min*/Ave*
fields are over the step's tasks, with the node and task where the maximum or minimum was
seen. Without a step, the lowest numbered normal step is shown (``-a``: every running step,
``batch`` included); ``N.batch`` is the batch script. ``-i`` prints JobID, Nodelist, Pids;
``-o`` chooses fields (``-e`` lists them), ``-p``/``-P`` parsable, ``-n`` no header.

Fields muster does not measure (CPU frequency, energy) print Slurm's zero values.
"""

from __future__ import annotations

import sys

from muster.cli.acctfmt import call
from muster.cli.common import CommandError, argv_or_sys, info_text, print_lines, report, usage_error
from muster.slurm.columns import Printer, field_list
from muster.slurm.options import NO_ARG, Opt, OptionError, OptionTable, getopt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PROG = "sstat"

DEFAULT_FORMAT = (
    "JobID,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,"
    "MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks,"
    "AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ConsumedEnergy,MaxDiskRead,"
    "MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,"
    "AveDiskWrite,TRESUsageInAve,TRESUsageInMax,TRESUsageInMaxNode,TRESUsageInMaxTask,"
    "TRESUsageInMin,TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutAve,"
    "TRESUsageOutMax,TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutMin,"
    "TRESUsageOutMinNode,TRESUsageOutMinTask,TRESUsageOutTot"
)
PID_FORMAT = "JobID,Nodelist,Pids"

OPTIONS: tuple[Opt, ...] = (
    Opt("allsteps", "a", NO_ARG),
    Opt(("format", "fields"), "o"),
    Opt("help", "h", NO_ARG),
    Opt("helpformat", "e", NO_ARG),
    Opt("jobs", "j"),
    Opt("noconvert", None, NO_ARG),
    Opt("noheader", "n", NO_ARG),
    Opt("parsable", "p", NO_ARG),
    Opt("parsable2", "P", NO_ARG),
    Opt("pidformat", "i", NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
)


# --- one step's figures, from its tasks (node, task, use) ----------------------------------------


class Step:
    """A step's tasks across its nodes: ``tasks`` is ``[(node, task, use)]``."""

    __slots__ = ("job_id", "step", "tasks")

    def __init__(self, job_id: int, step: object) -> None:
        self.job_id = job_id
        self.step = step
        self.tasks: list[tuple[str, int, dict[str, Any]]] = []

    @property
    def id_text(self) -> str:
        return f"{self.job_id}.{self.step}"

    def extreme(self, key: str, lowest: bool = False) -> tuple[float, str, int] | None:
        """The largest (or smallest) ``key`` among the tasks, with its node and task; ties go
        to the lowest task id."""
        if not self.tasks:
            return None
        ordered = sorted(self.tasks, key=lambda t: t[1])
        pick = (min if lowest else max)(ordered, key=lambda t: float(t[2].get(key) or 0))
        return float(pick[2].get(key) or 0), pick[0], pick[1]

    def total(self, key: str) -> float:
        return sum(float(t[2].get(key) or 0) for t in self.tasks)

    def average(self, key: str) -> float:
        return self.total(key) / len(self.tasks) if self.tasks else 0.0

    def nodes(self) -> list[str]:
        return sorted({t[0] for t in self.tasks})


def _kb(value: float) -> str:
    return f"{int(round(value))}K"


def _count(value: float) -> str:
    return str(int(round(value)))


def _bytes(value: float) -> str:
    """Disk bytes as Slurm's unit conversion prints them: ``512``, ``1.50K``, ``2.25M``."""
    units = ""
    for unit in ("K", "M", "G", "T", "P"):
        if value < 1024:
            break
        value /= 1024
        units = unit
    return f"{value:.2f}{units}" if units else str(int(value))


def _cpu(seconds: float) -> str:
    """CPU time as sstat prints it: ``MM:SS.mmm`` under an hour, ``[D-]HH:MM:SS`` beyond."""
    if seconds < 3600:
        m, sec = divmod(seconds, 60)
        whole = int(sec)
        return f"{int(m):02d}:{whole:02d}.{int(round((sec - whole) * 1000)) % 1000:03d}"
    days, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{days}-{h:02d}:{m:02d}:{s:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"


# Metric key -> (Slurm's word, formatter); TRESUsageIn* list them in this order.
_IN: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("cpu_s", "cpu", _cpu),
    ("energy", "energy", _count),
    ("read_bytes", "fs/disk", _count),
)
_IN += (("rss_kb", "mem", _kb), ("pages", "pages", _count), ("vmsize_kb", "vmem", _kb))
_OUT = (("energy", "energy", _count), ("write_bytes", "fs/disk", _count))


def _tres(metrics: tuple[Any, ...], what: str) -> Callable[[Step], str]:
    def value(s: Step) -> str:
        parts = []
        for key, word, fmt in metrics:
            if what == "tot":
                text = fmt(s.total(key))
            elif what == "ave":
                text = fmt(s.average(key))
            else:
                found = s.extreme(key, lowest=what.startswith("min"))
                if found is None:
                    return ""
                text = fmt(found[0]) if len(what) == 3 else (found[1] if what.endswith("node") else str(found[2]))
            parts.append(f"{word}={text}")
        return ",".join(parts)

    return value


def _max(key: str, fmt: Callable[[float], str], part: int = 0, lowest: bool = False) -> Callable[[Step], str]:
    def value(s: Step) -> str:
        found = s.extreme(key, lowest)
        if found is None:
            return ""
        return fmt(found[0]) if part == 0 else str(found[part])

    return value


def _ave(key: str, fmt: Callable[[float], str]) -> Callable[[Step], str]:
    return lambda s: fmt(s.average(key)) if s.tasks else ""


def _nodelist(s: Step) -> str:
    from muster.core.hostlist import compress

    return compress(s.nodes())


def _pids(s: Step) -> str:
    return ",".join(str(p) for _node, _task, use in sorted(s.tasks, key=lambda t: t[1]) for p in use.get("pids") or [])


# name -> (header, default width; negative: left-justified, value)
FIELDS: dict[str, tuple[str, int, Callable[[Step], str]]] = {}
for _name, _width, _fn in (
    ("AllocTRES", 30, lambda s: ""),
    ("AveCPU", 10, _ave("cpu_s", _cpu)),
    ("AveCPUFreq", 10, lambda s: "0"),
    ("AveDiskRead", 12, _ave("read_bytes", _bytes)),
    ("AveDiskWrite", 12, _ave("write_bytes", _bytes)),
    ("AvePages", 10, _ave("pages", _count)),
    ("AveRSS", 10, _ave("rss_kb", _kb)),
    ("AveVMSize", 10, _ave("vmsize_kb", _kb)),
    ("ConsumedEnergy", 14, lambda s: "0"),
    ("ConsumedEnergyRaw", 17, lambda s: "0"),
    ("JobID", -12, lambda s: s.id_text),
    ("MaxDiskRead", 12, _max("read_bytes", _bytes)),
    ("MaxDiskReadNode", 15, _max("read_bytes", _bytes, 1)),
    ("MaxDiskReadTask", 15, _max("read_bytes", _bytes, 2)),
    ("MaxDiskWrite", 12, _max("write_bytes", _bytes)),
    ("MaxDiskWriteNode", 16, _max("write_bytes", _bytes, 1)),
    ("MaxDiskWriteTask", 16, _max("write_bytes", _bytes, 2)),
    ("MaxPages", 8, _max("pages", _count)),
    ("MaxPagesNode", 12, _max("pages", _count, 1)),
    ("MaxPagesTask", 12, _max("pages", _count, 2)),
    ("MaxRSS", 10, _max("rss_kb", _kb)),
    ("MaxRSSNode", 10, _max("rss_kb", _kb, 1)),
    ("MaxRSSTask", 10, _max("rss_kb", _kb, 2)),
    ("MaxVMSize", 10, _max("vmsize_kb", _kb)),
    ("MaxVMSizeNode", 14, _max("vmsize_kb", _kb, 1)),
    ("MaxVMSizeTask", 14, _max("vmsize_kb", _kb, 2)),
    ("MinCPU", 10, _max("cpu_s", _cpu, 0, True)),
    ("MinCPUNode", 10, _max("cpu_s", _cpu, 1, True)),
    ("MinCPUTask", 10, _max("cpu_s", _cpu, 2, True)),
    ("Nodelist", 20, _nodelist),
    ("NTasks", 8, lambda s: str(len(s.tasks))),
    ("Pids", 20, _pids),
    ("ReqCPUFreq", 13, lambda s: "Unknown"),
    ("ReqCPUFreqMin", 13, lambda s: "Unknown"),
    ("ReqCPUFreqMax", 13, lambda s: "Unknown"),
    ("ReqCPUFreqGov", 13, lambda s: "Unknown"),
    ("TRESUsageInAve", 14, _tres(_IN, "ave")),
    ("TRESUsageInMax", 14, _tres(_IN, "max")),
    ("TRESUsageInMaxNode", 18, _tres(_IN, "maxnode")),
    ("TRESUsageInMaxTask", 18, _tres(_IN, "maxtask")),
    ("TRESUsageInMin", 14, _tres(_IN, "min")),
    ("TRESUsageInMinNode", 18, _tres(_IN, "minnode")),
    ("TRESUsageInMinTask", 18, _tres(_IN, "mintask")),
    ("TRESUsageInTot", 14, _tres(_IN, "tot")),
    ("TRESUsageOutAve", 15, _tres(_OUT, "ave")),
    ("TRESUsageOutMax", 15, _tres(_OUT, "max")),
    ("TRESUsageOutMaxNode", 19, _tres(_OUT, "maxnode")),
    ("TRESUsageOutMaxTask", 19, _tres(_OUT, "maxtask")),
    ("TRESUsageOutMin", 15, _tres(_OUT, "min")),
    ("TRESUsageOutMinNode", 19, _tres(_OUT, "minnode")),
    ("TRESUsageOutMinTask", 19, _tres(_OUT, "mintask")),
    ("TRESUsageOutTot", 15, _tres(_OUT, "tot")),
):
    FIELDS[_name.lower()] = (_name, _width, _fn)


def help_format() -> str:
    """``-e``: every field name, four to a line."""
    names = [header for header, _w, _fn in FIELDS.values()]
    lines = ["".join(f"{n:<20}" for n in names[i : i + 4]).rstrip() for i in range(0, len(names), 4)]
    return "\n".join(lines) + "\n"


# --- arguments ----------------------------------------------------------------------------------


class Request:
    __slots__ = ("targets", "all_steps", "cols", "printer")

    def __init__(self) -> None:
        self.targets: list[tuple[int, str | None]] = []  # (job, step text or None)
        self.all_steps = False
        self.cols: list[Any] = []
        self.printer = Printer()


def parse_targets(text: str) -> list[tuple[int, str | None]]:
    """``123,124.0,125.batch`` -> ``[(123, None), (124, "0"), (125, "batch")]``."""
    out: list[tuple[int, str | None]] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        job, dot, step = item.partition(".")
        if not job.isdigit() or (dot and not (step.isdigit() or step in ("batch", "extern"))):
            raise CommandError(f"Invalid job id: {item}")
        out.append((int(job), step if dot else None))
    return out


def parse_args(argv: list[str]) -> Request | str:
    parsed, operands = getopt(argv, OptionTable(OPTIONS))
    keys = {opt.key for opt, _ in parsed}
    text = info_text(keys, HELP, USAGE)
    if text is not None:
        return text
    if "helpformat" in keys:
        return help_format()
    req = Request()
    fmt = DEFAULT_FORMAT
    parsable = trailing = False
    header = True
    for opt, value in parsed:
        key = opt.key
        if key == "jobs":
            req.targets += parse_targets(value or "")
        elif key == "allsteps":
            req.all_steps = True
        elif key == "format":
            fmt = value or ""
        elif key == "pidformat":
            fmt = PID_FORMAT
        elif key == "noheader":
            header = False
        elif key == "parsable":
            parsable = trailing = True
        elif key == "parsable2":
            parsable, trailing = True, False
    for item in operands:  # Slurm takes a bare job id as -j's
        req.targets += parse_targets(item)
    if not req.targets:
        raise CommandError("You didn't give me any jobs to stat.")
    req.cols = field_list(fmt, FIELDS, 'Invalid field requested: "{}"')
    req.printer = Printer(parsable=parsable, trailing=trailing, header=header)
    return req


# --- asking and printing ------------------------------------------------------------------------


def steps_of(answer: dict[str, Any]) -> dict[str, Step]:
    """The controller's answer as steps, keyed by step id text (``0``, ``batch``)."""
    job_id = int(answer["job_id"])
    steps: dict[str, Step] = {}
    for node, found in sorted((answer.get("nodes") or {}).items()):
        for entry in found:
            key = str(entry.get("step"))
            step = steps.setdefault(key, Step(job_id, key))
            for task in entry.get("tasks") or []:
                step.tasks.append((node, int(task.get("task", 0)), task))
    return steps


def _order(key: str) -> tuple[int, int]:
    return (0, -2) if key == "batch" else (0, -1) if key == "extern" else (1, int(key))


def choose(steps: dict[str, Step], job_id: int, step: str | None, all_steps: bool) -> list[Step]:
    """The rows for one ``-j`` item (sstat(1)): the step named; without one the lowest
    numbered normal step, or with ``-a`` every running step."""
    if step is not None:
        if step not in steps:
            raise CommandError(f"StepId={job_id}.{step} not found running.")
        return [steps[step]]
    keys = sorted(steps, key=_order)
    if all_steps:
        return [steps[k] for k in keys]
    normal = [k for k in keys if k.isdigit()]
    if not normal:
        raise CommandError(f"no steps running for job {job_id}")
    return [steps[normal[0]]]


def run(req: Request) -> tuple[list[str], list[str]]:
    """The lines to print, and the errors met on the way (each item is asked on its own)."""
    rows: list[Step] = []
    errors: list[str] = []
    for job_id, step in req.targets:
        try:
            answer = call(PROG, "GET", f"/v1/jobs/{job_id}/stats")
            for node, why in sorted((answer.get("errors") or {}).items()):
                errors.append(f"node {node} did not say what job {job_id} uses: {why}")
            rows += choose(steps_of(answer), job_id, step, req.all_steps)
        except CommandError as e:
            errors.append(e.message)
    table = [[fn(s) for _h, _w, fn in req.cols] for s in rows]
    return req.printer.lines([(h, w) for h, w, _fn in req.cols], table), errors


def main(argv: list[str] | None = None) -> int:
    try:
        req = parse_args(argv_or_sys(argv))
        if isinstance(req, str):
            sys.stdout.write(req)
            return 0
        lines, errors = run(req)
    except OptionError as e:
        return usage_error(PROG, str(e))
    except CommandError as e:
        return report(PROG, e)
    except KeyboardInterrupt:
        return 1
    print_lines(lines)
    for message in errors:
        sys.stderr.write(f"{PROG}: error: {message}\n")
    return 1 if errors else 0


USAGE = """\
Usage: sstat [options] -j <job(.stepid)>
\tUse --help for help
"""

HELP = """\
sstat [<OPTION>] -j <job(.stepid)>
    Valid <OPTION> values are:
      -a, --allsteps:
                   Print all steps for the given job(s) when no step is
                   specified.
      -e, --helpformat:
                   Print a list of fields that can be specified with the
                   '--format' option
      -h, --help:  Print this description of use.
      -i, --pidformat:
                   Predefined format to list the pids running for each
                   job step.  (JobId,Nodes,Pids)
      -j, --jobs:
                   Format is <job(.step)>. Stat this job step
                   or comma-separated list of job steps. This option is
                   required.  The step portion will default to the lowest
                   numbered (not batch, extern, etc) step running if not
                   specified, unless the --allsteps flag is set where not
                   specifying a step will result in all running steps
                   to be displayed.
      --noconvert:
                   Don't convert units from their original type
                   (e.g. 2048M won't be converted to 2G).
      -n, --noheader:
                   No header will be added to the beginning of output.
                   The default is to print a header.
      -o, --format:
                   Comma separated list of fields. (use "--helpformat"
                   for a list of available fields).
      -p, --parsable: output will be '|' delimited with a '|' at the end
      -P, --parsable2: output will be '|' delimited without a '|' at the end
      --usage:     Display brief usage message.
      -v, --verbose:
                   Primarily for debugging purposes, report the state of
                   various variables during processing.
      -V, --version: Print version.
"""


if __name__ == "__main__":
    sys.exit(main())
