"""Whose fault a failure was (the node's, the job's, or unknown) and when a node that keeps
failing is quarantined: the pure rules of the failure ledger (``ctld.ledger``).

A ``Failure`` is one record of the ledger: a node failure, a failed launch, Prolog, Epilog,
health or pre-flight check, a GPU fault, a hang. ``attribute`` judges one record against the
others of the same window:

* evidence that names the node itself (a GPU fault, a failed health or pre-flight check, an
  Epilog that failed after the job ended, a hang whose ranks on that node stopped behind the
  others') is the **node**'s;
* the same job (for a hang: the same user's jobs) failing the same way (the same kind; not a
  node that stopped answering) on another node is the **job**'s fault: a job that breaks wherever it runs must not drain
  every node it touches (no "drain storm");
* a node that failed for another job (another user's, for hangs) in the window is the
  **node**'s;
* anything else is **unknown**: the first failure of a kind that either could cause.

``quarantine_due`` says when a node is taken out of service: ``threshold`` failures not
attributed to a job within ``window`` seconds since an operator last resumed it, where the
failures of one job (of one user, for hangs) count once, and so do the failures that came
while the node was already out of service (launches in flight when it was drained, the
other jobs lost in the same outage).

``off_collective`` singles out, among the nodes of a hung run whose ranks all stopped at
the same step, those whose ranks never entered the collective the others wait in (from the
Python stacks of the hang evidence: ``in_collective``).

Pure: no clock, no I/O; ``now`` is a parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "JOB",
    "KINDS",
    "NODE",
    "NODE_EVIDENCE",
    "UNKNOWN",
    "Failure",
    "attribute",
    "blame_key",
    "in_collective",
    "off_collective",
    "quarantine_due",
]

NODE, JOB, UNKNOWN = "node", "job", "unknown"

# Every kind a ledger record may have. "replacement" (a node of a running job swapped for a
# spare) and "resume" (an operator returned the node) are records without a fault of their own.
KINDS = (
    "node_fail",
    "launch",
    "prolog",
    "epilog",
    "health",
    "gpu",
    "hang",
    "preflight",
    "replacement",
    "resume",
)
# Kinds whose evidence is about the node itself, whatever job ran there.
NODE_EVIDENCE = frozenset({"epilog", "health", "gpu", "preflight"})
_NOT_FAULTS = frozenset({"replacement", "resume"})


@dataclass(frozen=True)
class Failure:
    """One record of the ledger. ``job_id`` 0: no job (a health check between jobs)."""

    time: float
    node: str
    kind: str
    job_id: int = 0
    user: str = ""
    evidence: str = ""
    ranks: tuple[int, ...] = ()
    # False: the node was already out of service (drained, down) when this failure came, or
    # it is one more job lost in the same outage: one incident, counted once for quarantine
    counted: bool = True
    # a hang whose node's ranks stopped behind the others' (singled out by the evidence)
    behind: bool = False


def blame_key(f: Failure) -> str:
    """What one failure is counted by: its job, or its user for a hang (a user whose jobs
    hang wherever they run is one cause, however many jobs), or the record itself."""
    if f.kind == "hang" and f.user:
        return f"user:{f.user}"
    if f.job_id:
        return f"job:{f.job_id}"
    return f"at:{f.kind}:{f.time!r}"


def _same_cause(a: Failure, b: Failure) -> bool:
    """The same cause failing the same way; the stalled ranks of one hung run on several
    nodes (one judgement, one time) are one observation, not a job failing everywhere."""
    if a.kind == "hang" and a.job_id == b.job_id and a.time == b.time:
        return False
    if a.kind == "node_fail":  # a node that stops answering is never a job's doing here
        return False
    return a.kind == b.kind and blame_key(a) == blame_key(b) and not blame_key(a).startswith("at:")


def attribute(f: Failure, others: Iterable[Failure], window: float) -> str:
    """``NODE``, ``JOB`` or ``UNKNOWN`` for ``f``, judged against ``others`` (the ledger's
    records; ``f`` itself among them or not) within ``window`` seconds of it."""
    if f.kind in _NOT_FAULTS:
        return UNKNOWN
    if f.kind in NODE_EVIDENCE or f.behind:
        return NODE
    near = [o for o in others if o != f and abs(o.time - f.time) <= window and o.kind not in _NOT_FAULTS]
    if any(o.node != f.node and _same_cause(o, f) for o in near):
        return JOB
    if any(o.node == f.node and blame_key(o) != blame_key(f) and not _is_jobs(o, near, window) for o in near):
        return NODE
    return UNKNOWN


def _is_jobs(o: Failure, near: Sequence[Failure], window: float) -> bool:
    """Whether ``o`` followed its job (or user) to another node: then it is no evidence
    against its node either."""
    if o.kind in NODE_EVIDENCE or o.behind:
        return False
    return any(p.node != o.node and _same_cause(p, o) and abs(p.time - o.time) <= window for p in near)


def quarantine_due(
    node: str,
    records: Sequence[Failure],
    now: float,
    threshold: int,
    window: float,
    since: float | None = None,
) -> list[Failure]:
    """The failures that quarantine ``node`` now (empty: not due): at least ``threshold``
    distinct causes (``blame_key``) among its records within ``window`` seconds of ``now``,
    after ``since`` (the operator's last resume), none attributed to a job."""
    if threshold <= 0:
        return []
    mine = [
        r
        for r in records
        if r.node == node
        and r.counted
        and r.kind not in _NOT_FAULTS
        and now - r.time <= window
        and (since is None or r.time > since)
    ]
    counted = [r for r in mine if attribute(r, records, window) != JOB]
    if len({blame_key(r) for r in counted}) >= threshold:
        return counted
    return []


# A frame of a collective: in these libraries' files, or one of these functions (a
# program's own wrapper of a collective is not recognised).
COLLECTIVE_FILES = (
    "torch/distributed/",
    "torch/nn/parallel/distributed.py",  # DistributedDataParallel's forward: its broadcasts, its join
    "mpi4py/",
    "horovod/",
    "deepspeed/comm/",
)
COLLECTIVE_FUNCS = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "all_to_all_single",
        "barrier",
        "broadcast",
        "broadcast_object_list",
        "monitored_barrier",
        "Allreduce",
        "allreduce",
        "Barrier",
        "Bcast",
    }
)
# A backward pass (torch's autograd engine): under DistributedDataParallel or FSDP it is where
# a rank waits for the gradients' all-reduce of the others, so it counts as inside one. A rank
# stuck in its own backward stops the others there too: all inside, nobody singled out.
SYNC_FRAMES = (("torch/autograd/", "_engine_run_backward"), ("torch/autograd/", "run_backward"))
# faulthandler: ``  File "/x/y.py", line 12 in name``; py-spy: ``    name (/x/y.py:12)``
_FRAMES = (
    re.compile(r'File "(?P<path>[^"]*)", line \d+ in (?P<func>\S+)'),
    re.compile(r"^\s*(?P<func>[^\s(]+) \((?P<path>[^():]+):\d+\)", re.M),
)


