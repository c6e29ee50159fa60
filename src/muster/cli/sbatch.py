"""sbatch: submit a batch script, as Slurm's sbatch does.

The script comes from a file (its arguments follow it), from ``--wrap`` or from stdin.
Options come from three places and later ones win: the script's ``#SBATCH`` lines, the
``SBATCH_*`` environment variables, then the command line. The reply is
``Submitted batch job N`` (``N`` alone with ``--parsable``). Error texts and exit statuses
follow Slurm 22.05: 255 for a malformed option, 1 for a script or a submission that fails.

A plain submission (``sbatch --hold --wrap true``) is most of its time starting up, so
what only some submissions need is imported when they need it: ``hetargs`` for a ``:``,
``directives`` for a script with ``#SBATCH`` lines, the value parsers for a value.
"""

# No ``from __future__ import annotations`` here: sbatch's modules leave it out, which spares
# a plain submission the ``__future__`` module; names known only to type checkers are quoted.

import posix
import sys

from muster.cli.common import CommandError, argv_or_sys, exit_error_code, info_text, long_running, report
from muster.cli.containeropts import PYXIS_OPTIONS, spank_environment
from muster.client.controller import connect, connect_message
from muster.client.settings import load_settings
from muster.client.sysenv import environ
from muster.slurm.jobrequest import JobRequest
from muster.slurm.options import (
    JOB_OPTIONS,
    NO_ARG,
    UNHONOURED,
    Opt,
    OptionTable,
    Parsed,
    apply_job_options,
    env_options,
    finish_job_request,
    job_getopt,
)

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import TextIO

PROG = "sbatch"

# Slurm's text (ESLURM_PATHNAME_TOO_LONG) for a script over max_script_size.
TOO_LONG = "Pathname of a file, directory or other parameter too long"
SMALL_SCRIPT = 1024  # characters: a script this short is left to the controller's check
WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"

# sbatch's own options (not part of the job request).
SBATCH_OPTIONS: tuple[Opt, ...] = (
    Opt("wrap"),
    Opt("parsable", None, NO_ARG),
    Opt("wait", "W", NO_ARG, env=("SBATCH_WAIT",)),
    Opt("quiet", "Q", NO_ARG),
    Opt("verbose", "v", NO_ARG, env=("SBATCH_DEBUG",)),
    Opt("help", "h", NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("test-only", None, NO_ARG),
    *PYXIS_OPTIONS,  # pyxis's --container-*: the defaults of the job's sruns (cli.containeropts)
)

NO_SHEBANG = (
    "sbatch: error: This does not look like a batch script.  The first\n"
    "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
    "sbatch: error: For instance: #!/bin/sh\n"
)

# States after which a job will not run again (sbatch --wait returns then).
_ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "STOPPED"})


def table() -> OptionTable:
    return OptionTable(JOB_OPTIONS, SBATCH_OPTIONS)


class Submission:
    """Everything sbatch decided before talking to the controller."""

    __slots__ = ("spec", "components", "parsable", "wait", "quiet", "verbose", "test_only", "ignored", "clusters")

    def __init__(self) -> None:
        self.spec: dict[str, object] = {}
        self.components: list[dict[str, object]] | None = None  # a heterogeneous job's
        self.parsable = False
        self.wait = False
        self.quiet = False
        self.verbose = 0
        self.test_only = False
        self.ignored: list[str] = []
        self.clusters: list[str] = []  # -M/--clusters: names that must include this cluster


def read_script(path: str | None, wrap: str | None, stdin: object = None) -> str:
    """The script text from ``--wrap``, a file, or stdin; CommandError as Slurm words it."""
    if wrap is not None:
        return f"{WRAP_HEADER}{wrap}\n"
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            raise CommandError(f"Unable to open file {path}") from None
    else:
        stream = stdin if stdin is not None else sys.stdin
        buffer = getattr(stream, "buffer", None)
        data = buffer.read() if buffer is not None else stream.read()  # type: ignore[union-attr]
        if isinstance(data, str):
            return data
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise CommandError("Batch script is not valid UTF-8 text") from None


def check_script(script: str) -> None:
    """Slurm's sanity checks on a batch script's text."""
    if not script:
        raise CommandError("Batch script is empty!")
    if script.strip() == "":
        raise CommandError("Batch script contains only whitespace!")
    if not script.startswith("#!"):
        raise CommandError(NO_SHEBANG.rstrip("\n"), raw=True)
    if "\r\n" in script:
        raise CommandError(
            "Batch script contains DOS line breaks (\\r\\n)\nsbatch: error: instead of expected UNIX line breaks (\\n)."
        )
    if "\0" in script:
        raise CommandError("The batch script contains a NUL character")


