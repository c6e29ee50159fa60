"""``scontrol show``'s records: jobs, nodes, partitions and the configuration in Slurm
22.05's layout, field for field where muster knows the value.

Fields muster does not track show Slurm's own "unknown" spellings (``N/A``, ``(null)``),
never made-up numbers. Every function takes wire dicts (docs/api.md) and returns text
(``*_record`` a list of ``Key=Value`` lines, ``format_*`` the record as printed, one line
with ``-o``), so the layouts are tested without a controller.
"""

from muster.cli.common import SLURM_VERSION
from muster.slurm.columns import null_text, timefmt

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

# --- small value helpers -------------------------------------------------------------------


def _hms(seconds: "Any") -> str:
    text: str = timefmt().format_hms(None if seconds is None else int(seconds))
    return text


def _ts(epoch: "Any", none: str = "Unknown") -> str:
    text: str = timefmt().format_timestamp(epoch, none=none)
    return text


def _mem(mb: "Any") -> str:
    from muster.core.memtext import format_mem

    return format_mem(int(mb or 0))


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


def _spec(job: dict[str, "Any"]) -> dict[str, "Any"]:
    spec = job.get("spec")
    return spec if isinstance(spec, dict) else {}


def _gres_word(count: object, gtype: object) -> str:
    return f"gres:gpu:{gtype}:{count}" if gtype else f"gres:gpu:{count}"


# --- jobs ----------------------------------------------------------------------------------


def job_state(job: dict[str, "Any"]) -> str:
    if job.get("completing") or job.get("state_code") == "CG":
        return "COMPLETING"
    return str(job.get("state") or "UNKNOWN")


def _hang_evidence(job: dict[str, "Any"]) -> str | None:
    """muster's: the processes read on each node of the latest attempt judged hung, and
    the command that shows them (docs/training.md)."""
    found = [a for a in job.get("attempts") or [] if a.get("hang_judged") or a.get("evidence")]
    progress = job.get("progress") or {}
    if progress.get("hang_judged"):
        found.append({**progress, "attempt": job.get("restart_count")})
    if not found:
        return None
    last = found[-1]
    counts = last.get("evidence") or {}
    where = ",".join(f"{n}:{c}" for n, c in sorted(counts.items())) or "pending"
    return f"attempt={last.get('attempt')} processes={where} (muster hang-evidence {job.get('job_id')})"


def _num_nodes(job: dict[str, "Any"]) -> str:
    spec = _spec(job)
    if job.get("state") == "PENDING" and spec.get("min_nodes") and spec.get("max_nodes"):
        return f"{spec['min_nodes']}-{spec['max_nodes']}"
    return str(job.get("num_nodes") or 1)


def _start_end(job: dict[str, "Any"]) -> tuple[str, str]:
    spec = _spec(job)
    state = job.get("state")
    start = job.get("start_time")
    if state == "PENDING":
        planned = job.get("planned_start") or spec.get("begin_time")
        return _ts(planned), "Unknown"
    if job.get("end_time"):
        return _ts(start), _ts(job["end_time"])
    limit = job.get("time_limit")
    # a job's suspended time is added to its end (``ctld.suspend``), as Slurm extends it
    paused = float(job.get("suspended_secs") or 0)
    end = _ts(float(start) + int(limit) + paused) if start and limit is not None else "Unknown"
    return _ts(start), end


def _suspend_fields(job: dict[str, "Any"]) -> str:
    """``SuspendTime`` (the last suspend or resume) and ``SecsPreSuspend`` (the seconds it
    ran before its current suspension)."""
    when = job.get("suspend_time")
    if not when:
        return "SuspendTime=None SecsPreSuspend=0"
    pre = 0
    if job.get("suspended_at") is not None and job.get("start_time") is not None:
        pre = int(float(job["suspended_at"]) - float(job["start_time"]) - float(job.get("suspended_secs") or 0))
    return f"SuspendTime={_ts(when)} SecsPreSuspend={max(0, pre)}"