def in_collective(stack: str) -> bool:
    """Whether a Python stack dump (faulthandler's all threads, or py-spy's) has a thread
    inside a collective operation (a frame of ``COLLECTIVE_FILES`` or ``COLLECTIVE_FUNCS``,
    or a backward pass: ``SYNC_FRAMES``)."""
    for pattern in _FRAMES:
        for m in pattern.finditer(stack):
            path, func = m["path"], m["func"]
            if func in COLLECTIVE_FUNCS or any(part in path for part in COLLECTIVE_FILES):
                return True
            if any(part in path and func == name for part, name in SYNC_FRAMES):
                return True
    return False


def off_collective(ranks: Mapping[str, Sequence[int]]) -> list[str]:
    """``ranks``: node -> (its ranks inside a collective, its ranks outside one), counted
    from the ranks' stacks. The nodes with a rank outside while another rank (there or on
    another node) waits inside: the ranks that never entered it, which the others wait
    for. Empty when no rank is inside one, or none outside (nothing singled out)."""
    inside = sum(int(v[0]) for v in ranks.values() if len(v) >= 2)
    outside = sorted(n for n, v in ranks.items() if len(v) >= 2 and int(v[1]) > 0)
    if not inside or not outside or len(outside) == len(ranks):
        return []
    return outside
