"""Pure scheduling: ``schedule(snapshot, now, config) -> Decisions``.

This package owns every scheduling decision: job priority, feasibility with Slurm's
pending reasons, node and GPU placement, backfill over an availability profile, and
advance reservations; plus ``validate_submit``, which refuses at submission the jobs that
could never run. No I/O, no wall clock, no asyncio: the controller builds a ``Snapshot``
from memory and applies the ``Decisions``; the simulator does the same on a virtual
clock. See ``sched/README.md`` for the pass and the vocabulary.
"""

from muster.sched.config import SchedConfig
from muster.sched.cycle import schedule
from muster.sched.decisions import Decisions, PassStats, Plan, Start
from muster.sched.filters import Rejection, check_submit, validate_submit
from muster.sched.snapshot import NodeView, PartitionView, ReservationView, Snapshot

__all__ = [
    "Decisions",
    "NodeView",
    "PartitionView",
    "PassStats",
    "Plan",
    "Rejection",
    "ReservationView",
    "SchedConfig",
    "Snapshot",
    "Start",
    "check_submit",
    "schedule",
    "validate_submit",
]
