"""Event triggers (``strigger``): what a trigger is, which of a check's observations fire
it (pure: the controller hands in what it saw and when), and ``strigger --get``'s table.

Slurm's model (strigger(1)): the controller looks at its nodes and jobs every interval
and compares each view with the one before; a node that went DOWN (``down``), became
DRAINED (``drained``), came back from DOWN (``up``), stayed IDLE for ``offset`` seconds
(``idle``), or a configuration read again (``reconfig``) fires the node triggers whose
nodes include it, with the nodes as a hostlist argument; a job that ended (``fini``),
reached its time limit plus ``offset`` (``time``, a negative offset before it), or one of
whose nodes went DOWN or came back (``down``, ``up``) fires the job's triggers with the job
id (the nodes, for down/up). A trigger fires once and is purged, unless ``PERM``; a job's
triggers go with their job once it ended. ``fail`` (FAILING) is accepted: muster has no
FAILING state, so it never fires.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from muster.core.hostlist import HostlistError, compress, expand

NODE_EVENTS = ("down", "drained", "fail", "up", "idle", "reconfig")
JOB_EVENTS = ("fini", "time", "down", "up")
FLAGS = ("PERM",)


class TriggerError(ValueError):
    """A trigger request that cannot be set (the message is strigger's)."""


@dataclass
class Trigger:
    trig_id: int
    res_type: str  # "job" or "node"
    res_id: str  # a job id, a hostlist, or "*" (every node)
    event: str
    offset: int
    user: str
    uid: int
    gid: int
    program: str
    perm: bool = False
    fired: list[str] = field(default_factory=list)  # a job's events already fired (PERM time/fini)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trigger:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @property
    def flags(self) -> str:
        return "PERM" if self.perm else ""

    def nodes(self) -> set[str] | None:
        """The nodes a node trigger watches (None: every node)."""
        if self.res_type != "node" or self.res_id == "*":
            return None
        return set(expand(self.res_id))


def make(
    trig_id: int,
    *,
    event: str,
    job_id: int | None,
    node: str | None,
    offset: int,
    user: str,
    uid: int,
    gid: int,
    program: str,
    flags: Iterable[str] = (),
) -> Trigger:
    """A validated trigger, or ``TriggerError`` with strigger's words."""
    if job_id is not None and node is not None:
        raise TriggerError("--jobid and --node options are mutually exclusive")
    if not program or not program.strip():
        raise TriggerError("--program must be specified")
    if not program.lstrip().startswith("/"):
        raise TriggerError("--program must be a fully qualified pathname")
    perm = False
    for flag in flags:
        if flag.upper() != "PERM":
            raise TriggerError(f"Invalid --flags argument: {flag}")
        perm = True
    if job_id is not None:
        if event not in JOB_EVENTS:
            raise TriggerError(f"--{event} is not a job event (job events: --fini, --time, --down, --up)")
        return Trigger(trig_id, "job", str(job_id), event, offset, user, uid, gid, program, perm)
    if event in ("time", "fini"):
        raise TriggerError(f"--{event} requires --jobid")
    if event not in NODE_EVENTS:
        raise TriggerError(f"unknown trigger event: {event}")
    res_id = "*"
    if node:
        try:
            res_id = compress(expand(node))
        except HostlistError as e:
            raise TriggerError(str(e)) from None
    return Trigger(trig_id, "node", res_id, event, offset, user, uid, gid, program, perm)


@dataclass(frozen=True)
class NodeSeen:
    down: bool
    drained: bool
    idle: bool


@dataclass(frozen=True)
class JobSeen:
    ended: bool
    limit_end: float | None  # when its time limit is reached (running jobs only)
    nodes: tuple[str, ...]


@dataclass
class Observation:
    """One look at the cluster: its nodes and the jobs triggers name, and when."""

    now: float
    nodes: dict[str, NodeSeen]
    jobs: dict[int, JobSeen]
    config_gen: int = 0
    idle_since: dict[str, float] = field(default_factory=dict)


def observe(
    prev: Observation | None, now: float, nodes: dict[str, NodeSeen], jobs: dict[int, JobSeen], config_gen: int
) -> Observation:
    """This look, with when each idle node became idle (carried from ``prev``)."""
    since: dict[str, float] = {}
    for name, seen in nodes.items():
        if seen.idle:
            before = prev.idle_since.get(name) if prev is not None else None
            since[name] = before if before is not None else now
    return Observation(now, nodes, jobs, config_gen, since)


def _went(prev: Observation, cur: Observation, event: str) -> set[str]:
    """The nodes that entered ``event``'s state between the two looks."""
    out: set[str] = set()
    for name, seen in cur.nodes.items():
        was = prev.nodes.get(name)
        if event == "down" and seen.down and (was is None or not was.down):
            out.add(name)
        elif event == "up" and not seen.down and was is not None and was.down:
            out.add(name)
        elif event == "drained" and seen.drained and (was is None or not was.drained):
            out.add(name)
    return out


def fired(triggers: Iterable[Trigger], prev: Observation, cur: Observation) -> list[tuple[Trigger, str]]:
    """Each trigger that fires between ``prev`` and ``cur``, with its program's argument."""
    out: list[tuple[Trigger, str]] = []
    went = {e: _went(prev, cur, e) for e in ("down", "up", "drained")}
    for trig in triggers:
        if trig.res_type == "node":
            scope = trig.nodes()
            if trig.event in went:
                hit = went[trig.event] if scope is None else went[trig.event] & scope
            elif trig.event == "idle":
                hit = {
                    n
                    for n, since in cur.idle_since.items()
                    if (scope is None or n in scope)
                    and cur.now - since >= trig.offset
                    and not (prev.idle_since.get(n) == since and prev.now - since >= trig.offset)
                }
            elif trig.event == "reconfig":
                hit = {"*"} if cur.config_gen != prev.config_gen else set()
                if hit:
                    out.append((trig, ""))
                continue
            else:  # fail: no FAILING state in muster
                hit = set()
            if hit:
                out.append((trig, compress(sorted(hit))))
            continue
        job = cur.jobs.get(int(trig.res_id))
        if job is None or (trig.event in ("fini", "time") and trig.event in trig.fired):
            continue
        if trig.event == "fini" and job.ended:
            out.append((trig, trig.res_id))
        elif trig.event == "time" and not job.ended and job.limit_end is not None:
            if cur.now >= job.limit_end + trig.offset:
                out.append((trig, trig.res_id))
        elif trig.event in ("down", "up"):
            before = prev.jobs.get(int(trig.res_id))  # a node's failure may have ended the job
            hit = went[trig.event] & (set(job.nodes) | set(before.nodes if before is not None else ()))
            if hit:
                out.append((trig, compress(sorted(hit))))
    return out


def spent(trig: Trigger, cur: Observation) -> bool:
    """Whether a trigger is purged after this look: a fired one (unless PERM), a job's
    once its job ended or is forgotten. Call after marking ``fired``."""
    if trig.res_type == "job":
        job = cur.jobs.get(int(trig.res_id))
        if job is None or job.ended:
            return True
        return not trig.perm and bool(trig.fired)
    return not trig.perm and bool(trig.fired)


def _row(r: tuple[str, ...]) -> str:
    tid, rtype, rid, event, offset, user, flags, program = r
    return f"{tid:>7} {rtype:>8} {rid:>7} {event:>8} {offset:>6} {user:>8} {flags:>8} {program}"


HEADER = ("TRIG_ID", "RES_TYPE", "RES_ID", "TYPE", "OFFSET", "USER", "FLAGS", "PROGRAM")


def table(triggers: Iterable[dict[str, Any]], header: bool = True) -> str:
    """``strigger --get``: one line per trigger, the numbers right-aligned under Slurm's
    header (TRIG_ID RES_TYPE RES_ID TYPE OFFSET USER FLAGS PROGRAM)."""
    rows = [
        (
            str(t["trig_id"]),
            t["res_type"],
            t["res_id"],
            t["event"],
            str(t["offset"]),
            t["user"],
            "PERM" if t.get("perm") else "",
            t["program"],
        )
        for t in triggers
    ]
    lines = [_row(HEADER)] if header else []
    lines.extend(_row(r) for r in rows)
    return "\n".join(lines) + ("\n" if lines else "")
