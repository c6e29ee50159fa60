"""squeue: show the queue, as Slurm's squeue does.

Rows are jobs as the controller sends them (``JobWire``, see docs/api.md); everything
here is formatting, filtering and sorting on the client, so the output can be checked
from dicts alone.

* Columns follow Slurm's ``-o`` letters (``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R`` by
  default) or ``-O`` names (``JobID,Name:30,State``); values longer than a column are
  cut to its width except node lists, as Slurm does. ``-o %all`` shows every field,
  ``|`` between them.
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

import sys

from muster.cli.common import (
    CommandError,
    argv_or_sys,
    current_user,
    info_text,
    long_running,
    no_operands,
    parse_iterate,
    print_lines,
    report,
)
from muster.cli.squeue_filters import DEFAULT_SORT, Filters, parse_states, sort_jobs
from muster.client.controller import connect, connect_message
from muster.client.sysenv import environ
from muster.slurm.argscan import NO_ARG, OPTIONAL, Opt, OptionError, OptionTable, getopt, option_error
from muster.slurm.columns import Column, render
from muster.slurm.jobarrays import merge_array_rows
from muster.slurm.squeue_fields import PATH_VALUES, columns_from_format, columns_from_long_format, job_keys, long_state

TYPE_CHECKING = False  # core.arrays is imported by -j alone
if TYPE_CHECKING:
    from typing import Any

    from muster.core.arrays import JobRef

PROG = "squeue"

DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"

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
            if not (value or "").strip():
                raise CommandError("Invalid job state specified: ")
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


def _job_refs(value: str) -> "list[JobRef]":
    """``-j``: ids, array tasks (``12_3``, ``12_[1-3,5]``); a step suffix (``.0``) is dropped."""
    from muster.core.arrays import parse_job_step_ref

    refs = []
    for item in _split_ids(value):
        try:
            refs.append(parse_job_step_ref(item)[0])
        except ValueError:
            raise CommandError(f"Invalid job id: {item}") from None
    if not refs:
        raise CommandError(f"Invalid job id: {value}")
    return refs


def _split_ids(value: str) -> list[str]:
    """Split on commas outside brackets: ``1,2_[3,5]`` -> ``1``, ``2_[3,5]``."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
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


def select(jobs: list[dict[str, "Any"]], req: Request, queried: bool = False) -> list[dict[str, "Any"]]:
    """The jobs shown, in order. ``queried``: ``jobs`` are the controller's answer to
    ``listing_query``, so only what that query could not say is checked here."""
    f = req.filters
    return sort_jobs(jobs if queried and f.by_query() else [j for j in jobs if f.keep(j)], req.sort)


def long_header(now: float) -> str:
    import time

    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))


def listing_query(req: Request) -> str:
    """The query string: the filters, and ``view=brief`` (only what squeue shows, see
    ``ctld.wire.BRIEF_FIELDS``) unless --json or an output path column needs the rest."""
    query = req.filters.query()
    if req.json or any(c.value in PATH_VALUES for c in req.cols):
        return query
    query += ("&" if query else "?") + "view=brief"
    fields = wanted_fields(req)
    return query + ("&fields=" + ",".join(fields) if fields else "")


def wanted_fields(req: Request) -> list[str] | None:
    """The brief keys this request reads (``squeue_fields.job_keys``): its columns, sort
    letters and filters, so that the controller sends those alone."""
    f = req.filters
    keys = [c.key for c in req.cols if c.key]
    # Sorting by %t reads the state, as %T does (squeue_filters.SORT_KEYS), not its code.
    keys += ["T" if k == "t" else k for k in (k.strip().lstrip("+-") for k in req.sort.split(","))]
    keys += (
        ["u"] * bool(f.users)
        + ["j"] * bool(f.names)
        + ["a"] * bool(f.accounts)
        + ["q"] * bool(f.qos)
        + ["v"] * bool(f.reservations)
    )
    keys += ["N"] * (f.nodes is not None)
    return job_keys(keys)


def fetch(req: Request) -> tuple[list[dict[str, "Any"]], float]:
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


def to_json(jobs: list[dict[str, "Any"]], now: float) -> str:
    """``--json``: the jobs in the layout of Slurm's data_parser v0.0.40 (``slurm.slurmjson``)."""
    from muster.slurm.slurmjson import document, squeue_job

    return document(["squeue", "--json"], [squeue_job(j, long_state(j)) for j in jobs])


def run_once(req: Request) -> list[str]:
    jobs, now = fetch(req)
    chosen = select(jobs, req, queried=True)
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
        req = parse_args(argv_or_sys(argv), environ())
        if isinstance(req, str):
            sys.stdout.write(req)
            return 0
        if not isinstance(req, Request):
            return req.run()  # squeue -s: the steps
        if req.iterate is None:
            print_lines(run_once(req))
            return 0
        import time

        long_running()
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
      --json                      Produce JSON output (Slurm's data_parser
                                  v0.0.40 layout)
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
