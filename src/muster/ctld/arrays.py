"""Job arrays in the controller: one submission becomes one job per task.

``make_tasks`` turns the job built from an ``--array`` submission into its tasks. They take
consecutive job ids from the submission's own, so the array job id (``%A``,
``SLURM_ARRAY_JOB_ID``) is the first task's job id and ``Submitted batch job N`` names it,
as in Slurm. Each task is a complete ``Job``: it is scheduled, launched, requeued, cancelled
and accounted like any other; only ``array_*`` fields tie it to its array.

``ArrayIndex`` maps array job ids to their tasks (task id -> job id). It outlives the
tasks in memory, like ``Controller.finished``, so that a dependency on an array that has
left memory still names the right jobs; a restart rebuilds it from the jobs loaded.
``resolve`` turns what users type (``123``, ``123_7``, ``123_[1-3]``) into jobs: a plain
id naming an array means every task of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from muster.core.arrays import ARRAY_ERROR, ArraySpec, JobRef, parse_array
from muster.core.errors import InvalidRequest
from muster.core.job import Job, JobSpec

__all__ = ["ArrayIndex", "array_spec", "make_tasks"]


def array_spec(spec: JobSpec, max_array_size: int) -> ArraySpec | None:
    """The submission's ``--array``, checked against MaxArraySize; None when absent."""
    if not spec.array:
        return None
    try:
        return parse_array(spec.array, max_array_size)
    except ValueError:
        raise InvalidRequest(ARRAY_ERROR) from None


def make_tasks(base: Job, arr: ArraySpec) -> list[Job]:
    """One job per index, ids ``base.job_id``, ``base.job_id + 1``, ... in index order."""
    first = base.job_id
    common = {
        "array_job_id": first,
        "array_task_count": len(arr.indices),
        "array_task_min": arr.indices[0],
        "array_task_max": arr.indices[-1],
        "array_task_step": arr.step,
        "array_throttle": arr.throttle,
    }
    tasks = []
    for k, index in enumerate(arr.indices):
        tasks.append(
            dataclasses.replace(
                base,
                job_id=first + k,
                spec=dataclasses.replace(base.spec),
                shape=dataclasses.replace(base.shape),
                alloc=[],
                planned_nodes=[],
                unknown_deps=list(base.unknown_deps),
                array_task_id=index,
                **common,  # type: ignore[arg-type]
            )
        )
    return tasks


class ArrayIndex:
    """array job id -> {task id: job id}."""

    __slots__ = ("tasks",)

    def __init__(self) -> None:
        self.tasks: dict[int, dict[int, int]] = {}

    def add(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            if job.array_job_id is not None and job.array_task_id is not None:
                self.tasks.setdefault(job.array_job_id, {})[job.array_task_id] = job.job_id

    def job_ids(self, ref: JobRef) -> list[int]:
        """The job ids a reference names (ids of tasks that may have left memory too)."""
        members = self.tasks.get(ref.job_id)
        if ref.tasks is None:
            return sorted(members.values()) if members else [ref.job_id]
        if not members:
            return []
        return [members[t] for t in ref.tasks if t in members]

    def resolve(self, ref: JobRef, jobs: dict[int, Job]) -> list[Job]:
        """The jobs in memory that a reference names, in job id order."""
        return [jobs[i] for i in self.job_ids(ref) if i in jobs]