def build(
    argv: list[str],
    environ: dict[str, str],
    cwd: str,
    stdin: object = None,
    now: float | None = None,
) -> Submission | int | str:
    """Parse everything and build the request.

    Returns a ``Submission``, an exit status (help and version were printed), or the
    text ``--help``/``--usage``/``--version`` asked for. Raises CommandError for errors.
    """
    tbl = table()
    # ``sbatch [opts 0] : [opts 1] ... script``: the components of a heterogeneous job
    # (``hetargs`` and ``directives`` are imported only when a ``:`` or an ``#SBATCH`` line
    # asks for them: a plain submission's start is most of its time)
    if ":" in argv:
        from muster.cli.hetargs import parse_components

        cli_parts, operands = parse_components(argv, lambda args: job_getopt(PROG, args, tbl))
    else:
        one, operands = job_getopt(PROG, argv, tbl)
        cli_parts = [one]
    parsed = [item for part in cli_parts for item in part]

    keys = {opt.key for opt, _ in parsed}
    text = info_text(keys, HELP, USAGE)
    if text is not None:
        return text

    wrap = None
    for opt, value in parsed:
        if opt.key == "wrap":
            wrap = value
    if wrap is not None and operands:
        raise CommandError("script argument not permitted with --wrap option")

    path = operands[0] if operands else None
    script = read_script(path, wrap, stdin)
    check_script(script)

    script_parts: list[Parsed] = []
    groups: list[list[str]] = [[]]
    if "#SBATCH" in script:
        from muster.cli.directives import script_directive_groups

        groups = script_directive_groups(script)
    for group in groups:
        from_script, stray = job_getopt(PROG, group, tbl)
        if stray:
            from muster.core.optionvalues import RC_BAD_OPTION

            raise CommandError(f"Invalid directive found in batch script: {stray[0]}", RC_BAD_OPTION)
        # A script cannot ask for help, a version or another script.
        script_parts.append([(o, v) for o, v in from_script if o.key not in ("help", "usage", "version", "wrap")])
    from_env = env_options(tbl, environ)

    # Component k: its script directives, the environment, then its command line options.
    count = max(len(script_parts), len(cli_parts))
    layers = [
        (script_parts[k] if k < len(script_parts) else []) + from_env + (cli_parts[k] if k < len(cli_parts) else [])
        for k in range(count)
    ]
    if count > 1:
        from muster.cli.hetargs import propagate

        layers = propagate(layers)

    sub = Submission()
    everything = [item for part in script_parts for item in part] + from_env + parsed
    for opt, value in everything:
        if opt.key == "parsable":
            sub.parsable = True
        elif opt.key == "wait":
            sub.wait = True
        elif opt.key == "quiet":
            sub.quiet = True
        elif opt.key == "verbose":
            sub.verbose += 1
        elif opt.key == "test-only":
            sub.test_only = True
        elif opt.key == "clusters":
            sub.clusters = [c.strip().lower() for c in (value or "").split(",") if c.strip()]

    specs: list[dict[str, object]] = []
    for k, layered in enumerate(layers):
        req = JobRequest()
        apply_job_options(req, layered)
        spec = finish_job_request(req, environ, cwd, now)
        job_env = spec.get("environment")
        if isinstance(job_env, dict):
            job_env.update(spank_environment(layered, cwd))
        if "name" not in spec or not spec["name"]:
            if wrap is not None:
                spec["name"] = "wrap"
            elif path is not None:
                spec["name"] = path.rpartition("/")[2]
            else:
                spec["name"] = "sbatch"
        # Only the first component runs the script; its arguments are $1, $2, ... (the
        # agent supplies the script itself as $0).
        spec["script"] = script if k == 0 else None
        spec["argv"] = operands[1:] if k == 0 else []
        specs.append(spec)
        sub.ignored.extend(key for key in req.ignored if key not in sub.ignored)
    sub.spec = specs[0]
    sub.components = specs if count > 1 else None
    return sub


