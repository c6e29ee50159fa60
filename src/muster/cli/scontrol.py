"""scontrol: look at and change jobs, nodes, partitions and the configuration.

Supported: ``show job|node|partition|config|hostnames|hostlist|hostlistsorted``, ``hold``,
``uhold``, ``release``, ``update job``, ``ping`` and ``version``, with ``-o`` (one line per
record), ``-d`` (details) and ``-Q``. The record layouts are Slurm 22.05's, field for field
where muster knows the value; fields muster does not track show Slurm's own "unknown"
spellings (``N/A``, ``(null)``), never made-up numbers. The layout functions take wire
dicts (docs/api.md) and return text, so they are tested without a controller.
"""

from __future__ import annotations

import os
import sys

from muster.cli.common import (
    SLURM_VERSION,
    CommandError,
    argv_or_sys,
    connect,
    connect_message,
    load_settings,
    null_text,
    print_lines,
    report,
    split_ids,
    timefmt,
    version_line,
    write_out,
)
from muster.cli.options import NO_ARG, Opt, OptionError, OptionTable, getopt

PROG = "scontrol"

OPTIONS: tuple[Opt, ...] = (
    Opt("all", "a", NO_ARG),
    Opt("details", "d", NO_ARG),
    Opt("oneliner", "o", NO_ARG),
    Opt("quiet", "Q", NO_ARG),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("help", "h", NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("hide", None, NO_ARG),
    Opt("local", None, NO_ARG),
    Opt("sibling", None, NO_ARG),
    Opt("clusters", "M"),
    Opt("future", "F", NO_ARG),
)


class Flags:
    __slots__ = ("details", "oneliner", "quiet")

    def __init__(self) -> None:
        self.details = False
        self.oneliner = False
        self.quiet = False


# --- small value helpers -------------------------------------------------------------------


def _hms(seconds: object) -> str:
    return timefmt().format_hms(None if seconds is None else int(seconds))  # type: ignore[arg-type]


def _ts(epoch: object, none: str = "Unknown") -> str:
    return timefmt().format_timestamp(epoch, none=none)  # type: ignore[arg-type]


def _mem(mb: object) -> str:
    from muster.core.resources import format_mem

    return format_mem(int(mb or 0))  # type: ignore[arg-type]


def _compress(names: object) -> str:
    if not names:
        return ""
    from muster.core.hostlist import compress

    return compress(names)  # type: ignore[arg-type]


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5`` (GPU index lists)."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _spec(job: dict) -> dict:
    spec = job.get("spec")
    return spec if isinstance(spec, dict) else {}


def _gres_word(count: object, gtype: object) -> str:
    return f"gres:gpu:{gtype}:{count}" if gtype else f"gres:gpu:{count}"


# --- jobs ----------------------------------------------------------------------------------


def job_state(job: dict) -> str:
    if job.get("completing") or job.get("state_code") == "CG":
        return "COMPLETING"
    return str(job.get("state") or "UNKNOWN")


def _num_nodes(job: dict) -> str:
    spec = _spec(job)
    if job.get("state") == "PENDING" and spec.get("min_nodes") and spec.get("max_nodes"):
        return f"{spec['min_nodes']}-{spec['max_nodes']}"
    return str(job.get("num_nodes") or 1)


def _start_end(job: dict) -> tuple[str, str]:
    spec = _spec(job)
    state = job.get("state")
    start = job.get("start_time")
    if state == "PENDING":
        planned = job.get("planned_start") or spec.get("begin_time")
        return _ts(planned), "Unknown"
    if job.get("end_time"):
        return _ts(start), _ts(job["end_time"])
    limit = job.get("time_limit")
    end = _ts(float(start) + int(limit)) if start and limit is not None else "Unknown"
    return _ts(start), end


def _memory_field(job: dict) -> str:
    spec = _spec(job)
    shape = job.get("shape") or {}
    if spec.get("mem_per_cpu"):
        return f"MinMemoryCPU={spec['mem_per_cpu']}M"
    if spec.get("mem_per_node") is not None:
        return (
            f"MinMemoryNode={_mem(spec['mem_per_node'])}"
            if spec["mem_per_node"]
            else "MinMemoryNode=0"
        )
    per_node = int(shape.get("mem_per_node") or 0)
    cpus = int(shape.get("cpus_per_node") or 1)
    if spec.get("mem_per_gpu") or not per_node:
        return "MinMemoryNode=0" if not per_node else f"MinMemoryNode={_mem(per_node)}"
    if per_node % cpus == 0:
        return f"MinMemoryCPU={per_node // cpus}M"
    return f"MinMemoryNode={_mem(per_node)}"


def _gres_detail(job: dict) -> list[str]:
    """``-d``: the job's GPUs, then one line per group of nodes with the same allocation."""
    alloc = [a for a in job.get("alloc") or [] if isinstance(a, dict)]
    total = sum(len(a.get("gpu_ids") or []) for a in alloc) or int(job.get("num_gpus") or 0)
    lines = [f"JOB_GRES=gpu:{total}" if total else "JOB_GRES=(null)"]
    groups: dict[tuple[int, int, str], list[str]] = {}
    for a in alloc:
        ids = [int(i) for i in a.get("gpu_ids") or []]
        # muster does not pin CPU ids; the count is shown as the range 0..count-1.
        cpus = int(a.get("cpus") or 0)
        gres = f"gpu:{len(ids)}(IDX:{_ranges(ids)})" if ids else ""
        groups.setdefault((cpus, int(a.get("mem") or 0), gres), []).append(str(a.get("node")))
    for (cpus, mem, gres), nodes in groups.items():
        cpu_ids = "0" if cpus <= 1 else f"0-{cpus - 1}"
        lines.append(f"  Nodes={_compress(nodes)} CPU_IDs={cpu_ids} Mem={mem} GRES={gres}")
    return lines


def _array_fields(job: dict) -> str:
    """``ArrayJobId=.. ArrayTaskId=.. [ArrayTaskThrottle=..] `` for array tasks."""
    if job.get("array_job_id") is None:
        return ""
    from muster.cli.jobarrays import array_task_text

    text = f"ArrayJobId={job['array_job_id']} ArrayTaskId={array_task_text(job)} "
    if job.get("array_throttle"):
        text += f"ArrayTaskThrottle={job['array_throttle']} "
    return text


def job_record(job: dict, details: bool = False) -> list[str]:
    """``scontrol show job``'s lines for one job (without indentation)."""
    spec = _spec(job)
    shape = job.get("shape") or {}
    start, end = _start_end(job)
    eligible = _ts(job.get("eligible_time"))
    exit_text = f"{int(job.get('exit_code') or 0)}:{int(job.get('exit_signal') or 0)}"
    requeue = 0 if spec.get("requeue") is False else 1
    sched_eval = job.get("last_sched_eval") or job.get("start_time") or job.get("submit_time")
    lines = [
        f"JobId={job.get('job_id')} {_array_fields(job)}JobName={spec.get('name') or ''}",
        f"UserId={job.get('user')}({job.get('uid')}) GroupId={job.get('group')}({job.get('gid')}) MCS_label=N/A",
        f"Priority={int(job.get('priority') or 0)} Nice={int(spec.get('nice') or 0)} "
        f"Account={job.get('account') or job.get('user')} QOS={job.get('qos') or 'normal'}",
        f"JobState={job_state(job)} Reason={job.get('reason') or 'None'} Dependency={null_text(spec.get('dependency'))}",
        f"Requeue={requeue} Restarts={int(job.get('restart_count') or 0)} BatchFlag={0 if spec.get('interactive') else 1} Reboot=0 ExitCode={exit_text}",
    ]
    if details:
        lines.append("DerivedExitCode=0:0")
    time_min = spec.get("time_min")
    lines += [
        f"RunTime={_hms(job.get('run_time') or 0)} TimeLimit={_hms(job.get('time_limit'))} "
        f"TimeMin={'N/A' if not time_min else _hms(time_min)}",
        f"SubmitTime={_ts(job.get('submit_time'))} EligibleTime={eligible}",
        f"AccrueTime={eligible}",
        f"StartTime={start} EndTime={end} Deadline=N/A",
        f"SuspendTime=None SecsPreSuspend=0 LastSchedEval={_ts(sched_eval)} Scheduler={job.get('scheduler') or 'Main'}",
        f"Partition={job.get('partition') or ''} AllocNode:Sid={job.get('submit_host') or 'localhost'}:0",
        f"ReqNodeList={null_text(_compress(spec.get('nodelist')))} ExcNodeList={null_text(_compress(spec.get('exclude')))}",
        f"NodeList={job.get('nodelist') or ''}",
    ]
    if job.get("batch_host"):
        lines.append(f"BatchHost={job['batch_host']}")
    lines += [
        f"NumNodes={_num_nodes(job)} NumCPUs={job.get('num_cpus') or 1} NumTasks={job.get('num_tasks') or 1} "
        f"CPUs/Task={spec.get('cpus_per_task') or 1} ReqB:S:C:T=0:0:*:*",
        f"TRES={job.get('tres') or ''}",
        f"Socks/Node=* NtasksPerN:B:S:C={spec.get('ntasks_per_node') or 0}:0:*:* CoreSpec=*",
    ]
    if details:
        lines += _gres_detail(job)
    lines += [
        f"MinCPUsNode={spec.get('cpus_per_task') or 1} {_memory_field(job)} MinTmpDiskNode=0",
        f"Features={null_text(spec.get('constraint'))} DelayBoot=00:00:00",
        f"OverSubscribe={'NO' if spec.get('exclusive') else 'OK'} Contiguous=0 Licenses=(null) Network=(null)",
        f"Command={null_text(job.get('command'))}",
        f"WorkDir={spec.get('workdir') or ''}",
    ]
    if spec.get("comment"):
        lines.append(f"Comment={spec['comment']}")
    if job.get("system_comment"):
        lines.append(f"SystemComment={job['system_comment']}")
    lines += [
        f"StdErr={job.get('stderr_path') or ''}",
        f"StdIn={spec.get('stdin') or '/dev/null'}",
        f"StdOut={job.get('stdout_path') or ''}",
        "Power=",
    ]
    gtype = shape.get("gpu_type") or spec.get("gpu_type")
    if spec.get("gpus"):
        lines.append(f"TresPerJob={_gres_word(spec['gpus'], gtype)}")
    if spec.get("gpus_per_node"):
        lines.append(f"TresPerNode={_gres_word(spec['gpus_per_node'], gtype)}")
    if spec.get("gpus_per_task"):
        lines.append(f"TresPerTask={_gres_word(spec['gpus_per_task'], gtype)}")
    if spec.get("mem_per_gpu"):
        lines.append(f"MemPerTres=gres:gpu:{spec['mem_per_gpu']}")
    return lines


def format_record(lines: list[str], oneliner: bool) -> str:
    """Slurm's record layout: first line flush, the rest indented by three blanks, then a
    line of three blanks and an empty line; ``-o`` puts it all on one line."""
    if oneliner:
        return " ".join(lines) + " \n"
    return lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:]) + "   \n\n"