def _memory_field(job: dict[str, "Any"]) -> str:
    spec = _spec(job)
    shape = job.get("shape") or {}
    if spec.get("mem_per_cpu"):
        return f"MinMemoryCPU={spec['mem_per_cpu']}M"
    if spec.get("mem_per_node") is not None:
        return f"MinMemoryNode={_mem(spec['mem_per_node'])}" if spec["mem_per_node"] else "MinMemoryNode=0"
    per_node = int(shape.get("mem_per_node") or 0)
    cpus = int(shape.get("cpus_per_node") or 1)
    if spec.get("mem_per_gpu") or not per_node:
        return "MinMemoryNode=0" if not per_node else f"MinMemoryNode={_mem(per_node)}"
    if per_node % cpus == 0:
        return f"MinMemoryCPU={per_node // cpus}M"
    return f"MinMemoryNode={_mem(per_node)}"


def _gres_detail(job: dict[str, "Any"]) -> list[str]:
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


def _array_fields(job: dict[str, "Any"]) -> str:
    """``ArrayJobId=.. ArrayTaskId=.. [ArrayTaskThrottle=..] `` for array tasks."""
    if job.get("array_job_id") is None:
        return ""
    from muster.slurm.jobarrays import array_task_text

    text = f"ArrayJobId={job['array_job_id']} ArrayTaskId={array_task_text(job)} "
    if job.get("array_throttle"):
        text += f"ArrayTaskThrottle={job['array_throttle']} "
    return text


def _het_fields(job: dict[str, "Any"]) -> str:
    """``HetJobId=.. HetJobOffset=.. `` for a heterogeneous job's components."""
    if job.get("het_job_id") is None:
        return ""
    return f"HetJobId={job['het_job_id']} HetJobOffset={job.get('het_job_offset') or 0} "


def _het_set(job: dict[str, "Any"]) -> list[str]:
    """``HetJobIdSet=60-61``: every component's job id, on the line after the first."""
    if job.get("het_job_id") is None:
        return []
    return [f"HetJobIdSet={job.get('het_job_id_set') or job['het_job_id']}"]


def job_record(job: dict[str, "Any"], details: bool = False) -> list[str]:
    """``scontrol show job``'s lines for one job (without indentation)."""
    spec = _spec(job)
    shape = job.get("shape") or {}
    start, end = _start_end(job)
    eligible = _ts(job.get("eligible_time"))
    exit_text = f"{int(job.get('exit_code') or 0)}:{int(job.get('exit_signal') or 0)}"
    requeue = 0 if spec.get("requeue") is False else 1
    sched_eval = job.get("last_sched_eval") or job.get("start_time") or job.get("submit_time")
    lines = [
        f"JobId={job.get('job_id')} {_array_fields(job)}{_het_fields(job)}JobName={spec.get('name') or ''}",
        *_het_set(job),
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
        f"StartTime={start} EndTime={end} Deadline={_ts(spec.get('deadline')) if spec.get('deadline') else 'N/A'}",
        f"{_suspend_fields(job)} LastSchedEval={_ts(sched_eval)} Scheduler={job.get('scheduler') or 'Main'}",
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
        f"MinCPUsNode={spec.get('min_cpus') or spec.get('cpus_per_task') or 1} {_memory_field(job)} "
        f"MinTmpDiskNode={spec.get('tmp_disk') or 0}",
        f"Features={null_text(spec.get('constraint'))} DelayBoot=00:00:00",
        f"OverSubscribe={'NO' if spec.get('exclusive') else 'OK'} Contiguous=0 Licenses=(null) Network=(null)",
        f"Command={null_text(job.get('command'))}",
        f"WorkDir={spec.get('workdir') or ''}",
    ]
    if spec.get("comment"):
        lines.append(f"Comment={spec['comment']}")
    if job.get("system_comment"):
        lines.append(f"SystemComment={job['system_comment']}")
    hang = _hang_evidence(job)
    if hang:
        lines.append(f"HangEvidence={hang}")
    if job.get("stragglers"):  # muster's: nodes slower than their peers (docs/training.md)
        lines.append(f"Stragglers={job['stragglers']}")
    if job.get("replacements"):  # muster's: failed nodes replaced in the running job (docs/recovery.md)
        told = (f"{r.get('old')}>{r.get('new')}({r.get('cause')})" for r in job["replacements"])
        lines.append("Replaced=" + ",".join(told))
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
    if spec.get("mail_type"):  # --mail-type (docs/mail.md); MailDomain is added when mailing
        lines.append(
            f"MailUser={spec.get('mail_user') or job.get('user') or ''} MailType={','.join(spec['mail_type'])}"
        )
    return lines


