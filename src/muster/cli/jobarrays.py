"""Job arrays as the commands show them (squeue, scontrol, sacct): ``123_4`` for a task, and the
pending tasks of an array that wait for the same reason merged into one row or record,
``123_[5-99%10]``, as Slurm keeps them in one record until they start.

Jobs are the controller's ``JobWire`` dicts; a merged row is a copy of its first task with
``array_tasks_text`` set (the task ids and the throttle, ``5-99%10``).
"""

from __future__ import annotations

from muster.core.arrays import format_ranges

__all__ = ["array_job_id_text", "array_task_text", "job_id_text", "merge_array_records", "merge_array_rows"]


def job_id_text(job: dict) -> str:
    """``%i``: ``123``, an array task ``123_4``, or pending tasks merged ``123_[5-9%2]``."""
    merged = job.get("array_tasks_text")
    if merged:
        return f"{job.get('array_job_id')}_[{merged}]"
    task = job.get("array_task_id")
    if task is None:
        return str(job.get("job_id"))
    return f"{job.get('array_job_id')}_{task}"


def array_job_id_text(job: dict) -> str:
    value = job.get("array_job_id")
    return str(value if value is not None else job.get("job_id"))


def array_task_text(job: dict) -> str:
    merged = job.get("array_tasks_text")
    if merged:
        return merged
    task = job.get("array_task_id")
    return "N/A" if task is None else str(task)


def merge_array_rows(jobs: list[dict]) -> list[dict]:
    """One row for the pending tasks of an array that wait for the same reason (Slurm keeps
    those in a single record); the row stands where its first task would."""
    groups: dict[tuple[object, object], list[dict]] = {}
    for job in jobs:
        if job.get("array_job_id") is not None and job.get("state") == "PENDING":
            groups.setdefault((job["array_job_id"], job.get("reason")), []).append(job)
    if not groups:
        return jobs
    out = []
    for job in jobs:
        if job.get("array_job_id") is None or job.get("state") != "PENDING":
            out.append(job)
            continue
        group = groups[(job["array_job_id"], job.get("reason"))]
        if len(group) == 1:
            out.append(job)
        elif group[0] is job:
            text = format_ranges(int(j["array_task_id"]) for j in group)
            if job.get("array_throttle"):
                text += f"%{job['array_throttle']}"
            out.append({**job, "array_tasks_text": text})
    return out


def merge_array_records(records: list[dict]) -> list[dict]:
    """sacct's rows: the pending tasks of an array in one record, ``123_[5-99%10]`` (Slurm's
    database holds them as one until they start), where its first task would stand.

    Records are ``ctld.records.record_wire`` dicts; the merged one is a copy of its first
    task's with ``job_id_text`` changed."""
    groups: dict[object, list[dict]] = {}
    for rec in records:
        if rec.get("array_job_id") is not None and rec.get("state") == "PENDING":
            groups.setdefault(rec["array_job_id"], []).append(rec)
    if not any(len(g) > 1 for g in groups.values()):
        return records
    out = []
    for rec in records:
        group = groups.get(rec.get("array_job_id")) if rec.get("state") == "PENDING" else None
        if group is None or len(group) == 1:
            out.append(rec)
        elif group[0] is rec:
            text = format_ranges(int(r["array_task_id"]) for r in group)
            if rec.get("array_throttle"):
                text += f"%{rec['array_throttle']}"
            out.append({**rec, "job_id_text": f"{rec['array_job_id']}_[{text}]"})
    return out