# --- nodes -----------------------------------------------------------------------------------


def node_state(node: dict) -> str:
    state = str(node.get("state") or "UNKNOWN")
    if node.get("drain"):
        state += "+DRAIN"
    if node.get("responding") is False:
        state += "+NOT_RESPONDING"
    return state


def node_record(node: dict) -> list[str]:
    cpus = int(node.get("cpus") or 0)
    sockets = int(node.get("sockets") or 1)
    threads = int(node.get("threads_per_core") or 1)
    cores = int(node.get("cores_per_socket") or max(1, cpus // (sockets * threads)))
    gpus = int(node.get("gpus") or 0)
    gres = node.get("gres") or (
        f"gpu:{node['gpu_type']}:{gpus}"
        if node.get("gpu_type") and gpus
        else (f"gpu:{gpus}" if gpus else "")
    )
    features = ",".join(node.get("features") or []) or "(null)"
    cfg = f"cpu={cpus},mem={_mem(node.get('real_memory'))},billing={cpus}"
    if gpus:
        cfg += f",gres/gpu={gpus}"
    alloc_parts = []
    if node.get("cpus_alloc"):
        alloc_parts.append(f"cpu={node['cpus_alloc']}")
    if node.get("mem_alloc"):
        alloc_parts.append(f"mem={_mem(node['mem_alloc'])}")
    if node.get("gpus_alloc"):
        alloc_parts.append(f"gres/gpu={node['gpus_alloc']}")
    lines = [
        f"NodeName={node.get('name')} Arch={node.get('arch') or '(null)'} CoresPerSocket={cores} ",
        f"CPUAlloc={int(node.get('cpus_alloc') or 0)} CPUEfctv={cpus} CPUTot={cpus} CPULoad=N/A",
        f"AvailableFeatures={features}",
        f"ActiveFeatures={features}",
        f"Gres={gres or '(null)'}",
        f"NodeAddr={node.get('addr')} NodeHostName={node.get('hostname') or node.get('addr')} "
        f"Port={node.get('port')} Version={node.get('version') or 'N/A'}",
        f"RealMemory={int(node.get('real_memory') or 0)} AllocMem={int(node.get('mem_alloc') or 0)} "
        f"FreeMem=N/A Sockets={sockets} Boards=1",
        f"State={node_state(node)} ThreadsPerCore={threads} TmpDisk=0 Weight={node.get('weight') or 1} "
        "Owner=N/A MCS_label=N/A",
        f"Partitions={','.join(node.get('partitions') or [])} ",
        f"BootTime={_ts(node.get('boot_time'), 'None')} SlurmdStartTime={_ts(node.get('agent_start_time'), 'None')}",
        "LastBusyTime=Unknown",
        f"CfgTRES={cfg}",
        f"AllocTRES={','.join(alloc_parts)}",
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if node.get("reason"):
        who = node.get("reason_user") or "root"
        lines.append(f"Reason={node['reason']} [{who}@{_ts(node.get('reason_time'))}]")
    return lines


def format_node(lines: list[str], oneliner: bool) -> str:
    if oneliner:
        return " ".join(line.strip() for line in lines) + " \n"
    return lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:]) + "\n"


# --- partitions ------------------------------------------------------------------------------


def _access(values: object) -> str:
    return ",".join(values) if values else "ALL"  # type: ignore[arg-type]


def partition_record(part: dict) -> list[str]:
    max_nodes = part.get("max_nodes")
    default_time = part.get("default_time")
    tres = (
        f"cpu={part.get('total_cpus') or 0},mem={_mem(part.get('total_mem'))},"
        f"node={part.get('total_nodes') or 0},billing={part.get('total_cpus') or 0}"
    )
    if part.get("total_gpus"):
        tres += f",gres/gpu={part['total_gpus']}"
    accounts = f"AllowAccounts={_access(part.get('allow_accounts'))}"
    if part.get("deny_accounts"):
        accounts = f"DenyAccounts={','.join(part['deny_accounts'])}"
    return [
        f"PartitionName={part.get('name')}",
        f"AllowGroups={_access(part.get('allow_groups'))} {accounts} AllowQos=ALL",
        f"AllocNodes=ALL Default={'YES' if part.get('default') else 'NO'} QoS=N/A",
        f"DefaultTime={'NONE' if default_time is None else _hms(default_time)} DisableRootJobs=NO "
        "ExclusiveUser=NO GraceTime=0 Hidden=NO",
        f"MaxNodes={'UNLIMITED' if max_nodes is None else max_nodes} MaxTime={_hms(part.get('max_time'))} "
        f"MinNodes={part.get('min_nodes') or 0} LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"Nodes={part.get('nodelist') or _compress(part.get('nodes'))}",
        f"PriorityJobFactor={part.get('priority_job_factor', 1)} PriorityTier={part.get('priority_tier', 1)} "
        f"RootOnly=NO ReqResv=NO OverSubscribe={part.get('oversubscribe') or 'NO'}",
        "OverTimeLimit=NONE PreemptMode=OFF",
        f"State={part.get('state') or 'UP'} TotalCPUs={part.get('total_cpus') or 0} "
        f"TotalNodes={part.get('total_nodes') or 0} SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"TRES={tres}",
    ]


# --- configuration ----------------------------------------------------------------------------


def config_text(settings: dict, now: float, ctld_host: str, conf: str) -> str:
    values = {str(k): str(v) for k, v in settings.items()}
    values.setdefault("SLURM_CONF", conf)
    values["SLURM_VERSION"] = SLURM_VERSION
    lines = [f"Configuration data as of {_ts(now)}"]
    for key in sorted(values, key=str.lower):
        lines.append(f"{key:<23} = {values[key]}")
    lines += ["", f"Slurmctld(primary) at {ctld_host} is UP"]
    return "\n".join(lines) + "\n"


# --- commands --------------------------------------------------------------------------------


def _matches(word: str, full: str, minimum: int) -> bool:
    """Slurm's abbreviations: ``word`` is a prefix of ``full`` at least ``minimum`` long."""
    w = word.lower()
    return len(w) >= minimum and full.startswith(w)


def _load_error(what: str, err: Exception) -> CommandError:
    from muster.protocol.client import ConnectError

    text = (
        connect_message(err) if isinstance(err, ConnectError) else getattr(err, "message", str(err))
    )
    return CommandError(f"slurm_load_{what} error: {text}", 1, raw=True)


def show(words: list[str], flags: Flags) -> int:
    if not words:
        raise CommandError("too few arguments for keyword:show", 1, raw=True)
    entity, eq, inline = words[0].partition("=")
    args = ([inline] if eq and inline else []) + words[1:]
    target = args[0] if args else None
    e = entity.lower()
    if _matches(e, "hostnames", 5):
        return show_hostnames(target)
    if _matches(e, "hostlistsorted", 9) or _matches(e, "hostlist", 5):
        return show_hostlist(target)
    if _matches(e, "jobs", 1) or e == "jobid":
        return show_jobs(target, flags)
    if _matches(e, "nodes", 1) or e == "nodename":
        return show_nodes(target, flags)
    if _matches(e, "partitions", 2) or e == "partitionname":
        return show_partitions(target, flags)
    if _matches(e, "config", 2):
        return show_config()
    if _matches(e, "steps", 2):
        from muster.cli.scontrol_steps import show_steps

        return show_steps(target, flags.oneliner)
    if _matches(e, "reservations", 3) or e == "reservationname":
        from muster.cli import reservation

        return reservation.show(target, flags.oneliner)
    raise CommandError(f"invalid entity:{entity} for keyword:show ", 1, raw=True)


def show_hostnames(expr: str | None) -> int:
    from muster.core.hostlist import HostlistError, expand

    text = expr or os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not text:
        raise CommandError("host list is empty (give one, or run inside a job)")
    try:
        print_lines(expand(text))
    except HostlistError as e:
        raise CommandError(str(e)) from None
    return 0


def show_hostlist(expr: str | None) -> int:
    from muster.core.hostlist import HostlistError, compress, expand

    if not expr:
        raise CommandError("host list is empty")
    try:
        names = expand(expr)
    except HostlistError as e:
        raise CommandError(str(e)) from None
    print_lines([compress(names)])
    return 0


def _job_id(text: str) -> str:
    """A job id as the user wrote it (``123``, ``123_4``, ``123_[1-3]``), checked; array
    task ranges come back one id per task for the query string."""
    from muster.core.arrays import parse_job_ref

    item = text.strip()
    if item.lower().startswith(("jobid=", "job=")):
        item = item.split("=", 1)[1]
    try:
        ref = parse_job_ref(item)
    except ValueError:
        raise CommandError("slurm_load_jobs error: Invalid job id specified", 1, raw=True) from None
    if ref.tasks is None:
        return str(ref.job_id)
    return ",".join(f"{ref.job_id}_{t}" for t in ref.tasks)


def show_jobs(target: str | None, flags: Flags) -> int:
    from muster.protocol.client import ApiError, ConnectError

    try:
        ctl = connect(PROG)
        if target is None:
            jobs = ctl.get("/v1/jobs").get("jobs") or []
        else:
            # an array's id names all its tasks, as in Slurm
            jobs = []
            for item in _split_ids(target):
                jobs.extend(ctl.get(f"/v1/jobs?job_id={_job_id(item)}").get("jobs") or [])
    except (ApiError, ConnectError) as e:
        raise _load_error("jobs", e) from None
    if not jobs:
        sys.stdout.write("No jobs in the system\n")
        return 0
    from muster.cli.jobarrays import merge_array_rows

    jobs = merge_array_rows(sorted(jobs, key=lambda j: int(j.get("job_id") or 0)))
    write_out("".join(format_record(job_record(j, flags.details), flags.oneliner) for j in jobs))
    return 0


def show_nodes(target: str | None, flags: Flags) -> int:
    from muster.protocol.client import ApiError, ConnectError

    names: list[str] = []
    if target:
        from muster.core.hostlist import HostlistError, expand

        try:
            names = expand(target)
        except HostlistError:
            names = [target]
    try:
        path = "/v1/nodes" + ("?name=" + ",".join(names) if names else "")
        nodes = connect(PROG).get(path).get("nodes") or []
    except (ApiError, ConnectError) as e:
        raise _load_error("node", e) from None
    if names:
        by_name = {n.get("name"): n for n in nodes}
        missing = [n for n in names if n not in by_name]
        if missing and not by_name:
            sys.stdout.write(f"Node {target} not found\n")
            return 1
        nodes = [by_name[n] for n in names if n in by_name]
    if not nodes:
        sys.stdout.write("No nodes in the system\n")
        return 0
    write_out("".join(format_node(node_record(n), flags.oneliner) for n in nodes))
    return 0


def show_partitions(target: str | None, flags: Flags) -> int:
    from muster.protocol.client import ApiError, ConnectError

    try:
        parts = connect(PROG).get("/v1/partitions").get("partitions") or []
    except (ApiError, ConnectError) as e:
        raise _load_error("partitions", e) from None
    if target:
        parts = [p for p in parts if p.get("name") == target]
        if not parts:
            sys.stdout.write(f"Partition {target} not found\n")
            return 1
    if not parts:
        sys.stdout.write("No partitions in the system\n")
        return 0
    write_out("".join(format_node(partition_record(p), flags.oneliner) for p in parts))
    return 0


def show_config() -> int:
    from muster.protocol.client import ApiError, ConnectError

    settings = load_settings(PROG)
    try:
        answer = connect(PROG, settings).get("/v1/config")
    except (ApiError, ConnectError) as e:
        raise _load_error("ctl_conf", e) from None
    write_out(
        config_text(
            answer.get("settings") or {},
            float(answer.get("now") or 0),
            settings.ctld_host,
            settings.path,
        )
    )
    return 0


def ping() -> int:
    from muster.protocol.client import ApiError, ConnectError

    settings = load_settings(PROG)
    try:
        connect(PROG, settings).get("/v1/ping")
    except (ApiError, ConnectError):
        sys.stdout.write(f"Slurmctld(primary) at {settings.ctld_host} is DOWN\n")
        return 1
    sys.stdout.write(f"Slurmctld(primary) at {settings.ctld_host} is UP\n")
    return 0


def _id_list(words: list[str]) -> list[str]:
    out = []
    for word in words:
        item = word
        for prefix in ("jobid=", "job="):
            if item.lower().startswith(prefix):
                item = item[len(prefix) :]
        out.extend(_split_ids(item))
    return out


def _split_ids(text: str) -> list[str]:
    """``split_ids`` with each id stripped."""
    return [i.strip() for i in split_ids(text)]


def _path_id(item: str) -> str:
    """A job id for a URL path (``123_[1-3]`` percent-encoded)."""
    return item.replace("%", "%25").replace("[", "%5B").replace("]", "%5D").replace(",", "%2C")


def _valid_id(item: str) -> bool:
    """``123``, or array tasks ``123_4`` / ``123_[1-3]`` (the controller resolves them)."""
    from muster.core.arrays import parse_job_ref

    try:
        parse_job_ref(item)
    except ValueError:
        return False
    return True


def hold_release(op: str, words: list[str], flags: Flags) -> int:
    """``hold``, ``uhold``/``holdu``, ``release``, ``requeue`` and ``requeuehold``; errors
    read ``<reason> for job <id>``."""
    from muster.protocol.client import ApiError, ConnectError

    ids = _id_list(words)
    if not ids:
        raise CommandError(f"too few arguments for keyword:{op}", 1, raw=True)
    rc = 0
    ctl = None
    for item in ids:
        if not _valid_id(item):
            if not flags.quiet:
                sys.stderr.write(f"Invalid job id specified for job {item}\n")
            rc = 1
            continue
        try:
            if ctl is None:
                ctl = connect(PROG)
            if op == "release":
                ctl.post(f"/v1/jobs/{_path_id(item)}/release")
            elif op in ("requeue", "requeuehold"):
                ctl.post(f"/v1/jobs/{_path_id(item)}/requeue", {"hold": op == "requeuehold"})
            else:
                ctl.post(f"/v1/jobs/{_path_id(item)}/hold", {"admin": op == "hold"})
        except ConnectError as e:
            raise CommandError(f"slurm_update error: {connect_message(e)}", 1, raw=True) from None
        except ApiError as e:
            if not flags.quiet:
                sys.stderr.write(f"{e.message} for job {item}\n")
            rc = 1
    return rc


# update keys (lower case) -> body field
_UPDATE_KEYS = {
    "timelimit": "time_limit",
    "priority": "priority",
    "nice": "nice",
    "name": "name",
    "jobname": "name",
    "partition": "partition",
    "comment": "comment",
    "starttime": "begin_time",
    "begintime": "begin_time",
    "numnodes": "min_nodes",
    "minnodes": "min_nodes",
    "reqnodes": "min_nodes",
    "arraytaskthrottle": "array_throttle",
}


def parse_update(words: list[str], now: float | None = None) -> tuple[list[str], dict[str, object]]:
    """``jobid=N key=value ...`` -> (job ids, update body). Keys are case-blind."""
    ids: list[str] = []
    body: dict[str, object] = {}
    for word in words:
        key, eq, value = word.partition("=")
        k = key.lower()
        if not eq:
            raise CommandError(f"Invalid input: {word}\n{PROG}: error: Request aborted")
        if k in ("jobid", "job"):
            ids.extend(_split_ids(value))
            continue
        field = _UPDATE_KEYS.get(k)
        if field is None:
            raise CommandError(
                f"Update of this parameter is not supported: {word}\n{PROG}: error: Request aborted"
            )
        body[field] = _update_value(field, key, value, now)
    if not ids:
        raise CommandError("No job ID specified\nscontrol: error: Request aborted")
    if not body:
        raise CommandError("No changes specified\nscontrol: error: Request aborted")
    return ids, body


_NICE_RANGE = 2147483645  # Slurm's NICE_OFFSET - 3


def _update_value(field: str, key: str, value: str, now: float | None) -> object:
    if field == "time_limit":
        from muster.core.timefmt import MAX_TIME_LIMIT, TimeFormatError, parse_time_limit

        try:
            seconds = parse_time_limit(value)
        except TimeFormatError:
            raise CommandError(f"Invalid TimeLimit value: {value}") from None
        if not seconds:
            raise CommandError("TimeLimit=UNLIMITED is not supported by muster's update")
        if seconds > MAX_TIME_LIMIT:
            raise CommandError("Invalid time limit specification")
        return seconds
    if field in ("priority", "nice", "array_throttle"):
        text = value.strip()
        digits = text[1:] if text[:1] in "+-" else text
        if not (digits.isascii() and digits.isdigit()):
            raise CommandError(f"Invalid {key} value: {value}")
        number = int(text)
        if field == "nice" and abs(number) > _NICE_RANGE:
            raise CommandError(f"Nice value out of range (+/- {_NICE_RANGE}). Value ignored")
        if field == "priority" and not 0 <= number < 2**32 - 1:
            raise CommandError(f"Invalid {key} value: {value}")
        if field == "array_throttle" and not 0 <= number <= 2**31 - 1:
            raise CommandError(f"Invalid {key} value: {value}")
        return number
    if field == "min_nodes":
        lo = value.split("-", 1)[0]
        if not (lo.isascii() and lo.isdigit()) or not 1 <= int(lo) <= 2**31 - 1:
            raise CommandError(f"Invalid {key} value: {value}")
        return int(lo)
    if field == "begin_time":
        from muster.core.timefmt import TimeFormatError, parse_timestamp

        if now is None:
            from muster.core.clock import SystemClock

            now = SystemClock().now()
        try:
            return parse_timestamp(value, now)
        except TimeFormatError:
            raise CommandError(f"Invalid StartTime value: {value}") from None
    return value


def update(words: list[str], flags: Flags) -> int:
    from muster.protocol.client import ApiError, ConnectError

    if not words:
        raise CommandError("too few arguments for keyword:update", 1, raw=True)
    first = words[0].split("=", 1)[0].lower()
    if first in ("reservationname", "reservation"):
        from muster.cli import reservation

        return reservation.update(words)
    if first in ("nodename", "node"):
        return update_nodes(words)
    if first in ("partitionname", "partition", "stepid"):
        raise CommandError(f"updating {first} records is not supported by muster yet")
    ids, body = parse_update(words)
    rc = 0
    ctl = connect(PROG)
    for item in ids:
        if not _valid_id(item):
            sys.stderr.write(f"Invalid job id specified for job {item}\n")
            rc = 1
            continue
        try:
            ctl.post(f"/v1/jobs/{_path_id(item)}/update", body)
        except ConnectError as e:
            raise CommandError(f"slurm_update error: {connect_message(e)}", 1, raw=True) from None
        except ApiError as e:
            if not flags.quiet:
                sys.stderr.write(f"{e.message} for job {item}\n")
            rc = 1
    return rc


def update_nodes(words: list[str]) -> int:
    """``scontrol update NodeName=node[1-2] State=DRAIN Reason="disk"``."""
    from muster.core.hostlist import HostlistError, expand
    from muster.protocol.client import ApiError, ConnectError

    body: dict[str, object] = {}
    for word in words:
        key, eq, value = word.partition("=")
        k = key.lower()
        if not eq:
            raise CommandError(f"Invalid input: {word}", 1)
        if k in ("nodename", "node"):
            try:
                body["names"] = expand(value)
            except HostlistError as e:
                raise CommandError(str(e)) from None
        elif k == "state":
            body["state"] = value
        elif k == "reason":
            body["reason"] = value
        else:
            raise CommandError(f"Update of {key} is not supported by muster", 1)
    try:
        connect(PROG).post("/v1/nodes/update", body)
    except ConnectError as e:
        raise CommandError(f"slurm_update error: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"slurm_update error: {e.message}", 1, raw=True) from None
    return 0


def reconfigure(flags: Flags) -> int:
    """``scontrol reconfigure``: the controller re-reads its file (``ctld.reconfig``); like
    Slurm, nothing is printed when all is well. Settings that changed are named on stderr
    since musterctld applies them only when it restarts."""
    from muster.protocol.client import ApiError, ConnectError

    try:
        answer = connect(PROG).post("/v1/reconfigure", {})
    except ConnectError as e:
        raise CommandError(f"slurm_reconfigure error: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"slurm_reconfigure error: {e.message}", 1, raw=True) from None
    changed = answer.get("changed") or []
    if changed and not flags.quiet:
        sys.stderr.write(
            f"{PROG}: warning: changed in the configuration file, applied when musterctld "
            f"restarts: {', '.join(changed)}\n"
        )
    return 0


def run(words: list[str], flags: Flags) -> int:
    """One scontrol command line (after the options)."""
    if not words:
        return 0
    cmd = words[0].lower()
    rest = words[1:]
    if _matches(cmd, "show", 3) or _matches(cmd, "list", 3):
        return show(rest, flags)
    if cmd in ("hold", "uhold", "holdu", "release", "requeue", "requeuehold"):
        return hold_release("uhold" if cmd == "holdu" else cmd, rest, flags)
    if _matches(cmd, "update", 1):
        return update(rest, flags)
    if _matches(cmd, "ping", 2):
        return ping()
    if _matches(cmd, "version", 4):
        sys.stdout.write(version_line() + "\n")
        return 0
    if cmd in ("help", "-h"):
        sys.stdout.write(HELP)
        return 0
    if _matches(cmd, "reconfigure", 3):
        return reconfigure(flags)
    if cmd in ("create", "delete") and rest and rest[0].lower().startswith("res"):
        from muster.cli import reservation

        return reservation.create(rest) if cmd == "create" else reservation.delete(rest[1:] or rest[:1])
    if cmd in (
        "suspend",
        "resume",
        "shutdown",
        "takeover",
        "create",
        "delete",
        "reboot",
        "notify",
        "top",
        "wait_job",
        "listpids",
        "token",
    ):
        raise CommandError(f"scontrol {cmd} is not supported by muster yet")
    raise CommandError(f"invalid keyword: {words[0]}", 1, raw=True)


def interactive(flags: Flags) -> int:
    """No command given: read commands from stdin, one per line, as Slurm's prompt does."""
    import shlex

    rc = 0
    tty = sys.stdin.isatty()
    while True:
        if tty:
            sys.stdout.write("scontrol: ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            return rc
        try:
            words = shlex.split(line)
        except ValueError as e:
            rc = report(PROG, CommandError(str(e)))
            continue
        if words and words[0].lower() in ("quit", "exit"):
            return rc
        try:
            rc = run(words, flags)
        except CommandError as e:
            rc = report(PROG, e)


def main(argv: list[str] | None = None) -> int:
    args = argv_or_sys(argv)
    try:
        parsed, words = getopt(args, OptionTable(OPTIONS))
    except OptionError as e:
        sys.stderr.write(f'{PROG}: {e}\nTry "{PROG} --help" for more information\n')
        return 1
    flags = Flags()
    for opt, _ in parsed:
        if opt.key == "help":
            sys.stdout.write(HELP)
            return 0
        if opt.key == "usage":
            sys.stdout.write(HELP)
            return 0
        if opt.key == "version":
            sys.stdout.write(version_line() + "\n")
            return 0
        if opt.key == "details":
            flags.details = True
        elif opt.key == "oneliner":
            flags.oneliner = True
        elif opt.key == "quiet":
            flags.quiet = True
    try:
        if not words:
            return interactive(flags)
        return run(words, flags)
    except CommandError as e:
        return report(PROG, e)


HELP = """\
scontrol [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -a or --all: equivalent to "all" command
     -d or --details: equivalent to "details" command
     -h or --help: equivalent to "help" command
     -o or --oneliner: equivalent to "oneliner" command
     -Q or --quiet: equivalent to "quiet" command
     -V or --version: equivalent to "version" command

  <keyword> may be omitted from the execute line and scontrol will execute
  in interactive mode. It will process commands as entered until explicitly
  terminated.

    Valid <COMMAND> values are:
     hold <job_list>          place a job on hold (an administrator's hold
                              when run by an administrator)
     uhold <job_list>         place a job on user hold
     release <job_list>       release a held job
     ping                     print status of slurmctld daemons
     reconfigure              have the controller re-read the configuration
                              file (it reports what it could not apply)
     requeue <job_list>       requeue a batch job
     requeuehold <job_list>   requeue a batch job and hold it
     create reservation <SPEC>  create a reservation
     delete reservation=<name>  delete a reservation
     show <ENTITY> [<ID>]     display state of identified entity, default
                              is all records
     update job=<id> <SPEC>   update a job: TimeLimit, Priority, Nice,
                              JobName, Partition, Comment, StartTime,
                              NumNodes
     version                  display tool version number
     quit                     terminate this command

    Valid <ENTITY> values are:
     config, hostlist, hostlistsorted, hostnames, job, node, partition

  All commands and options are case-insensitive, although node names and
  partition names tests are case-sensitive (node names "LX" and "lx" are
  distinct).
"""


if __name__ == "__main__":
    sys.exit(main())
