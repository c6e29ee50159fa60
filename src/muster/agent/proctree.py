"""Which processes belong to a job: a pure walk over a snapshot of ``/proc``.

A batch script starts as the leader of its own session and process group (pid = pgid =
sid). Its processes are found in three ways, because each alone misses some:

1. members of the job's session or process group (``setpgid`` keeps the session);
2. descendants, by parent links, of anything already found (catches ``setsid`` escapes
   while their parent lives);
3. processes of the job's user whose initial environment carries the run's tag,
   ``MUSTER_JOB_TAG=<agent instance>.<job id>.<restart count>`` (catches a daemon that
   double-forked and ``setsid``-ed away from a parent now dead). The tag names the agent
   instance and the attempt, not just the job id: several agents share a host in tests
   and ``muster up``, and a requeued job may rerun on a neighbour while its old run is
   being swept. Only processes of the job's own uid are read or matched, so another user
   cannot make the agent kill on their behalf.

``job_members(procs, ...)`` does the walk on ``ProcInfo`` records; ``read_proc()`` fills
them from ``/proc`` (Linux), ``read_tag`` reads one environment only when rule 3 needs it,
and ``parse_stat`` reads one ``/proc/<pid>/stat`` line.
``start_ticks`` (field 22 of stat) tells a live process from a later one that reused its pid.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["ProcInfo", "job_members", "parse_stat", "process_start_ticks", "read_proc", "read_tag"]

TAG_VAR = b"MUSTER_JOB_TAG="


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    uid: int = -1
    start_ticks: int = 0
    state: str = "S"
    job_tag: str | None = None  # value of MUSTER_JOB_TAG in the initial environment


def parse_stat(text: str) -> tuple[int, str, int, int, int, int]:
    """``(pid, state, ppid, pgid, sid, start_ticks)`` from a ``/proc/<pid>/stat`` line.

    The command name sits in parentheses and may itself hold spaces and parentheses, so
    the fields are counted from the last ``)``.
    """
    head, _, tail = text.rpartition(")")
    pid = int(head.split("(", 1)[0])
    fields = tail.split()
    # fields[0] is field 3 (state); field N is fields[N - 3]
    return pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])


def job_members(
    procs: Mapping[int, ProcInfo],
    leader: int,
    tag: str | None = None,
    uid: int | None = None,
    exclude: Iterable[int] = (),
    tag_of: Callable[[int], str | None] | None = None,
) -> set[int]:
    """Pids of the job led by ``leader`` (see the module docstring); never ``exclude``
    nor pid 1. The leader itself is included while it exists.

    A process's tag is ``ProcInfo.job_tag`` when set, else asked of ``tag_of(pid)``, and only
    for processes of ``uid`` not already found by the cheaper rules (kernel threads never).
    """
    found = {p.pid for p in procs.values() if leader in (p.pid, p.sid, p.pgid)}
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    _add_descendants(found, set(found), children)
    if tag is not None and uid is not None:
        tagged = set()
        for p in procs.values():
            if p.pid in found or p.uid != uid or p.pid == 2 or p.ppid == 2:
                continue
            value = p.job_tag if p.job_tag is not None else (tag_of(p.pid) if tag_of else None)
            if value == tag:
                tagged.add(p.pid)
        found |= tagged
        _add_descendants(found, tagged, children)
    found.difference_update(exclude)
    found.discard(1)
    return found


def _add_descendants(found: set[int], roots: set[int], children: Mapping[int, list[int]]) -> None:
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)


def process_start_ticks(pid: int, proc_root: str = "/proc") -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None if it is gone."""
    try:
        with open(f"{proc_root}/{pid}/stat") as f:
            _, state, *_, ticks = parse_stat(f.read())
    except (OSError, ValueError, IndexError):
        return None
    return None if state in ("Z", "X") else ticks


def read_proc(proc_root: str = "/proc") -> dict[int, ProcInfo]:
    """A snapshot of every process (tags are read lazily, see ``read_tag``)."""
    out: dict[int, ProcInfo] = {}
    try:
        names = os.listdir(proc_root)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        base = f"{proc_root}/{name}"
        try:
            with open(f"{base}/stat") as f:
                pid, state, ppid, pgid, sid, ticks = parse_stat(f.read())
            uid = os.stat(base).st_uid
        except (OSError, ValueError, IndexError):
            continue  # exited while we looked
        out[pid] = ProcInfo(pid, ppid, pgid, sid, uid, ticks, state)
    return out


def read_tag(pid: int, proc_root: str = "/proc") -> str | None:
    """``MUSTER_JOB_TAG`` from the initial environment of ``pid``, or None."""
    try:
        with open(f"{proc_root}/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    for item in data.split(b"\0"):
        if item.startswith(TAG_VAR):
            return item[len(TAG_VAR) :].decode(errors="replace")
    return None
