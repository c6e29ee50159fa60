"""Command-line options the Slurm way, and the one table of job options.

Two things live here:

* ``getopt``, ``Opt`` and ``OptionTable``, re-exported from ``muster.slurm.argscan``: the
  GNU ``getopt_long`` work-alike every command uses.
* ``JOB_OPTIONS``: every option a job request can carry, written once. Each row says its
  names, whether it takes a value, the ``SBATCH_*`` variable that can also set it and the
  function that applies a value to a ``JobRequest``. sbatch reads the same rows from its
  command line, its environment and the script's ``#SBATCH`` lines, and applies them in
  the order script, environment, command line, so that the command line wins (Slurm's
  precedence). srun and salloc are meant to reuse the rows with their own variables.

A ``JobRequest`` (``muster.slurm.jobrequest``) ends as a plain dict with
``muster.core.job.JobSpec``'s field names (times in seconds, memory in MB). The commands
never import ``muster.core.job``: its dataclasses cost start-up time that a command typed
hundreds of times a day should not pay. Values are read by ``muster.core.optionvalues``,
whose ``OptionValueError`` carries Slurm's text and exit status, imported by the first
value that needs a parser (``--hold --wrap true`` needs none); ``#SBATCH`` lines by
``muster.cli.directives``.

``job_getopt``, ``apply_job_options`` and ``finish_job_request`` are what sbatch, salloc
and srun do with the table, with Slurm's exit statuses for what is wrong.
"""

# No ``from __future__ import annotations`` here: sbatch's modules leave it out, which spares
# a plain submission the ``__future__`` module; names known only to type checkers are quoted.

import sys

from muster.core.errors import CommandError
from muster.slurm.argscan import NO_ARG as NO_ARG
from muster.slurm.argscan import OPTIONAL as OPTIONAL
from muster.slurm.argscan import REQUIRED as REQUIRED
from muster.slurm.argscan import Opt as Opt
from muster.slurm.argscan import OptionError as OptionError
from muster.slurm.argscan import OptionTable as OptionTable
from muster.slurm.argscan import Parsed as Parsed
from muster.slurm.argscan import getopt as getopt
from muster.slurm.argscan import option_error
from muster.slurm.jobrequest import JobRequest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    Applier = Callable[[JobRequest, str | None], None]  # an option's effect on the request


def _values() -> "ModuleType":
    """``muster.core.optionvalues``, imported by the first value that needs parsing or
    refusing: the options of a plain submission (``--hold``, ``--wrap``, a name) need
    none of its parsers, and a command's start is most of its time."""
    from muster.core import optionvalues

    return optionvalues


class _NothingRaises(Exception):
    """Stands for ``OptionValueError`` while ``optionvalues`` is not loaded: only its code
    raises that, so nothing can have been raised."""


def _value_error() -> type[Exception]:
    """What ``except`` must catch for a bad option value (evaluated only as an exception
    passes, so that catching one does not import the parsers)."""
    module = sys.modules.get("muster.core.optionvalues")
    return _NothingRaises if module is None else module.OptionValueError  # type: ignore[no-any-return]


# --- appliers ---------------------------------------------------------------------------------


def _set(field: str) -> "Applier":
    def apply(req: JobRequest, value: str | None) -> None:
        req.spec[field] = value

    return apply


def _flag(field: str, setting: object = True) -> "Applier":
    def apply(req: JobRequest, value: str | None) -> None:
        req.spec[field] = setting

    return apply


def _count(field: str, what: str) -> "Applier":
    def apply(req: JobRequest, value: str | None) -> None:
        req.spec[field] = _values().parse_count(value or "", what)

    return apply


def _apply_distribution(req: JobRequest, value: str | None) -> None:
    """Only ``arbitrary`` shapes a job: its nodes are ``SLURM_HOSTFILE``'s (``JobRequest.finish``)."""
    req.distribution = (value or "").split(":")[0].split(",")[0].strip().lower()


def _ignored(req: JobRequest, value: str | None) -> None:
    """Accepted so that existing scripts run; muster has no use for it (yet)."""


def _apply_partition(req: JobRequest, value: str | None) -> None:
    names = [p.strip() for p in (value or "").split(",") if p.strip()]
    req.spec["partitions"] = list(dict.fromkeys(names))


def _apply_nodes(req: JobRequest, value: str | None) -> None:
    lo, hi = _values().parse_nodes(value or "")
    req.spec["min_nodes"] = lo
    req.spec["max_nodes"] = hi