def format_record(lines: list[str], oneliner: bool) -> str:
    """Slurm's record layout: first line flush, the rest indented by three blanks, then a
    line of three blanks and an empty line; ``-o`` puts it all on one line."""
    if oneliner:
        return " ".join(lines) + " \n"
    return lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:]) + "   \n\n"


# --- nodes -----------------------------------------------------------------------------------


def node_state(node: dict[str, "Any"]) -> str:
    state = str(node.get("state") or "UNKNOWN")
    if node.get("drain"):
        state += "+DRAIN"
    if node.get("responding") is False:
        state += "+NOT_RESPONDING"
    return state


def node_record(node: dict[str, "Any"]) -> list[str]:
    cpus = int(node.get("cpus") or 0)
    sockets = int(node.get("sockets") or 1)
    threads = int(node.get("threads_per_core") or 1)
    cores = int(node.get("cores_per_socket") or max(1, cpus // (sockets * threads)))
    gpus = int(node.get("gpus") or 0)
    gres = node.get("gres") or (
        f"gpu:{node['gpu_type']}:{gpus}" if node.get("gpu_type") and gpus else (f"gpu:{gpus}" if gpus else "")
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
        *(
            [f"ConfigHash={node.get('config_hash')} DiffersFromController={node['config_mismatch']}"]
            if node.get("config_mismatch")
            else []
        ),
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
    if node.get("containment"):  # muster's own: what confines jobs there (docs/containment.md)
        lines.append(f"Containment={node['containment']}")
    if node.get("reason"):
        who = node.get("reason_user") or "root"
        lines.append(f"Reason={node['reason']} [{who}@{_ts(node.get('reason_time'))}]")
    for f in node.get("failures") or []:  # muster's own: the failure ledger (docs/recovery.md)
        evidence = " ".join(str(f.get("evidence") or "(null)").split())
        lines.append(
            f"Failure={_ts(f.get('time'))} Kind={f.get('kind')} JobId={f.get('job_id') or 'None'} "
            f"Attribution={f.get('attribution') or 'None'} Action={f.get('action') or 'None'} "
            f"Evidence={evidence}"
        )
    return lines


def format_node(lines: list[str], oneliner: bool) -> str:
    if oneliner:
        return " ".join(line.strip() for line in lines) + " \n"
    return lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:]) + "\n"


# --- partitions ------------------------------------------------------------------------------


def _access(values: object) -> str:
    return ",".join(values) if values else "ALL"  # type: ignore[arg-type]


def partition_record(part: dict[str, "Any"]) -> list[str]:
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
        f"ExclusiveUser=NO GraceTime={part.get('grace_time') or 0} Hidden=NO",
        f"MaxNodes={'UNLIMITED' if max_nodes is None else max_nodes} MaxTime={_hms(part.get('max_time'))} "
        f"MinNodes={part.get('min_nodes') or 0} LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"Nodes={part.get('nodelist') or _compress(part.get('nodes'))}",
        f"PriorityJobFactor={part.get('priority_job_factor', 1)} PriorityTier={part.get('priority_tier', 1)} "
        f"RootOnly=NO ReqResv=NO OverSubscribe={part.get('oversubscribe') or 'NO'}",
        f"OverTimeLimit=NONE PreemptMode={part.get('preempt_mode') or 'OFF'}",
        f"State={part.get('state') or 'UP'} TotalCPUs={part.get('total_cpus') or 0} "
        f"TotalNodes={part.get('total_nodes') or 0} SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"TRES={tres}",
    ]


# --- configuration ----------------------------------------------------------------------------


def config_text(
    settings: dict[str, "Any"],
    now: float,
    ctld_host: str,
    conf: str,
    computed: dict[str, "Any"] | None = None,
    pings: list["Any"] | None = None,
) -> str:
    """``scontrol show config`` (``cli.showconfig``): every parameter, Slurm's order and units,
    then the controllers' ping lines (``pings``; the primary alone by default)."""
    from muster.cli.showconfig import config_lines

    run = {"SLURM_CONF": conf, "SLURM_VERSION": SLURM_VERSION, **(computed or {})}
    lines = [f"Configuration data as of {_ts(now)}", *config_lines(settings, run)]
    lines += ["", *(pings or [f"Slurmctld(primary) at {ctld_host} is UP"])]
    return "\n".join(lines) + "\n"
