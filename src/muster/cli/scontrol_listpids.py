"""``scontrol listpids [JOB[.STEP]] [NODENAME]``: the processes of jobs' steps on this node.

As scontrol(1) describes it: the process IDs of a job step (``JOB.STEP``), of every step of a
job (``JOB``), or of every step of every job on the local node (no job, or ``*``); only
processes muster started and their descendants, only on the node where scontrol runs (or
the node named, as where several nodes share a host, like ``muster up``'s). The figures come
from the agents through the controller (``GET /v1/jobs/N/stats``, ``agent.stepstats``); a
task's own process has its local and global task ids, its descendants ``-``::

    PID      JOBID    STEPID   LOCALID GLOBALID
    2345     12       0        0       0
    2351     12       0        -       -
"""

from __future__ import annotations

import socket

from muster.cli.acctfmt import call
from muster.cli.common import CommandError, print_lines

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

__all__ = ["listpids", "rows"]

HEADER = f"{'PID':<8} {'JOBID':<8} {'STEPID':<8} {'LOCALID':<7} {'GLOBALID':<8}"


def _is_local(addr: str) -> bool:
    """Whether ``addr`` is one of this host's own addresses (it can be bound here)."""
    if not addr:
        return False
    try:
        infos = socket.getaddrinfo(addr, None, type=socket.SOCK_DGRAM)
    except OSError:
        return False
    for family, kind, proto, _name, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.bind((sockaddr[0], 0))
                return True
        except OSError:
            continue
    return False


def local_nodes(nodes: list[dict[str, Any]]) -> set[str]:
    """The nodes whose NodeAddr is an address of this host."""
    return {str(n["name"]) for n in nodes if _is_local(str(n.get("addr") or ""))}


def rows(job_id: int, answer: dict[str, Any], nodes: set[str], step: str | None) -> list[str]:
    """The lines for one job's answer, its steps on ``nodes`` (only ``step`` if given)."""
    out: list[str] = []
    for node in sorted(set(answer.get("nodes") or {}) & nodes):
        for entry in answer["nodes"][node]:
            step_id = str(entry.get("step"))
            if step is not None and step_id != step:
                continue
            for task in entry.get("tasks") or []:
                leader = int(task.get("leader") or 0)
                for pid in task.get("pids") or []:
                    own = pid == leader
                    local = str(task.get("local", 0)) if own else "-"
                    glob = str(task.get("task", 0)) if own else "-"
                    out.append(f"{pid:<8} {job_id:<8} {step_id:<8} {local:<7} {glob:<8}")
    return out


def listpids(args: list[str]) -> int:
    target = args[0] if args else "*"
    node = args[1] if len(args) > 1 else None
    if len(args) > 2:
        raise CommandError("too many arguments for keyword:listpids")
    step: str | None = None
    if target == "*":
        jobs = [int(j["job_id"]) for j in call("scontrol", "GET", "/v1/jobs?state=RUNNING").get("jobs") or []]
    else:
        job, dot, step_text = target.partition(".")
        if not job.isdigit() or (dot and not (step_text.isdigit() or step_text in ("batch", "extern"))):
            raise CommandError(f"Invalid job id specified: {target}")
        jobs, step = [int(job)], (step_text if dot else None)
    if node is not None:
        nodes = {node}
    else:
        nodes = local_nodes(call("scontrol", "GET", "/v1/nodes").get("nodes") or [])
    lines: list[str] = []
    for job_id in jobs:
        try:
            answer = call("scontrol", "GET", f"/v1/jobs/{job_id}/stats")
        except CommandError:
            if target != "*":
                raise
            continue  # ended meanwhile, or not ours
        lines += rows(job_id, answer, nodes, step)
    if not lines and target != "*":
        what = f"StepId={target}" if step is not None else f"JobId={target}"
        where = ",".join(sorted(nodes)) or "this node"
        raise CommandError(f"{what} does not exist on node {where}")
    print_lines([HEADER, *lines])
    return 0