def _apply_time(req: JobRequest, value: str | None) -> None:
    req.spec["time_limit"] = _values().parse_time_option(value or "", "--time")


def _apply_time_min(req: JobRequest, value: str | None) -> None:
    req.spec["time_min"] = _values().parse_time_option(value or "", "--time-min")


_MEM_FIELDS = ("mem_per_node", "mem_per_cpu", "mem_per_gpu")


def _mem_applier(field: str, option: str) -> "Applier":
    def apply(req: JobRequest, value: str | None) -> None:
        mb = _values().parse_mem_option(value or "", option)
        # --mem, --mem-per-cpu and --mem-per-gpu exclude one another; the last one given wins.
        for other in _MEM_FIELDS:
            req.spec.pop(other, None)
        req.spec[field] = mb

    return apply


def _apply_gres(req: JobRequest, value: str | None) -> None:
    from muster.core.resources import gpu_request

    try:
        count, gtype = gpu_request(value or "")
    except ValueError as e:
        raise _values().OptionValueError(str(e), rc=1) from None
    req.spec["gpus_per_node"] = count
    if gtype:
        req.spec["gpu_type"] = gtype


def _gpu_applier(field: str, option: str) -> "Applier":
    def apply(req: JobRequest, value: str | None) -> None:
        gtype, count = _values().parse_gpus_option(value or "", option)
        req.spec[field] = count
        if gtype:
            req.spec["gpu_type"] = gtype

    return apply


def _apply_export(req: JobRequest, value: str | None) -> None:
    req.export = value or "ALL"


def _apply_chdir(req: JobRequest, value: str | None) -> None:
    if not (value or "").strip():
        raise _values().OptionValueError("Invalid --chdir specification: an empty path")
    req.chdir = value


def _apply_begin(req: JobRequest, value: str | None) -> None:
    req.begin = value or ""


def _apply_deadline(req: JobRequest, value: str | None) -> None:
    req.deadline = value or ""


def _apply_exclusive(req: JobRequest, value: str | None) -> None:
    # --exclusive=user and =mcs narrow Slurm's sharing rule; muster gives whole nodes for all.
    # =topo (Slurm 24.05) also keeps every other job out of the switches or blocks it uses.
    if value is not None and value.lower() not in ("", "user", "mcs", "topo"):
        raise _values().OptionValueError(f"Invalid --exclusive specification: {value}")
    req.spec["exclusive"] = True
    if value is not None and value.lower() == "topo":
        req.spec["exclusive_topo"] = True


def _apply_requeue(req: JobRequest, value: str | None) -> None:
    # --requeue=expedite (Slurm 25.11): after a node failure the job restarts first, on its
    # surviving nodes (docs/preemption.md). A bare --requeue, or SBATCH_REQUEUE set, is Slurm's.
    req.spec["requeue"] = True
    if value is not None and value.lower() == "expedite":
        req.spec["expedite"] = True
    elif value is not None and value.lower() not in ("1", "yes", "true"):
        raise _values().OptionValueError(f"Invalid --requeue specification: {value}")


def _apply_nodelist(req: JobRequest, value: str | None) -> None:
    req.spec["nodelist"] = _values().parse_hostnames_option(value or "", "--nodelist")


def _apply_exclude(req: JobRequest, value: str | None) -> None:
    req.spec["exclude"] = _values().parse_hostnames_option(value or "", "--exclude")


def _apply_nice(req: JobRequest, value: str | None) -> None:
    if value is None:
        req.spec["nice"] = 100  # Slurm's default adjustment for a bare --nice
        return
    text = value.strip()
    try:
        nice = int(text)
    except ValueError:
        raise _values().OptionValueError(f"Invalid --nice value: {value}") from None
    if abs(nice) > 2147483645:
        raise _values().OptionValueError("Invalid nice value, must be between -2147483645 and 2147483645")
    req.spec["nice"] = nice


def _apply_open_mode(req: JobRequest, value: str | None) -> None:
    text = (value or "").strip().lower()
    if text and "append".startswith(text):
        req.spec["open_mode"] = "append"
    elif text and "truncate".startswith(text):
        req.spec["open_mode"] = "truncate"
    else:
        raise _values().OptionValueError(f"Invalid --open-mode specification: {value}")


def _apply_signal(req: JobRequest, value: str | None) -> None:
    req.spec["signal"] = _values().parse_signal_option(value or "")


def _apply_array(req: JobRequest, value: str | None) -> None:
    req.spec["array"] = _values().parse_array_option(value or "")


