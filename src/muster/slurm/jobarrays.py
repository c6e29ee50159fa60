"""Job arrays as the commands show them (squeue, scontrol, sacct): ``123_4`` for a task, and the
pending tasks of an array that wait for the same reason merged into one row or record,
``123_[5-99%10]``, as Slurm keeps them in one record until they start.

Jobs are the controller's ``JobWire`` dicts; a merged row is a copy of its first task with
``array_tasks_text`` set (the task ids and the throttle, ``5-99%10``).
"""

TYPE_CHECKING = False  # typing and collections.abc cost a command milliseconds to import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["array_job_id_text", "array_task_text", "job_id_text", "merge_array_records", "merge_array_rows"]


def job_id_text(job: dict[str, "Any"]) -> str:
    """``%i``: ``123``, an array task ``123_4``, pending tasks merged ``123_[5-9%2]``, or
    component k of heterogeneous job 123: ``123+k``."""
    merged = job.get("array_tasks_text")
    if merged:
        return f"{job.get('array_job_id')}_[{merged}]"
    task = job.get("array_task_id")
    if task is None:
        het = job.get("het_job_id")
        if het is not None and job.get("het_job_offset") is not None:
            return f"{het}+{job['het_job_offset']}"  # a heterogeneous job's component
        return str(job.get("job_id"))
    return f"{job.get('array_job_id')}_{task}"


def array_job_id_text(job: dict[str, "Any"]) -> str:
    value = job.get("array_job_id")
    return str(value if value is not None else job.get("job_id"))


def array_task_text(job: dict[str, "Any"]) -> str:
    merged: str | None = job.get("array_tasks_text")
    if merged:
        return merged
    task = job.get("array_task_id")
    return "N/A" if task is None else str(task)


def merge_array_rows(jobs: list[dict[str, "Any"]]) -> list[dict[str, "Any"]]:
    """One row for the pending tasks of an array that wait for the same reason (Slurm keeps
    those in a single record); the row stands where its first task would."""
    return _merge_pending(
        jobs, lambda j: (j["array_job_id"], j.get("reason")), lambda j, text: {**j, "array_tasks_text": text}
    )


def merge_array_records(records: list[dict[str, "Any"]]) -> list[dict[str, "Any"]]:
    """sacct's rows: the pending tasks of an array in one record, ``123_[5-99%10]`` (Slurm's
    database holds them as one until they start), where its first task would stand.

    Records are ``ctld.records.record_wire`` dicts; the merged one is a copy of its first
    task's with ``job_id_text`` changed."""
    return _merge_pending(
        records, lambda r: r["array_job_id"], lambda r, text: {**r, "job_id_text": f"{r['array_job_id']}_[{text}]"}
    )


def _merge_pending(
    items: list[dict[str, "Any"]],
    key: "Callable[[dict[str, Any]], object]",
    merged: "Callable[[dict[str, Any], str], dict[str, Any]]",
) -> list[dict[str, "Any"]]:
    """Pending array tasks sharing ``key`` become one item, ``merged(first, "2-5%2")``, in
    the first one's place; a task alone in its group stays as it is."""

    def pending(item: dict[str, "Any"]) -> bool:
        return item.get("array_job_id") is not None and item.get("state") == "PENDING"

    groups: dict[object, list[dict[str, Any]]] = {}
    for item in items:
        if pending(item):
            groups.setdefault(key(item), []).append(item)
    if not any(len(g) > 1 for g in groups.values()):
        return items
    out = []
    for item in items:
        group = groups[key(item)] if pending(item) else [item]
        if len(group) == 1:
            out.append(item)
        elif group[0] is item:
            from muster.core.arrays import format_ranges

            text = format_ranges(int(t["array_task_id"]) for t in group)
            if item.get("array_throttle"):
                text += f"%{item['array_throttle']}"
            out.append(merged(item, text))
    return out
