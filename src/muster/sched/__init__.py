"""Pure scheduling: ``schedule(snapshot, now, config) -> Decisions``.

No I/O, no wall clock, no asyncio: the controller builds a ``Snapshot`` from memory and
applies the ``Decisions``; the simulator does the same on a virtual clock. See
``sched/README.md`` for the pass and the vocabulary.
"""

from muster.sched.config import SchedConfig
from muster.sched.cycle import schedule

__all__ = ["SchedConfig", "schedule"]
