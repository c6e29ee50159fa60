"""A REST submission's ``job`` (v0.0.40 ``job_desc_msg``) as a JobSpec request, through the
very rules sbatch applies to its options.

Each field the REST API accepts is turned into the sbatch option it stands for (``nodes`` is
``--nodes``, ``tres_per_node: "gres/gpu:2"`` is ``--gres=gpu:2``, ``time_limit`` in minutes is
``--time``...) and applied by ``muster.slurm.options``' one table of job options, so a REST
submit and an ``#SBATCH`` line cannot disagree: same parser, same messages. The controller
then checks the result against ``SpecModel`` (``ctld.api``) as it does for sbatch.

Fields of the schema that muster has no use for are reported in ``warnings`` (as sbatch
accepts and ignores ``--wckey``); fields that would change what the job gets and that
muster cannot honour are refused, as are fields the schema does not have.
"""

from __future__ import annotations

import os
import pwd
from typing import Any

from muster.core.optionvalues import OptionValueError
from muster.core.resources import parse_gres
from muster.slurm.argscan import OptionTable
from muster.slurm.jobrequest import JobRequest
from muster.slurm.options import JOB_OPTIONS, apply_options

_TABLE = OptionTable(JOB_OPTIONS)

# job_desc_msg fields that carry option text as is: field -> sbatch option.
_TEXT = {
    "name": "job-name",
    "partition": "partition",
    "nodes": "nodes",
    "account": "account",
    "qos": "qos",
    "reservation": "reservation",
    "dependency": "dependency",
    "comment": "comment",
    "mail_user": "mail-user",
    "constraints": "constraint",
    "standard_output": "output",
    "standard_error": "error",
    "standard_input": "input",
    "array": "array",
}
# Counts: field -> sbatch option.
_COUNTS = {
    "tasks": "ntasks",
    "tasks_per_node": "ntasks-per-node",
    "cpus_per_task": "cpus-per-task",
}
# Memory in MB, as a v0.0.40 number object or a plain number: field -> option.
_MEMORY = {"memory_per_node": "mem", "memory_per_cpu": "mem-per-cpu"}
# Accepted and ignored, as sbatch accepts the options they stand for.
IGNORED = frozenset(
    {
        "wckey",
        "distribution",
        "cpu_binding",
        "cpu_binding_flags",
        "memory_binding",
        "memory_binding_type",
        "overcommit",
        "contiguous",
        "profile",
        "account_gather_frequency",
        "cpu_frequency",
        "network",
        "clusters",
        "threads_per_core",
        "sockets_per_node",
        "wait_all_nodes",
        "reboot",
        "container",
        "container_id",
        "kill_on_node_fail",
        "spank_environment",
        "tres_bind",
        "tres_freq",
        "selinux_context",
        "batch_features",
        "prefer",
        "x11",
        "delay_boot",
        "immediate",
        "site_factor",
    }
)
# Fields the API accepts; everything else in the schema would change the job's resources
# in ways muster cannot honour and is refused by name.
HANDLED = frozenset(
    {
        *_TEXT,
        *_COUNTS,
        *_MEMORY,
        "script",
        "argv",
        "environment",
        "rlimits",
        "current_working_directory",
        "minimum_nodes",
        "maximum_nodes",
        "time_limit",
        "time_minimum",
        "tres_per_node",
        "tres_per_job",
        "tres_per_task",
        "hold",
        "requeue",
        "exclusive",
        "shared",
        "oversubscribe",
        "required_nodes",
        "excluded_nodes",
        "begin_time",
        "nice",
        "open_mode",
        "kill_warning_signal",
        "kill_warning_delay",
        "kill_warning_flags",
        "flags",
        "mail_type",
        "user_id",
        "group_id",
    }
)
# v0.0.40's mail_type flags that differ from sbatch's --mail-type names.
_MAIL_FLAGS = {
    "TIME=100%": "TIME_LIMIT",
    "TIME=90%": "TIME_LIMIT_90",
    "TIME=80%": "TIME_LIMIT_80",
    "TIME=50%": "TIME_LIMIT_50",
    "INVALID_DEPENDENCY": "INVALID_DEPEND",
}


class JobDescError(Exception):
    """A submission that cannot be accepted; ``str()`` names the field and what is wrong."""


def number_value(value: Any, field: str) -> int | None:
    """A v0.0.40 number: ``{"set", "infinite", "number"}`` or a bare number; None when unset
    or infinite."""
    if isinstance(value, dict):
        if value.get("infinite"):
            return None
        if not value.get("set", "number" in value):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise JobDescError(f"{field}: expected a number")
    return int(value)


