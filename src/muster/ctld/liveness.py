"""Whether nodes are alive, as Slurm judges it, without blaming them for the controller's
own stalls; and the states administrators give nodes (``scontrol update nodename=``).

* ``loop_tick``: the controller's loop notes each of its runs; a gap of ``STALL_SECONDS``
  or more is a stall of the controller, and the silence it covered is not held against any
  node (each gets at least a couple of heartbeats' time).
* ``check_nodes``: silent for about two heartbeats, a node is flagged not responding
  (``*``); silent for SlurmdTimeout, it goes DOWN and its jobs end NODE_FAIL (requeued when
  allowed). Each step is logged with the node, how long it was silent and why.
"""

from __future__ import annotations

import logging

from muster.core import lifecycle
from muster.core.errors import InvalidRequest, PermissionDenied, StorageError
from muster.core.events import EventKind
from muster.core.states import JobState
from muster.ctld.actions import Action, Terminate
from muster.ctld.identity import Identity
from muster.ctld.nodes import NodeRuntime
from muster.ctld.replacement import NOT_RESPONDING, SET_DOWN
from muster.ctld.state import QUARANTINE_PREFIX, ClusterState
from muster.ctld.training import Training

log = logging.getLogger("musterctld")

# A gap this long between two runs of the controller's loop is a stall: the controller
# could not hear heartbeats meanwhile, so that silence is not held against any node.
STALL_SECONDS = 2.0


