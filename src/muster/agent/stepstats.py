"""What a job's running steps use on this node right now (sstat, ``scontrol listpids``): each
task's processes and their memory, CPU time, page faults and disk I/O, read from ``/proc``.

A task's figures are the sums over its processes (the task and everything it started), as
Slurm's ``jobacct_gather/linux`` counts them: resident set size (where the job is confined,
the task's cgroup's memory instead, ``agent.memacct``, as ``jobacct_gather/cgroup`` does)
and virtual size (KB) from ``/proc/<pid>/statm``, CPU time (user + system, seconds) and major page faults from
``/proc/<pid>/stat``, bytes read and written from ``/proc/<pid>/io`` (0 where the kernel does
not let the agent read it). The batch script is the step ``batch`` with one task, 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from muster.agent import memacct, proctree
from muster.agent.localstep import Step, step_members, task_members

__all__ = ["job_stats", "usage"]

_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
_TICKS = os.sysconf("SC_CLK_TCK")


def _one(pid: int, proc_root: str) -> tuple[int, int, float, int, int, int] | None:
    """(rss KB, vmsize KB, cpu s, major faults, read bytes, write bytes) of one process."""
    base = f"{proc_root}/{pid}"
    try:
        with open(f"{base}/statm") as f:
            size, resident = (int(x) for x in f.read().split()[:2])
        with open(f"{base}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except (OSError, ValueError):
        return None  # it exited while we looked
    # fields[0] is field 3 of proc(5): majflt is field 12, utime 14, stime 15
    majflt, cpu = int(fields[9]), (int(fields[11]) + int(fields[12])) / _TICKS
    read = write = 0
    try:
        with open(f"{base}/io") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == "read_bytes":
                    read = int(value)
                elif key == "write_bytes":
                    write = int(value)
    except (OSError, ValueError):
        pass
    return resident * _PAGE_KB, size * _PAGE_KB, cpu, majflt, read, write


def usage(pids: Iterable[int], proc_root: str = "/proc") -> dict[str, object]:
    """The summed use of ``pids`` (those that still exist), and the pids found."""
    total = {"rss_kb": 0, "vmsize_kb": 0, "cpu_s": 0.0, "pages": 0, "read_bytes": 0, "write_bytes": 0}
    found = []
    for pid in sorted(pids):
        one = _one(pid, proc_root)
        if one is None:
            continue
        found.append(pid)
        for key, value in zip(total, one, strict=True):
            total[key] += value
    total["cpu_s"] = round(float(total["cpu_s"]), 3)
    return {"pids": found, **total}


def job_stats(
    job_id: int,
    steps: Iterable[Step],
    batch_pids: set[int] | None,
    batch_leader: int = 0,
    procs: Mapping[int, proctree.ProcInfo] | None = None,
    proc_root: str = "/proc",
    memory: Callable[[str, int], memacct.Memory | None] | None = None,
) -> list[dict[str, object]]:
    """``[{"step": id or "batch", "attempt", "tasks": [{"task", "local", "leader", "pids",
    "rss_kb", ...}]}]`` (``leader``: the task's own pid, the others its descendants) for
    the job's unfinished steps here (and its batch script's processes, ``batch_pids``, less
    those of its steps). ``memory(step, local task)``: the task's cgroup's figures, whose
    current use is its ``rss_kb`` where it has them (``NodeCgroups.memory``)."""

    def confined(one: dict[str, object], step: str, local: int) -> dict[str, object]:
        mem = memory(step, local) if memory is not None else None
        if mem is not None:
            one["rss_kb"] = mem.now_kb
        return one

    if procs is None:
        procs = proctree.read_proc(proc_root)
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    me = os.getpid()
    out: list[dict[str, object]] = []
    in_steps: set[int] = set()
    for step in sorted((s for s in steps if s.job_id == job_id and not s.finished), key=lambda s: s.step_id):
        tasks = []
        for t in step.tasks:
            if t.status is not None:
                continue  # ended here: sacct has what it used
            pids = task_members(procs, children, t) - {me, 1}
            one = {"task": t.task, "local": t.local, "leader": t.pid, **usage(pids, proc_root)}
            tasks.append(confined(one, str(step.step_id), t.local))
        in_steps |= step_members(procs, step.tasks, exclude=me)
        if tasks:
            out.append({"step": step.step_id, "attempt": step.attempt, "tasks": tasks})
    if batch_pids:
        pids = batch_pids - in_steps - {me, 1}
        task = confined({"task": 0, "local": 0, "leader": batch_leader, **usage(pids, proc_root)}, "batch", 0)
        out.insert(0, {"step": "batch", "tasks": [task]})
    return out