def _strings(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise JobDescError(f"{field}: expected a list of strings")
    return list(value)


def _gres(value: Any, field: str, per_node: bool = True) -> str:
    """``gres/gpu:2`` or ``gres:gpu:2`` (Slurm writes both) -> ``gpu:2`` for ``--gres``, or
    ``[type:]count`` for ``--gpus``/``--gpus-per-task`` (``per_node`` false); only GPUs."""
    if not isinstance(value, str):
        raise JobDescError(f"{field}: expected a string")
    try:
        requests = parse_gres(value)
    except ValueError as e:
        raise JobDescError(f"{field}: {e}: {value!r}") from None
    if any(r.name != "gpu" for r in requests):
        raise JobDescError(f"{field}: only gres/gpu is supported, not {value!r}")
    if per_node:
        return ",".join(str(r) for r in requests)
    if len(requests) > 1:
        raise JobDescError(f"{field}: one GPU type per job, not {value!r}")
    return f"{requests[0].type}:{requests[0].count}" if requests[0].type else str(requests[0].count)


def _home(user: str) -> str:
    try:
        return pwd.getpwnam(user).pw_dir or "/"
    except KeyError:
        return "/"


def job_request(job: dict[str, Any], script: str | None, user: str) -> tuple[dict[str, object], list[str]]:
    """The JobSpec dict for a ``job_desc_msg`` submitted by ``user``, and the warnings."""
    if not isinstance(job, dict):
        raise JobDescError("job: expected an object")
    warnings: list[str] = []
    options: list[tuple[str, str | None]] = []
    for field in job:
        if field in IGNORED:
            warnings.append(f"{field}: not used by muster; ignored")
        elif field not in HANDLED:
            raise JobDescError(f"{field}: not supported by muster")

    def add(option: str, value: str | None) -> None:
        options.append((option, value))

    for field, option in _TEXT.items():
        value = job.get(field)
        if value is None:
            continue
        if field == "nodes" and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # some clients send a bare count
        if not isinstance(value, str):
            raise JobDescError(f"{field}: expected a string")
        add(option, value)
    for field, option in _COUNTS.items():
        if job.get(field) is not None:
            add(option, str(number_value(job[field], field)))
    lo, hi = job.get("minimum_nodes"), job.get("maximum_nodes")
    if lo is not None or hi is not None:
        lo_n = number_value(lo, "minimum_nodes") if lo is not None else None
        hi_n = number_value(hi, "maximum_nodes") if hi is not None else None
        add("nodes", f"{lo_n or 1}-{hi_n}" if hi_n is not None else str(lo_n or 1))
    for field, option in _MEMORY.items():
        if job.get(field) is not None:
            mb = number_value(job[field], field)
            if mb is not None:
                add(option, f"{mb}M")
    for field, option in (("time_limit", "time"), ("time_minimum", "time-min")):
        if job.get(field) is not None:
            minutes = number_value(job[field], field)
            add(option, "UNLIMITED" if minutes is None else str(minutes))
    if job.get("tres_per_node") is not None:
        add("gres", _gres(job["tres_per_node"], "tres_per_node"))
    if job.get("tres_per_job") is not None:
        add("gpus", _gres(job["tres_per_job"], "tres_per_job", per_node=False))
    if job.get("tres_per_task") is not None:
        add("gpus-per-task", _gres(job["tres_per_task"], "tres_per_task", per_node=False))
    if job.get("hold"):
        add("hold", None)
    if job.get("requeue") is not None:
        add("requeue" if job["requeue"] else "no-requeue", None)
    exclusive = [x.lower() for x in _strings(job.get("exclusive") or [], "exclusive")]
    if any(x in ("true", "user", "mcs") for x in exclusive):
        add("exclusive", None)
    shared = [x.lower() for x in _strings(job.get("shared") or [], "shared")]
    if job.get("oversubscribe") or "oversubscribe" in shared:
        add("oversubscribe", None)
    if job.get("required_nodes") is not None:
        add("nodelist", ",".join(_strings(job["required_nodes"], "required_nodes")))
    if job.get("excluded_nodes") is not None:
        add("exclude", ",".join(_strings(job["excluded_nodes"], "excluded_nodes")))
    if job.get("nice") is not None:
        add("nice", str(number_value(job["nice"], "nice")))
    if job.get("open_mode") is not None:
        modes = _strings(job["open_mode"], "open_mode")
        if len(modes) != 1:
            raise JobDescError("open_mode: expected APPEND or TRUNCATE")
        add("open-mode", modes[0])
    if job.get("kill_warning_signal") is not None:
        sig = str(job["kill_warning_signal"])
        delay = (
            number_value(job.get("kill_warning_delay"), "kill_warning_delay") if job.get("kill_warning_delay") else None
        )
        flags = _strings(job.get("kill_warning_flags") or [], "kill_warning_flags")
        prefix = "B:" if "BATCH_JOB" in flags else ""
        add("signal", f"{prefix}{sig}" + (f"@{delay}" if delay is not None else ""))
    if job.get("mail_type") is not None:
        given = job["mail_type"]
        mail = given.split(",") if isinstance(given, str) else _strings(given, "mail_type")
        add("mail-type", ",".join(_MAIL_FLAGS.get(m.strip().upper(), m.strip()) for m in mail) or "NONE")
    flags = _strings(job.get("flags") or [], "flags")
    if "KILL_INVALID_DEPENDENCY" in flags:
        add("kill-on-invalid-dep", "yes")
    elif "NO_KILL_INVALID_DEPENDENCY" in flags:
        add("kill-on-invalid-dep", "no")
    for field in ("user_id", "group_id"):
        if job.get(field) not in (None, ""):
            _check_self(field, job[field], user)

    req = JobRequest()
    parsed = []
    for option, value in options:
        opt = _TABLE.by_long.get(option)
        assert opt is not None, option  # the table above names sbatch's options
        parsed.append((opt, value))
    try:
        apply_options(req, parsed)
    except OptionValueError as e:
        raise JobDescError(str(e)) from None
    environ = _environment(job.get("environment"))
    cwd = job.get("current_working_directory")
    if cwd is not None and (not isinstance(cwd, str) or not os.path.isabs(cwd)):
        raise JobDescError("current_working_directory: must be an absolute path")
    # A REST job gets exactly the environment it sends (there is no caller's shell), and
    # the resource limits it sends: never the REST daemon's own.
    req.export = "NONE" if not environ else "ALL"
    req.propagate = "NONE"
    spec = req.finish(environ, cwd or _home(user))
    if job.get("rlimits") is not None:
        limits = _rlimits(job["rlimits"])
        if limits:
            spec["rlimits"] = limits
    if job.get("begin_time") is not None:
        begin = number_value(job["begin_time"], "begin_time")
        if begin is not None:
            spec["begin_time"] = float(begin)
    body = job.get("script") if job.get("script") is not None else script
    if body is not None:
        if not isinstance(body, str):
            raise JobDescError("script: expected a string")
        if not body.startswith("#!"):
            raise JobDescError("script: batch script's first line must start with #! followed by the interpreter")
        spec["script"] = body
    else:
        raise JobDescError("script: a batch script is required")
    if job.get("argv") is not None:
        spec["argv"] = _strings(job["argv"], "argv")
    return spec, warnings


def _rlimits(value: Any) -> dict[str, int]:
    """v0.0.40's ``rlimits`` (``{"nofile": {"set": true, "number": 4096}, "memlock":
    {"infinite": true}, ...}``, lower-case names) as a job's limits (``core.rlimits``)."""
    from muster.core.rlimits import NAMES, UNLIMITED

    if not isinstance(value, dict):
        raise JobDescError("rlimits: expected an object")
    out: dict[str, int] = {}
    for key, given in value.items():
        name = str(key).upper()
        if name not in NAMES:
            raise JobDescError(f"rlimits: Bad rlimit name: {key}")
        if isinstance(given, dict) and given.get("infinite"):
            out[name] = UNLIMITED
            continue
        number = number_value(given, f"rlimits.{key}")
        if number is not None:
            if number < 0:
                raise JobDescError(f"rlimits.{key}: expected a number of 0 or more")
            out[name] = number
    return out


def _environment(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict):
        items = [f"{k}={v}" for k, v in value.items()]
    else:
        items = _strings(value, "environment")
    env: dict[str, str] = {}
    for item in items:
        name, eq, val = item.partition("=")
        if not eq or not name:
            raise JobDescError(f"environment: {item!r} is not NAME=value")
        env[name] = val
    return env


def _check_self(field: str, value: Any, user: str) -> None:
    """``user_id``/``group_id`` may only name the submitter and its primary group: the REST
    door submits as the proven caller, always (Slurm lets only root submit for others)."""
    import grp

    text = str(value)
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return
    if field == "user_id" and text not in (user, str(pw.pw_uid)):
        raise JobDescError(f"user_id: {text} is not the caller ({user}); submit with that user's token")
    if field == "group_id":
        try:
            primary = grp.getgrgid(pw.pw_gid).gr_name
        except KeyError:
            primary = str(pw.pw_gid)
        if text not in (primary, str(pw.pw_gid)):
            raise JobDescError(f"group_id: {text} is not the primary group of {user}")
