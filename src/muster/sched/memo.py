"""What one pass keeps for the next: answers that only events change, held by the caller.

The scheduler stays a function of its snapshot: ``schedule(snapshot, now, config,
memo=...)`` decides exactly as it does without a memo. The controller and the simulator
each keep one ``PassMemo`` for the life of their queue and hand it to every pass; a pass
brings it up to date with its own snapshot first, forgetting what the changes since the
previous pass make stale, so nothing outside ``sched`` has to report events to it.

* ``priority`` (``sched.priority.PriorityMemo``): the multifactor terms that do not move
  with time, forgotten when the fair-share table, the cluster's totals or the config change;
* ``deps`` (``sched.dependencies.DependencyMemo``): each waiting job's dependency state,
  forgotten when a job it names enters or leaves the queue, starts or ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from muster.sched.dependencies import DependencyMemo
from muster.sched.priority import PriorityMemo

__all__ = ["PassMemo"]


@dataclass(slots=True)
class PassMemo:
    priority: PriorityMemo = field(default_factory=PriorityMemo)
    deps: DependencyMemo = field(default_factory=DependencyMemo)