def _apply_kill_on_invalid_dep(req: JobRequest, value: str | None) -> None:
    text = (value or "").strip().lower()
    if text not in ("yes", "no"):
        raise _values().OptionValueError("Invalid --kill-on-invalid-dep specification (use yes or no)")
    req.spec["kill_on_invalid_dep"] = text == "yes"


def _apply_mail_type(req: JobRequest, value: str | None) -> None:
    req.spec["mail_type"] = _values().parse_mail_type(value or "")


def _apply_hang_timeout(req: JobRequest, value: str | None) -> None:
    # muster's own: minutes (or any --time format) without reported progress before the
    # job is signalled and requeued as Hung (see docs/training.md)
    req.spec["hang_timeout"] = _values().parse_time_option(value or "", "--hang-timeout")


def _apply_switches(req: JobRequest, value: str | None) -> None:
    # --switches=COUNT[@MAX-WAIT]: at most COUNT leaf switches, waiting up to MAX-WAIT
    # (Slurm's time formats) for them; without it, max_switch_wait decides
    count, sep, wait = (value or "").partition("@")
    if not count.strip().isdigit() or int(count) < 1:
        raise _values().OptionValueError(f"Invalid --switches specification: {value}")
    req.spec["switches"] = int(count)
    if sep:
        seconds = _values().parse_time_option(wait, "--switches")
        req.spec["switch_wait"] = seconds or 0


def _apply_segment(req: JobRequest, value: str | None) -> None:
    # --segment=SIZE (topology/block): the job's nodes in segments of SIZE, each in one block
    text = (value or "").strip()
    if not text.isdigit() or int(text) < 1:
        raise _values().OptionValueError(f"Invalid --segment specification: {value}")
    req.spec["segment"] = int(text)


def _apply_no_kill(req: JobRequest, value: str | None) -> None:
    # -k, --no-kill[=off]
    if value is not None and value.strip().lower() not in ("", "off", "on", "yes", "no"):
        raise _values().OptionValueError(f"Invalid --no-kill specification: {value}")
    req.spec["no_kill"] = (value or "").strip().lower() not in ("off", "no")


def _apply_spare_nodes(req: JobRequest, value: str | None) -> None:
    # muster's own: --spare-nodes=N[@SIG]: up to N failed nodes replaced in the running
    # allocation (docs/recovery.md); SIG (a name or number) tells the job when it happens
    count, sep, sig = (value or "").partition("@")
    if not count.strip().isdigit():
        raise _values().OptionValueError(f"Invalid --spare-nodes specification: {value}")
    req.spec["spare_nodes"] = int(count)
    if sep:
        from muster.core.signals import parse_signal

        try:
            parse_signal(sig.strip())
        except ValueError:
            raise _values().OptionValueError(f"Invalid --spare-nodes signal: {sig}") from None
        req.spec["replace_signal"] = sig.strip()


def _apply_tmp(req: JobRequest, value: str | None) -> None:
    # --tmp takes --mem's units (MB by default)
    req.spec["tmp_disk"] = _values().parse_mem_option(value or "", "--tmp")


def _apply_propagate(req: JobRequest, value: str | None) -> None:
    # --propagate[=rlim[,rlim...]]: which soft limits of this shell the job gets (a bare
    # --propagate: ALL), whatever PropagateResourceLimits says (``core.rlimits``)
    from muster.core.rlimits import RlimitError, parse_names

    try:
        parse_names(value or "ALL")
    except RlimitError:
        raise _values().OptionValueError(f"--propagate={value} is not valid.", rc=1) from None
    req.propagate = value or ""


def _apply_oversubscribe(req: JobRequest, value: str | None) -> None:
    req.spec["exclusive"] = False