class Liveness:
    def __init__(self, state: ClusterState, training: Training) -> None:
        self.state = state
        self.training = training  # hangs are checked with the nodes; node failures noted

    def loop_tick(self) -> float:
        """The controller's loop runs now. Returns the length of the stall just ended (0.0
        when there was none) after making sure it costs no node its life: silence the
        controller could not hear is not counted, and every node gets at least a couple of
        heartbeats' time before it can be declared not responding."""
        mono = self.state.clock.monotonic()
        last, self.state.last_tick = self.state.last_tick, mono
        if last is None or mono - last < STALL_SECONDS:
            return 0.0
        gap = mono - last
        self.state.stalls += 1
        now = self.state.clock.now()
        grace = min(float(self.state.config.slurmd_timeout), max(5.0, 2 * self.state.heartbeat_interval))
        floor = now - self.state.config.slurmd_timeout + grace
        for node in self.state.nodes.values():
            if node.last_seen is not None:
                node.last_seen = min(now, max(node.last_seen + gap, floor))
        for watch in self.state.lost.values():
            watch.since = min(now, watch.since + gap)
        self.state.launches_shifted(gap)
        log.warning(
            "controller stalled for %.1f s (its loop did not run: stopped, swapped or "
            "overloaded); no node is judged on that silence: each gets at least %.0f s more",
            gap,
            grace,
        )
        return gap

    def check_nodes(self) -> list[Action]:
        """Judge silent nodes, as Slurm does: silent for a couple of heartbeats, a node is
        flagged not responding (``*`` in sinfo); silent for SlurmdTimeout, it goes DOWN
        and its jobs end NODE_FAIL (and requeue). Each step is logged with the node, how
        long it was silent and why. Silence during a stall of the controller itself does
        not count (``loop_tick``)."""
        now = self.state.clock.now()
        timeout = self.state.config.slurmd_timeout
        flag_after = min(timeout / 2, 2 * self.state.heartbeat_interval + 1)
        actions: list[Action] = []
        for node in self.state.nodes.values():
            if not node.responding or node.last_seen is None:
                continue
            silence = now - node.last_seen
            if silence <= flag_after:
                node.silent = False
                continue
            if not node.silent:
                node.silent = True
                log.warning(
                    "node %s not responding: no heartbeat for %.0f s; DOWN after %d s (SlurmdTimeout)",
                    node.name,
                    silence,
                    timeout,
                )
            if silence <= timeout:
                continue
            try:
                actions += self._node_down(node, now, silence)
            except StorageError:
                continue  # logged; judged again on the next check, once the store commits
        self.state.note_node_service(now)
        try:
            self.state.note_nodes_up(now)
        except StorageError:
            pass  # only a hint for the next controller: written at a later check
        actions += self.training.check_hangs()
        return actions

    def _node_down(self, node: NodeRuntime, now: float, silence: float) -> list[Action]:
        timeout = self.state.config.slurmd_timeout
        saved = (node.responding, node.silent, node.reason, node.reason_time, node.reason_user, node.admin_down)
        node.responding = False
        node.silent = False
        node.reason = "Not responding"
        node.reason_time = now
        node.reason_user = "root"
        if self.state.config.return_to_service == 0:
            node.admin_down = True
        try:
            self.state.put_node(node)
        except StorageError:
            (node.responding, node.silent, node.reason, node.reason_time, node.reason_user, node.admin_down) = saved
            raise
        job_ids = self.state.job_ids_on(node.name)
        log.warning(
            "node %s DOWN: no heartbeat for %.0f s (SlurmdTimeout=%d s); %d job(s) on it",
            node.name,
            silence,
            timeout,
            len(job_ids),
        )
        if self.state.mail is not None:  # AdminMail: automation took a node out (docs/mail.md)
            self.state.mail.node_event(
                "Down", node.name, f"Not responding for {silence:.0f} s, {len(job_ids)} job(s) on it"
            )
        actions: list[Action] = []
        for job_id in job_ids:
            job = self.state.jobs.get(job_id)
            if job is None or node.name not in job.nodes or not job.is_active:
                continue
            try:
                if job.state is JobState.RUNNING:
                    why = f"node {node.name} not responding"
                    # the failure ledger's record first, whether the job is repaired or requeued
                    self.training.incident(node.name, job.job_id, "node failure", now, why)
                    repaired = self.training.replacements.job_lost_node(job, node.name, NOT_RESPONDING, why, now)
                    if repaired is not None:
                        actions += repaired
                        continue
                    if self.state.lose_node(job, node.name, now, why):
                        continue
                    survivors = [n for n in job.nodes if n != node.name]
                    attempt = job.restart_count
                    self.state.node_failed_job(job, now, f"node {node.name} not responding")
                    if survivors:
                        actions.append(Terminate(job.job_id, attempt, survivors, "node_fail"))
                else:
                    lifecycle.cleaned(job)
                    self.state.release_resources(job)
                    self.state.record(now, [(job, EventKind.CLEANED, {"node": node.name})])
            except StorageError:
                continue
        self.state.clear_node(node)
        return actions

    def update_nodes(self, who: Identity, names: list[str], state: str | None, reason: str | None) -> list[Action]:
        """``scontrol update nodename=.. state=drain|resume|undrain|down|idle reason=..``."""
        if not who.admin:
            raise PermissionDenied()
        for name in names:
            if name not in self.state.nodes:
                raise InvalidRequest(f"Invalid node name specified: {name}")
        st = (state or "").upper()
        if st not in ("", "DRAIN", "RESUME", "UNDRAIN", "DOWN", "IDLE", "FAIL"):
            raise InvalidRequest(f"Invalid node state specified: {state}")
        if st in ("DRAIN", "DOWN", "FAIL") and not reason:
            raise InvalidRequest("You must specify a reason when DOWNING or DRAINING a node. Request denied")
        now = self.state.clock.now()
        actions: list[Action] = []
        for name in names:
            node = self.state.nodes[name]
            if st in ("DRAIN", "FAIL"):
                node.drain = True
            elif st == "DOWN":
                node.admin_down = True
                for job_id in self.state.job_ids_on(name):
                    job = self.state.jobs.get(job_id)
                    if job is not None and job.state is JobState.RUNNING and name in job.nodes:
                        attempt, nodes = job.restart_count, job.nodes
                        why = f"node {name} set DOWN"
                        repaired = self.training.replacements.job_lost_node(job, name, SET_DOWN, why, now)
                        if repaired is not None:
                            actions += repaired
                            continue
                        if self.state.lose_node(job, name, now, why):
                            actions.append(Terminate(job.job_id, attempt, [name], "node_fail"))
                            continue
                        self.state.node_failed_job(job, now, f"node {name} set DOWN")
                        actions.append(Terminate(job.job_id, attempt, nodes, "node_fail"))
            elif st in ("RESUME", "UNDRAIN", "IDLE"):
                if node.reason.startswith(QUARANTINE_PREFIX):  # the failure ledger counts afresh from here
                    self.state.ledger.resume(now, name, who.user)
                node.drain = False
                if st != "UNDRAIN":
                    node.admin_down = False
                    if not node.responding and node.registered:
                        node.last_seen = now  # give a silent agent a fresh SlurmdTimeout
                        node.responding = True
            if st in ("RESUME", "UNDRAIN", "IDLE") and not node.drain and not node.admin_down:
                node.reason = ""
                node.reason_time = None
                node.reason_user = ""
            elif reason:
                node.reason = reason
                node.reason_time = now
                node.reason_user = who.user
            self.state.put_node(node)
        return actions
