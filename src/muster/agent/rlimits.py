"""The submit shell's resource limits, as this node can give them to a job's processes.

A job carries the soft limits that propagate (``core.rlimits``: ``PropagateResourceLimits``,
``--propagate``). ``plan`` turns them into the ``setrlimit`` calls the forked child makes
(``spawn.ChildSpec.rlimits``): each submitted soft limit is set as the process's soft limit,
under the hard limit the agent itself runs with (the node's: systemd's ``LimitMEMLOCK=``,
``LimitNOFILE=`` in musterd's unit), which stays as it is. A limit above that hard limit
cannot be given: as Slurm does, the agent logs it and the job keeps the node's limit for
it. Limits that do not propagate are the agent's own, inherited.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Mapping

from muster.core.rlimits import NAMES, UNLIMITED

__all__ = ["plan", "text"]

log = logging.getLogger("musterd")


def text(value: int) -> str:
    """A limit as ``ulimit`` words it."""
    return "unlimited" if value in (UNLIMITED, resource.RLIM_INFINITY) else str(value)


def plan(wanted: Mapping[str, int] | None, what: str = "the job") -> tuple[tuple[int, int, int], ...]:
    """``(resource, soft, hard)`` for each limit in ``wanted`` that differs from this process's
    and fits under its hard limit; the others are logged (above the hard limit) or left out
    (already so, or unknown here)."""
    if not wanted:
        return ()
    calls = []
    for name in NAMES:
        if name not in wanted:
            continue
        number = getattr(resource, "RLIMIT_" + name, None)
        if number is None:  # not on this system
            continue
        soft, hard = resource.getrlimit(number)
        want = resource.RLIM_INFINITY if wanted[name] == UNLIMITED else int(wanted[name])
        if want == soft:
            continue
        if hard != resource.RLIM_INFINITY and (want == resource.RLIM_INFINITY or want > hard):
            log.warning(
                "%s: can't propagate RLIMIT_%s of '%s' from submit host: above this node's hard limit (%s); "
                "the node's limit is kept",
                what,
                name,
                text(wanted[name]),
                text(hard),
            )
            continue
        calls.append((number, want, hard))
    return tuple(calls)