# The job options, once. ``env`` lists sbatch's input variables (man sbatch, 22.05).
JOB_OPTIONS: tuple[Opt, ...] = (
    Opt("job-name", "J", env=("SBATCH_JOB_NAME",), apply=_set("name")),
    Opt("partition", "p", env=("SBATCH_PARTITION",), apply=_apply_partition),
    Opt("nodes", "N", apply=_apply_nodes),
    Opt("ntasks", "n", apply=_count("ntasks", "--ntasks")),
    Opt("ntasks-per-node", apply=_count("ntasks_per_node", "--ntasks-per-node")),
    Opt("cpus-per-task", "c", apply=_count("cpus_per_task", "--cpus-per-task")),
    Opt("mem", env=("SBATCH_MEM_PER_NODE",), apply=_mem_applier("mem_per_node", "--mem")),
    Opt(
        "mem-per-cpu",
        env=("SBATCH_MEM_PER_CPU",),
        apply=_mem_applier("mem_per_cpu", "--mem-per-cpu"),
    ),
    Opt(
        "mem-per-gpu",
        env=("SBATCH_MEM_PER_GPU",),
        apply=_mem_applier("mem_per_gpu", "--mem-per-gpu"),
    ),
    Opt("gres", env=("SBATCH_GRES",), apply=_apply_gres),
    Opt("gpus", "G", env=("SBATCH_GPUS",), apply=_gpu_applier("gpus", "--gpus")),
    Opt(
        "gpus-per-node",
        env=("SBATCH_GPUS_PER_NODE",),
        apply=_gpu_applier("gpus_per_node", "--gpus-per-node"),
    ),
    Opt(
        "gpus-per-task",
        env=("SBATCH_GPUS_PER_TASK",),
        apply=_gpu_applier("gpus_per_task", "--gpus-per-task"),
    ),
    Opt("time", "t", env=("SBATCH_TIMELIMIT",), apply=_apply_time),
    Opt("time-min", apply=_apply_time_min),
    Opt("output", "o", env=("SBATCH_OUTPUT",), apply=_set("stdout")),
    Opt("error", "e", env=("SBATCH_ERROR",), apply=_set("stderr")),
    Opt("input", "i", env=("SBATCH_INPUT",), apply=_set("stdin")),
    Opt(("chdir", "workdir"), "D", apply=_apply_chdir),
    Opt("export", env=("SBATCH_EXPORT",), apply=_apply_export),
    Opt("hold", "H", NO_ARG, apply=_flag("hold")),
    Opt("requeue", None, OPTIONAL, env=("SBATCH_REQUEUE",), apply=_apply_requeue),
    Opt("no-requeue", None, NO_ARG, env=("SBATCH_NO_REQUEUE",), apply=_flag("requeue", False)),
    Opt("exclusive", None, OPTIONAL, env=("SBATCH_EXCLUSIVE",), apply=_apply_exclusive),
    Opt(("oversubscribe", "share"), "s", NO_ARG, apply=_apply_oversubscribe),
    Opt("nodelist", "w", apply=_apply_nodelist),
    Opt("exclude", "x", apply=_apply_exclude),
    Opt("begin", "b", apply=_apply_begin),
    Opt("deadline", apply=_apply_deadline),
    Opt("account", "A", env=("SBATCH_ACCOUNT",), apply=_set("account")),
    Opt("qos", "q", env=("SBATCH_QOS",), apply=_set("qos")),
    Opt("nice", None, OPTIONAL, apply=_apply_nice),
    Opt("comment", apply=_set("comment")),
    Opt("constraint", "C", env=("SBATCH_CONSTRAINT",), apply=_set("constraint")),
    Opt("dependency", "d", apply=_set("dependency")),
    Opt("reservation", env=("SBATCH_RESERVATION",), apply=_set("reservation")),
    Opt("open-mode", env=("SBATCH_OPEN_MODE",), apply=_apply_open_mode),
    Opt("signal", env=("SBATCH_SIGNAL",), apply=_apply_signal),
    Opt("array", "a", env=("SBATCH_ARRAY_INX",), apply=_apply_array),
    Opt("kill-on-invalid-dep", apply=_apply_kill_on_invalid_dep),
    Opt("hang-timeout", env=("SBATCH_HANG_TIMEOUT",), apply=_apply_hang_timeout),
    Opt("switches", env=("SBATCH_REQ_SWITCH",), apply=_apply_switches),
    Opt("segment", env=("SBATCH_SEGMENT",), apply=_apply_segment),
    Opt("mail-type", apply=_apply_mail_type),  # the controller runs MailProg (ctld.mailnotes)
    Opt("mail-user", apply=_set("mail_user")),
    # Accepted for compatibility with existing scripts and tools; they change nothing here.
    Opt("wckey", env=("SBATCH_WCKEY",), apply=_ignored),
    Opt("distribution", "m", env=("SBATCH_DISTRIBUTION",), apply=_apply_distribution),
    Opt("hint", env=("SBATCH_HINT",), apply=_ignored),
    Opt("contiguous", None, NO_ARG, apply=_ignored),
    Opt("mincpus", apply=_count("min_cpus", "--mincpus")),
    Opt("overcommit", "O", NO_ARG, apply=_flag("overcommit")),
    Opt("no-kill", "k", OPTIONAL, env=("SBATCH_NO_KILL",), apply=_apply_no_kill),
    Opt("spare-nodes", env=("SBATCH_SPARE_NODES",), apply=_apply_spare_nodes),
    Opt("preflight", None, NO_ARG, env=("SBATCH_PREFLIGHT",), apply=_flag("preflight")),
    Opt("tmp", apply=_apply_tmp),
    Opt("licenses", "L", apply=_ignored),
    Opt("propagate", None, OPTIONAL, apply=_apply_propagate),
    Opt("get-user-env", None, OPTIONAL, apply=_ignored),
    Opt("profile", apply=_ignored),
    Opt("acctg-freq", apply=_ignored),
    Opt("cpu-freq", apply=_ignored),
    Opt("gpu-bind", apply=_ignored),
    Opt("gpu-freq", apply=_ignored),
    Opt("mem-bind", apply=_ignored),
    Opt("network", apply=_ignored),
    Opt(("clusters", "cluster"), "M", env=("SBATCH_CLUSTERS",), apply=_ignored),
    Opt("threads-per-core", apply=_ignored),
    Opt("cores-per-socket", apply=_ignored),
    Opt("sockets-per-node", apply=_ignored),
    Opt("extra-node-info", "B", apply=_ignored),
    Opt("cpus-per-gpu", apply=_ignored),
    Opt("ntasks-per-gpu", apply=_ignored),
    Opt("ntasks-per-core", apply=_ignored),
    Opt("ntasks-per-socket", apply=_ignored),
    Opt("spread-job", None, NO_ARG, apply=_ignored),
    Opt("use-min-nodes", None, NO_ARG, apply=_ignored),
    Opt("wait-all-nodes", apply=_ignored),
    Opt("delay-boot", apply=_ignored),
    Opt("reboot", None, NO_ARG, apply=_ignored),
    Opt("priority", apply=_ignored),
    Opt("mcs-label", apply=_ignored),
    Opt("prefer", apply=_ignored),
    Opt("umask", apply=_ignored),
    Opt("ignore-pbs", None, NO_ARG, apply=_ignored),
    Opt("container", apply=_ignored),
)

