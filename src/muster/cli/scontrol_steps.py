"""``scontrol show step [JOB[.STEP]]``: running job steps in Slurm's record layout
(``shared/reference/slurm-22.05/fmt_scontrol_show_steps.txt``), one blank line after each,
or one line each with ``-o``."""

from __future__ import annotations

from muster.cli.common import CommandError, write_out
from muster.client.controller import connect, connect_message

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any


def format_step(step: dict[str, Any], oneliner: bool = False) -> str:
    from muster.core import timefmt

    limit = step.get("time_limit")
    batch = step.get("step_id") == "batch"
    lines = [
        f"StepId={step.get('id')} UserId={step.get('uid')} "
        f"StartTime={timefmt.format_timestamp(step.get('start_time'))} "
        f"TimeLimit={'UNLIMITED' if limit is None else timefmt.format_duration(int(limit))}",
        f"State={step.get('state')} Partition={step.get('partition')} NodeList={step.get('nodelist')}",
        f"Nodes={step.get('num_nodes')} CPUs={0 if batch else step.get('num_cpus')} "
        f"Tasks={step.get('num_tasks')} Name={step.get('name')} Network=(null)",
        f"TRES={step.get('tres') or '(null)'}",
        "ResvPorts=(null)",
        "CPUFreqReq=Default" + ("" if batch else f" Dist={str(step.get('distribution') or 'block').capitalize()}"),
        f"SrunHost:Pid={step.get('srun_host') or '(null)'}:{int(step.get('srun_pid') or 0)}",
    ]
    if step.get("tres_per_node"):
        lines.append(f"TresPerNode={step['tres_per_node']}")
    if oneliner:
        return " ".join(lines) + "\n"
    return "\n   ".join(lines) + "\n\n"


def show_steps(target: str | None, oneliner: bool) -> int:
    from muster.protocol.client import ApiError, ConnectError

    job_text, _, step_text = (target or "").partition(".")
    if job_text and not job_text.isdigit():
        raise CommandError("slurm_get_job_steps error: Invalid job id specified", 1, raw=True)
    path = "/v1/steps" + (f"?job_id={job_text}" if job_text else "")
    try:
        steps = connect("scontrol").get(path).get("steps") or []
    except ConnectError as e:
        raise CommandError(f"slurm_get_job_steps error: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"slurm_get_job_steps error: {e.message}", 1, raw=True) from None
    if step_text:
        steps = [s for s in steps if str(s.get("step_id")) == step_text]
    if not steps:
        if target:
            write_out(f"Job step {target}{'' if step_text else '.*'} not found\n")
            return 1
        write_out("No job steps in the system\n")
        return 0
    write_out("".join(format_step(s, oneliner) for s in steps))
    return 0
