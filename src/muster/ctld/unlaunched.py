"""Starts a previous controller committed and never sent: launched again at once.

A controller commits a job's start, then sends the launch to the batch host. When it dies
(kill -9, a crash, a takeover of a stalled one) between the two, the store says the attempt
RUNNING on a node that never heard of it. Judged by silence (``Agents._watch_lost``) that
would end in NODE_FAIL and a requeue, blaming a node that did nothing wrong. The next
controller knows better as soon as the node's agent tells it what it holds:

* the start is older than this controller (``ClusterState.started_at``): only a previous
  controller could have sent its launch, and nothing here recorded an answer;
* the agent's heartbeat lists every attempt it runs *and* every one that ended here whose
  report is not yet acknowledged (``Heartbeat.running``, ``Heartbeat.ended``): the attempt is
  in neither;
* the agent has run without a restart since before that start (``agent_start_time``, from
  its registration with this controller, not after the job's ``start_time``): a launch it
  had received would still be held or reported, so it never received one. An agent that
  restarted since is no witness (a node that lost its state), and the job is judged as
  before.

Such an attempt is launched again, the same attempt on the same nodes (whose resources it
still holds), as if this controller had just started it: no NODE_FAIL attempt, no requeue,
no restart counted. Should the first launch reach the agent after all (the old
controller's request was already on the wire), the agent takes the same attempt once: it
answers a repeated launch of an attempt it runs, or has a report for, with success.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from muster.core.states import JobState
from muster.ctld.actions import Action, Launch
from muster.ctld.state import ClusterState
from muster.protocol.messages import Attempt

log = logging.getLogger("musterctld")


def relaunch_unlaunched(
    state: ClusterState, name: str, running: Iterable[Attempt], ended: Iterable[Attempt]
) -> list[Action]:
    """The launches to send again for node ``name``, whose agent's heartbeat says it runs
    ``running`` and has reports on their way for ``ended`` (see the module's rules)."""
    node = state.nodes.get(name)
    if node is None or not node.registered or node.agent_start_time is None:
        return []
    held = {(int(j), int(a)) for j, a in running} | {(int(j), int(a)) for j, a in ended}
    actions: list[Action] = []
    for job_id in state.job_ids_on(name):
        job = state.jobs.get(job_id)
        if job is None or job.state is not JobState.RUNNING or job.batch_host != name or job.spec.interactive:
            continue
        started = job.start_time
        if started is None or started >= state.started_at or job_id in state.launching:
            continue  # started by this controller (its launch is answered or under way here)
        if (job_id, job.restart_count) in held or node.agent_start_time > started:
            continue
        state.lost.pop(job_id, None)
        state.launch_sent(job_id, state.clock.monotonic())
        log.warning(
            "job %s: attempt %d was started by a previous controller and never reached %s "
            "(its agent, up since before that start, neither runs nor reported it): launching it now",
            job_id,
            job.restart_count,
            name,
        )
        actions.append(Launch(job))
    return actions