# Options whose effect on resources muster cannot honour: sbatch says so instead of
# silently giving the job something else than it asked for.
UNHONOURED = frozenset({"cpus-per-gpu", "ntasks-per-gpu", "licenses", "priority"})


def env_options(table: OptionTable, environ: dict[str, str]) -> Parsed:
    """The options set by input environment variables, in table order."""
    parsed: Parsed = []
    for opt in table.opts:
        for var in opt.env:
            value = environ.get(var)
            if value is None:
                continue
            if opt.arg == NO_ARG:
                parsed.append((opt, None))
            elif opt.arg == OPTIONAL:
                parsed.append((opt, value or None))
            else:
                parsed.append((opt, value))
            break
    return parsed


def apply_options(req: JobRequest, parsed: Parsed) -> None:
    """Apply job options in the order given (later ones override earlier ones)."""
    for opt, value in parsed:
        if opt.apply is None:
            continue
        if opt.apply is _ignored:
            req.ignored.append(opt.key)
        opt.apply(req, value)  # type: ignore[operator]


# --- what sbatch, salloc and srun do with the table ----------------------------------------------


def job_getopt(prog: str, argv: list[str], table: OptionTable) -> tuple[Parsed, list[str]]:
    """Parse sbatch's, salloc's or srun's arguments: options end at the first operand (the
    script or the command), and a malformed one stops the command with Slurm's 255."""
    try:
        return getopt(argv, table, permute=False)
    except OptionError as e:
        raise option_error(prog, e, _values().RC_BAD_OPTION) from None


def apply_job_options(req: JobRequest, layered: Parsed) -> None:
    """``apply_options``, with a bad value stopping the command with its exit status."""
    try:
        apply_options(req, layered)
    except _value_error() as e:
        raise CommandError(str(e), e.rc) from None  # type: ignore[attr-defined]


def finish_job_request(
    req: JobRequest, environ: dict[str, str], cwd: str, now: float | None = None
) -> dict[str, object]:
    """``JobRequest.finish``, with a bad value stopping the command with its exit status."""
    try:
        return req.finish(environ, cwd, now)
    except _value_error() as e:
        raise CommandError(str(e), e.rc) from None  # type: ignore[attr-defined]