def submit(sub: Submission, out: "TextIO | None" = None) -> int:
    out = out if out is not None else sys.stdout
    from muster.protocol.client import ApiError, ConnectError

    cluster = ""
    if sub.clusters:  # -M: this cluster must be among those named
        cluster = load_settings(PROG).cluster_name
        unknown = [c for c in sub.clusters if c not in (cluster, "all")]
        if unknown:
            raise CommandError(
                f"'{','.join(unknown)}' can't be reached now, or it is an invalid entry for --cluster."
                "  Use 'sacctmgr list clusters' to see available clusters.",
                exit_error_code(),
            )
    check_script_size(sub.spec.get("script"))
    try:
        ctl = connect(PROG)
        body: dict[str, object] = {"spec": sub.spec}
        if sub.components:
            body["components"] = sub.components
        answer = ctl.post("/v1/jobs", body)
    except ConnectError as e:
        raise CommandError(f"Batch job submission failed: {connect_message(e)}", exit_error_code()) from None
    except ApiError as e:
        raise CommandError(submission_error(e.code, e.message, e.data, sub.spec), exit_error_code()) from None
    job_id = answer.get("job_id")
    on = f" on cluster {cluster}" if sub.clusters else ""
    if sub.parsable:
        # With -M, Slurm's --parsable prints "N;cluster" (which cluster took the job).
        out.write(f"{job_id};{cluster}\n" if sub.clusters else f"{job_id}\n")
    elif not sub.quiet:
        out.write(f"Submitted batch job {job_id}{on}\n")
    out.flush()
    if sub.wait and isinstance(job_id, int):
        return wait_for(ctl, job_id)
    return 0


def check_script_size(script: object) -> None:
    """A script over ``max_script_size`` is refused here, before it is sent, in Slurm's
    words (the controller checks again; a conf that cannot be read is left to ``connect``)."""
    if not isinstance(script, str) or len(script) <= SMALL_SCRIPT:
        return
    try:
        most = load_settings(PROG).max_script_size
    except CommandError:
        return
    size = len(script.encode("utf-8", "replace"))
    if size > most:
        raise CommandError(
            f"Batch job submission failed: {TOO_LONG} (the batch script has {size} bytes; max_script_size is {most})",
            exit_error_code(),
        )


def submission_error(code: str, message: str, data: object, spec: dict[str, object]) -> str:
    """The text after ``sbatch: error:`` for a rejected submission (may span lines)."""
    lines = []
    if code == "invalid_partition":
        name = data.get("partition") if isinstance(data, dict) else None
        if not name:
            parts = spec.get("partitions") or []
            name = ",".join(parts) if isinstance(parts, list) else str(parts)
        if name:
            lines.append(f"invalid partition specified: {name}")
    detail = data.get("detail") if isinstance(data, dict) else None
    if detail:
        lines.append(str(detail))
    if code == "too_large":  # the request was over the controller's body limit
        message = f"{TOO_LONG} ({message})"
    lines.append(f"Batch job submission failed: {message}")
    return "\nsbatch: error: ".join(lines)


def wait_for(ctl: object, job_id: int) -> int:
    """``--wait``: poll until the job has ended; its exit code becomes ours."""
    import time

    from muster.protocol.client import ApiError, ConnectError

    long_running()
    delay = 0.2
    while True:
        try:
            job = ctl.get(f"/v1/jobs/{job_id}").get("job") or {}  # type: ignore[attr-defined]
        except ApiError as e:
            raise CommandError(f"Unable to follow job {job_id}: {e.message}") from None
        except ConnectError:
            job = {}
        state = job.get("state")
        if state and state not in _ACTIVE_STATES and not job.get("completing"):
            code = int(job.get("exit_code") or 0)
            if state == "COMPLETED":
                return code
            return code or 1
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def main(argv: list[str] | None = None) -> int:
    args = argv_or_sys(argv)
    try:
        cwd = posix.getcwd()
    except OSError as e:
        return report(PROG, CommandError(f"getcwd failed: {e.strerror}"))
    try:
        result = build(args, environ(), cwd)
        if isinstance(result, str):
            sys.stdout.write(result)
            return 0
        if isinstance(result, int):
            return result
        for key in result.ignored:
            if key in UNHONOURED:
                sys.stderr.write(f"{PROG}: warning: --{key} is not supported by muster and was ignored\n")
        if result.verbose:
            for key, value in sorted(result.spec.items()):
                if key not in ("environment", "script") and value not in (None, [], False):
                    sys.stderr.write(f"{PROG}: {key:<20}: {value}\n")
        if result.test_only:
            return report(PROG, CommandError("--test-only is not supported by muster"))
        return submit(result)
    except CommandError as e:
        return report(PROG, e)
    except KeyboardInterrupt:
        return 130


