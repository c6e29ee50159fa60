"""Which jobs make up a heterogeneous job, found in memory by their consecutive ids
(component k of job N is job N + k): no index to keep."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.core.arrays import JobRef, format_ranges
from muster.core.job import Job

__all__ = ["components", "het_ids", "with_id_sets"]


def components(jobs: Mapping[int, Job], leader: int) -> list[Job]:
    """The components of heterogeneous job ``leader`` still in memory, by offset."""
    out: list[Job] = []
    k = 0
    while True:
        job = jobs.get(leader + k)
        if job is None or job.het_job_id != leader:
            return out
        out.append(job)
        k += 1


def het_ids(jobs: Mapping[int, Job], ref: JobRef) -> list[int] | None:
    """The job ids a reference names when it names a heterogeneous job (``N``: every
    component; ``N+k``: that one); None when it names none, for the usual lookup."""
    if ref.offset is not None:
        job = jobs.get(ref.job_id + ref.offset)
        if job is not None and job.het_job_id == ref.job_id and job.het_job_offset == ref.offset:
            return [job.job_id]
        return []
    if ref.tasks is not None:
        return None
    job = jobs.get(ref.job_id)
    if job is None or job.het_job_id != ref.job_id:
        return None
    return [c.job_id for c in components(jobs, ref.job_id)]


def with_id_sets(wired: list[dict[str, Any]], jobs: Mapping[int, Job]) -> list[dict[str, Any]]:
    """Add ``het_job_id_set`` (scontrol's HetJobIdSet, ``60-61``) to each component in a
    list of wired jobs."""
    sets: dict[int, str] = {}
    for d in wired:
        leader = d.get("het_job_id")
        if leader is not None:
            if leader not in sets:
                sets[leader] = format_ranges(c.job_id for c in components(jobs, leader)) or str(leader)
            d["het_job_id_set"] = sets[leader]
    return wired
