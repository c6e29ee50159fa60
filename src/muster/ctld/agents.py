"""What agents tell the controller: registrations (a node with less than its configuration
says is drained with Slurm's reason), heartbeats (what runs, what ended and is
being reported, faults of the node, its health check's verdict). Heartbeats also reconcile
memory with the nodes: a batch job its node neither runs nor reports, for a few
heartbeats, is lost (``ClusterState.node_failed_job``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from muster.core.confhash import config_hash
from muster.core.config import Config
from muster.core.errors import MusterError
from muster.core.states import HEALTH_DRAIN_PREFIX, JobState
from muster.ctld.actions import Action
from muster.ctld.launches import Launches
from muster.ctld.nodes import NodeRuntime
from muster.ctld.replacement import HEALTH_CHECK
from muster.ctld.state import ClusterState, LostWatch
from muster.ctld.training import Training
from muster.ctld.wire import message
from muster.protocol.messages import Attempt, Heartbeat, Register
from muster.protocol.versions import MIN_PROTOCOL, PROTOCOL

log = logging.getLogger("musterctld")

OLD_AGENT = "Agent too old"  # the drain reason's start for an agent under MinAgentProtocol


class Agents:
    def __init__(self, state: ClusterState, launches: Launches, training: Training) -> None:
        self.state = state
        self.launches = launches
        self.training = training
        # srun --no-allocate steps running now: job id -> its nodes (``ctld.noalloc``)
        self.unallocated: dict[int, set[str]] = {}
        # The wire protocol each node's agent registered with (``protocol.versions``):
        # what ``dispatch`` writes to it. A node not registered since this controller
        # started is written to in the oldest protocol accepted.
        self.protocols: dict[str, int] = {}
        # The hash of the controller's own muster.conf, read once per configuration it
        # runs (a reconfigure replaces ``state.config``); None: unreadable, nothing compared.
        self._ours: tuple[Config | None, str | None] = (None, None)

    def protocol(self, node: str) -> int:
        return self.protocols.get(node, MIN_PROTOCOL)

    def register(self, body: Register | Mapping[str, Any], protocol: int = PROTOCOL) -> dict[str, Any]:
        """An agent (re)registers: it answers again, with what it runs; the answer names
        the runs it must end (``kill``) and this controller's protocol. ``protocol``: the
        one its request was written in (checked to be in range already)."""
        msg = message(Register, body)
        now = self.state.clock.now()
        node = self.state.node(msg.node)
        node.registered = True
        node.responding = True
        node.silent = False
        node.last_seen = now
        node.addr = msg.addr or node.addr
        node.port = msg.port or node.port
        node.agent_start_time = msg.agent_start_time
        node.boot_time = msg.boot_time
        node.version = msg.version
        node.containment = msg.containment or ""
        self.protocols[node.name] = protocol
        self.check_config(node, msg.config_hash)
        self._check_protocol(node, protocol, now)
        low = self._low_resources(node, msg)
        if low and not node.drain:
            node.drain = True
            node.reason = low
            node.reason_time = now
            node.reason_user = "root"
            self.state.put_node(node)
            log.warning("node %s: drained at registration: %s", node.name, low)
        if node.admin_down and node.reason == "Not responding" and self.state.config.return_to_service >= 1:
            node.admin_down = False
            node.reason = ""
            self.state.put_node(node)
        return {"ok": True, "kill": self._stale_jobs(node, msg.running), "protocol": PROTOCOL}

    def _check_protocol(self, node: NodeRuntime, protocol: int, now: float) -> None:
        """``MinAgentProtocol=N``: a node whose agent speaks an older protocol keeps what it
        runs and takes no new work (drained, as Slurm drains a node for its reasons) until
        its agent registers with protocol N or later, or the key is lowered or unset (seen
        at the next heartbeat after ``scontrol reconfigure``), which undrains it. A node
        drained for another reason keeps that reason."""
        minimum = self.state.config.get_int("MinAgentProtocol", 0)
        ours = node.drain and node.reason.startswith(OLD_AGENT)
        if protocol < minimum:
            reason = (
                f"{OLD_AGENT}: protocol {protocol} (muster {node.version or 'unknown'}) < MinAgentProtocol={minimum}"
            )
            if (node.drain and not ours) or node.reason == reason:
                return
            node.drain, node.reason, node.reason_time, node.reason_user = True, reason, now, "root"
            self.state.put_node(node)
            log.warning("node %s: drained: %s", node.name, reason)
        elif ours:
            node.drain, node.reason, node.reason_time = False, "", None
            self.state.put_node(node)
            log.info("node %s: its agent's protocol %d is accepted again: in service", node.name, protocol)

    def _low_resources(self, node: NodeRuntime, msg: Register) -> str:
        """Why a node that registers has less than its configuration says, in Slurm's
        words ("" when it has enough). An agent that emulates its node reports the
        configuration's CPUs and memory (``emulated``), and ``SlurmdParameters=config_overrides``
        trusts the configuration whatever is reported, as in Slurm."""
        params = (self.state.config.get("SlurmdParameters") or "").lower().split(",")
        if "config_overrides" in (p.strip() for p in params):
            return ""
        conf = self.state.config.node(node.name)
        if not msg.emulated and conf is not None:
            if msg.real_memory is not None and msg.real_memory < conf.real_memory:
                return f"Low RealMemory (reported:{msg.real_memory} < 100.00% of configured:{conf.real_memory})"
            if msg.cpus is not None and msg.cpus < conf.cpus:
                return f"Low CPUs (reported:{msg.cpus} < configured:{conf.cpus})"
            topology = ("Sockets", "SocketsPerBoard", "Boards", "CoresPerSocket", "ThreadsPerCore")
            if any(key in conf.params for key in topology) and None not in (
                msg.sockets,
                msg.cores_per_socket,
                msg.threads_per_core,
            ):
                reported = (msg.sockets or 0) * (msg.cores_per_socket or 0) * (msg.threads_per_core or 0)
                configured = conf.sockets * conf.cores_per_socket * conf.threads_per_core
                if reported < configured:
                    return f"Low socket*core*thread count (reported:{reported} < configured:{configured})"
        reported_gpus = node.gpus if msg.gpus is None else msg.gpus
        if reported_gpus < node.gpus:
            return f"gres/gpu count reported lower than configured ({reported_gpus} < {node.gpus})"
        return ""

    def heartbeat(self, body: Heartbeat | Mapping[str, Any]) -> dict[str, Any]:
        msg = message(Heartbeat, body)
        now = self.state.clock.now()
        node = self.state.node(msg.node)
        if not node.registered:
            raise MusterError("node must register")
        node.responding = True
        node.silent = False
        node.last_seen = now
        if node.drain and node.reason.startswith(OLD_AGENT) or self.state.config.get("MinAgentProtocol"):
            self._check_protocol(node, self.protocol(node.name), now)  # a reconfigured minimum
        # Runs that ended here and whose reports are on their way: not lost.
        self._watch_lost(node, dict(msg.ended) | dict(msg.running), now)
        if msg.progress is not None:
            self.training.progress(node.name, msg.progress)
        if msg.config_hash is not None:
            self.check_config(node, msg.config_hash)
        return {"ok": True, "kill": self._stale_jobs(node, msg.running), "protocol": PROTOCOL}

    def config_hash(self) -> str | None:
        """``core.confhash`` of the configuration file this controller runs."""
        config = self.state.config
        if self._ours[0] is not config:
            try:
                with open(config.path, "rb") as f:
                    digest: str | None = config_hash(f.read())
            except OSError:
                digest = None
            self._ours = (config, digest)
        return self._ours[1]

    def check_config(self, node: NodeRuntime, reported: str | None) -> None:
        """An agent said which muster.conf it runs (``reported``; None: an agent that does
        not say, muster 0.2.0): one that differs from the controller's is logged once per
        node and change, in Slurm's words, and kept for ``scontrol show node`` and
        ``muster_node_config_mismatch``; it is not drained (Slurm does not either)."""
        ours = self.config_hash()
        before = (node.config_hash, node.config_mismatch)
        mismatch = (ours or "") if reported and reported != ours else ""
        node.config_hash = reported or ""
        if (node.config_hash, mismatch) == before or not reported or (not mismatch and not before[1]):
            node.config_mismatch = mismatch
            return
        if mismatch:
            log.error(
                "Node %s appears to have a different muster.conf than the musterctld (hash %s vs the controller's %s)",
                node.name,
                reported,
                ours,
            )
        else:
            log.info("node %s: its muster.conf is the controller's again", node.name)
        node.config_mismatch = mismatch

    def node_faults(self, body: Heartbeat | Mapping[str, Any]) -> list[Action]:
        """What a heartbeat says is wrong with its node: a failed Prolog (drain, requeue the
        job held), Epilog (drain) or GPU (drain, requeue its jobs elsewhere), and the last
        health check (drain on failure with its reason; a pass returns a node that the
        health check had drained)."""
        msg = message(Heartbeat, body)
        node = self.state.node(msg.node)
        actions: list[Action] = []
        now = self.state.clock.now()
        for fault in msg.faults:
            reason = (fault.reason or f"{fault.kind} failed")[:1024]
            if fault.kind == "gpu":  # drain, and requeue the jobs on it elsewhere
                actions += self.training.gpu_fault(node.name, reason)
                continue
            job = self.state.jobs.get(fault.job_id) if fault.job_id is not None else None
            if fault.kind == "prolog" and job is not None:
                if job.state is JobState.RUNNING and job.restart_count == (fault.attempt or 0):
                    # the launch's own failure: recorded, drained (or not: the job's own) and held
                    actions += self.launches.launch_failed(job.job_id, fault.attempt or 0, reason, "prolog", node.name)
                    continue
            kind = fault.kind if fault.kind in ("prolog", "epilog") else "health"
            self.state.node_fault(node.name, kind, now, job=job, evidence=reason, drain=reason)
        health = msg.health
        if health is not None:
            if not health.ok:
                reason = health.reason
                if not reason.startswith(HEALTH_DRAIN_PREFIX):
                    reason = HEALTH_DRAIN_PREFIX + (reason or "HealthCheckProgram failed")
                fresh = not node.drain  # the failure ledger records each drain, not each check
                if self.state.drain(node.name, reason[:1024]):  # newly failed
                    actions += self._replace_off(node.name, reason)
                if fresh and node.drain:
                    self.state.node_fault(node.name, "health", now, evidence=reason, counted=True)
            elif node.drain and node.reason.startswith(HEALTH_DRAIN_PREFIX):
                node.drain = False
                node.reason, node.reason_time, node.reason_user = "", None, ""
                self.state.put_node(node)
                log.info("node %s: its health check passes again; back in service", node.name)
        return actions

    def _replace_off(self, name: str, reason: str) -> list[Action]:
        """A failed health check drains the node and leaves its jobs running, except those
        that asked for replacements (``--spare-nodes``): their share moves to another node
        (``ctld.replacement``); where none can take it they run on, as before."""
        actions: list[Action] = []
        now = self.state.clock.now()
        for job_id in self.state.job_ids_on(name):
            job = self.state.jobs.get(job_id)
            if job is None or job.spec.spare_nodes <= 0:
                continue
            repaired = self.training.replacements.job_lost_node(job, name, HEALTH_CHECK, reason, now)
            actions += repaired or []
        return actions

    def _stale_jobs(self, node: NodeRuntime, running: list[Attempt]) -> list[int]:
        """Jobs an agent runs that, as far as the controller knows, should not run there
        (an srun --no-allocate step's job, ``ctld.noalloc``, runs where it was placed)."""
        kill = []
        for job_id, attempt in running:
            job = self.state.jobs.get(job_id)
            if job is None:
                if node.name not in self.unallocated.get(job_id, ()):
                    kill.append(job_id)
                continue
            here = node.name in job.nodes
            if not (job.is_active and here and attempt == job.restart_count):
                if not (job.completing and here):
                    kill.append(job_id)
        return kill

    def _watch_lost(self, node: NodeRuntime, known: dict[int, int], now: float) -> None:
        """Reconcile, while running, what the controller believes with what the node runs:
        a batch job this node hosts that its agent neither runs nor reports as ended, for
        longer than a few heartbeats, is lost: it ends NODE_FAIL (requeued when allowed)
        and its resources are freed. A launch still under way is not judged, unless it has
        been under way far longer than a launch can take."""
        mono = self.state.clock.monotonic()
        launch_grace = 2.0 * self.state.config.message_timeout + 40.0
        for job_id in self.state.job_ids_on(node.name):
            job = self.state.jobs.get(job_id)
            if job is None or job.state is not JobState.RUNNING or job.batch_host != node.name:
                continue
            if job.spec.interactive:
                continue  # no batch script runs for srun/salloc allocations
            since = self.state.launching.get(job_id)
            if job_id in known or (since is not None and mono - since < launch_grace):
                self.state.lost.pop(job_id, None)
                continue
            watch = self.state.lost.setdefault(job_id, LostWatch(now))
            if now - watch.since > max(10.0, 3 * self.state.heartbeat_interval):
                self.state.lost.pop(job_id, None)
                self.state.launch_answered(job_id)
                log.warning(
                    "job %s: its node %s neither runs it nor reports its end; ending it NODE_FAIL", job_id, node.name
                )
                self.state.node_failed_job(job, now, "job vanished from its node")