USAGE = """\
Usage: sbatch [-N nnodes] [-n ntasks] [-c ncpus] [-p partition] [-t minutes]
              [-J jobname] [-o out] [-e err] [-i in] [-D dir] [-A account]
              [-q qos] [-w hosts] [-x hosts] [-C list] [-d type:jobid] [-H]
              [--mem=MB] [--mem-per-cpu=MB] [--mem-per-gpu=MB] [--gres=list]
              [--gpus=n] [--gpus-per-node=n] [--gpus-per-task=n] [--exclusive]
              [--begin=time] [--nice[=value]] [--requeue[=expedite]] [--no-requeue]
              [--signal=[B:]num[@time]] [--array=indexes] [--export=names]
              [--open-mode=append|truncate] [--parsable] [--wait] [--wrap=cmd]
              executable [args...]
"""

HELP = """\
Usage: sbatch [OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]

Parallel run options:
  -a, --array=indexes         job array index values
  -A, --account=name          charge job to specified account
      --begin=time            defer job until HH:MM MM/DD/YY
      --comment=name          arbitrary comment
      --deadline=time         end the job (DEADLINE) when it can no longer finish
                              by this time (its --time-min, else --time)
  -c, --cpus-per-task=ncpus   number of cpus required per task
  -C, --constraint=list       specify a list of constraints
  -d, --dependency=type:jobid defer job until condition on jobid is satisfied
  -D, --chdir=directory       set working directory for batch script
  -e, --error=err             file for batch script's standard error
      --export[=names]        specify environment variables to export
      --hang-timeout=minutes  requeue the job (reason Hung) when its reported progress
                              stops that long (muster.progress; evidence first)
  -H, --hold                  submit job in held state
  -i, --input=in              file for batch script's standard input
  -J, --job-name=jobname      name of job
  -k, --no-kill               do not kill the job when one of its nodes (not the first) fails
      --spare-nodes=N[@SIG]   replace up to N failed nodes (not the first) in the
                              running job instead of requeueing it; SIG tells it
      --kill-on-invalid-dep=yes|no
                              kill the job if its dependency can never be met
  -M, --clusters=names        this cluster's name (--parsable then prints N;cluster)
      --mail-type=type        notify on state change: BEGIN, END, FAIL, REQUEUE, ALL,
                              INVALID_DEPEND, TIME_LIMIT[_50|_80|_90], ARRAY_TASKS
      --mail-user=user        who to send email notification for job state changes
  -n, --ntasks=ntasks         number of tasks to run
      --nice[=value]          decrease scheduling priority by value
      --no-requeue            if set, do not permit the job to be requeued
      --ntasks-per-node=n     number of tasks to invoke on each node
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
  -O, --overcommit            overcommit resources (CPUs for one task per node)
  -o, --output=out            file for batch script's standard output
      --open-mode=append|truncate
                              how to open the output and error files
  -p, --partition=partition   partition requested
      --parsable              outputs only the jobid
      --propagate[=rlimits]   propagate all [or specific list of] rlimits
  -q, --qos=qos               quality of service
  -Q, --quiet                 quiet mode (suppress informational messages)
      --requeue[=expedite]    if set, permit the job to be requeued; expedite: after
                              a node failure, restart first on its surviving nodes
      --reservation=name      allocate resources from named reservation
      --signal=[B:]num[@time] send signal when time limit within time seconds
  -t, --time=minutes          time limit
      --time-min=minutes      minimum time limit (if distinct)
  -v, --verbose               verbose mode (multiple -v's increase verbosity)
  -W, --wait                  wait for completion of submitted job
      --wrap[=command string] wrap command string in a sh script and submit

Constraint options:
      --mincpus=n             minimum number of logical processors per node
      --mem=MB                minimum amount of real memory per node
      --tmp=MB                minimum amount of temporary disk per node
      --mem-per-cpu=MB        maximum amount of real memory per allocated cpu
  -w, --nodelist=hosts...     request a specific list of hosts
  -x, --exclude=hosts...      exclude a specific list of hosts
      --exclusive             allocate whole nodes to the job

GPU scheduling options:
  -G, --gpus=n                count of GPUs required for the job
      --gpus-per-node=n       number of GPUs required per allocated node
      --gpus-per-task=n       number of GPUs required per spawned task
      --gres=list             required generic resources (gpu[:type]:count)
      --mem-per-gpu=MB        real memory required per allocated GPU

Help options:
  -h, --help                  show this help message
      --usage                 display brief usage message

Other options:
  -V, --version               output version information and exit

muster accepts Slurm's other sbatch options (--wckey, --hint, ...) and
ignores them; --cpus-per-gpu and --licenses draw a warning.
"""


if __name__ == "__main__":
    sys.exit(main())
