"""A cgroup's memory accounting, read from its files (v1 and v2): what a confined task,
step or batch script uses now and at most, and the OOM kills it saw (sacct's MaxRSS and
AveRSS, sstat's figures, a step's OUT_OF_MEMORY).

``read(dirs)`` takes the cgroup's directories (one per v1 controller, or the v2 one; those
without the memory controller's files are passed over):

* v1: now: ``memory.stat``'s ``total_rss`` (``rss`` where there is no total; the resident
  anonymous memory, as Slurm's ``jobacct_gather/cgroup`` counts it; ``memory.usage_in_bytes``
  where ``memory.stat`` cannot be read); at most: ``memory.max_usage_in_bytes``; OOM kills:
  ``memory.oom_control``'s ``oom_kill`` (the cgroup's own: v1 does not add its children's);
* v2: now: ``memory.current``; at most: ``memory.peak`` (``memory.current`` on kernels
  before 5.19, which have none); OOM kills: ``memory.events``' ``oom_kill`` (its subtree's).

Figures are in KB, as sacct prints them. A process that is not confined has none of these:
its figures come from ``/proc`` and ``getrusage`` (``agent.stepstats``, ``agent.stepd``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Memory", "read", "task_dirs"]


@dataclass(frozen=True, slots=True)
class Memory:
    now_kb: int  # what it uses now (sstat's RSS)
    peak_kb: int  # the most it used (sacct's MaxRSS)
    oom_kills: int  # the kernel's OOM killer's victims in it


def _text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _number(path: str) -> int | None:
    text = _text(path)
    try:
        return int(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def _keyed(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (_text(path) or "").splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            continue
    return out


def read(dirs: Iterable[str]) -> Memory | None:
    """The memory figures of the cgroup whose directories are ``dirs``; None when none of
    them has the memory controller's files (not confined, or the cgroup is gone)."""
    for d in dirs:
        peak = _number(os.path.join(d, "memory.max_usage_in_bytes"))
        if peak is not None:  # v1
            stat = _keyed(os.path.join(d, "memory.stat"))
            now = stat.get("total_rss", stat.get("rss"))
            if now is None:
                now = _number(os.path.join(d, "memory.usage_in_bytes")) or 0
            ooms = _keyed(os.path.join(d, "memory.oom_control")).get("oom_kill", 0)
            return Memory(now // 1024, peak // 1024, ooms)
        now = _number(os.path.join(d, "memory.current"))
        if now is not None:  # v2
            peak = _number(os.path.join(d, "memory.peak"))
            ooms = _keyed(os.path.join(d, "memory.events")).get("oom_kill", 0)
            return Memory(now // 1024, max(now, peak or 0) // 1024, ooms)
    return None


def task_dirs(cgroup_procs: Iterable[str]) -> list[str]:
    """A task's cgroup directories, from the ``cgroup.procs`` files it joined (``spawn``)."""
    return [os.path.dirname(p) for p in cgroup_procs]
